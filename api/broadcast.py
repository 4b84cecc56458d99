"""Fan-out of applied row changes to live subscribers (the websocket edge).

The Replicator calls `Broadcaster.on_applied(txn, first_seq)` after each transaction is
committed to Redis. That call is synchronous and never awaits (STYLE rule 11): it appends
the changes to a bounded ring buffer and hands each one to the subscribers whose filter
matches. Lag is judged once per burst (what the Replicator hands over before the event loop
runs again): a subscriber still holding a full queue from earlier bursts is cut off
(`Closed` 1013), so a slow client can never slow the stream or the other clients.

Fan-out costs per filter, not per subscriber: subscribers with equal filters form a group, each
change is matched once per group, and what one burst publishes for a group is one `Batch`
that every member queues. A batch is encoded once for all of them, either as one `change`
message per entry (each entry's JSON is cached per projection) or as `changes` messages that
carry many entries each (`Batch.messages`, the websocket's `batch` mode).

Sending shares the event loop with the Replicator, the lease and the health checks, and a send
that the socket's buffers accept never suspends: 200 subscribers of one message per change could
keep the loop for seconds (issue 25). Every websocket send therefore goes through the hub's
`SendPacer`, which yields to the loop after each send and, while other work is waiting, holds the
sends to a fixed share of the loop's time; subscribers that fall behind that pace overflow their
queue and are cut off (1013), the others and the apply carry on.

Sequence numbers are the Replicator's: the i-th change of a transaction has
`first_seq + i`, and the mirror keeps the counter in Redis, so they keep increasing across
restarts. A subscriber may ask for everything after a sequence number it has already seen;
what is still in the ring is replayed, and anything older is reported as a `Gap` first, never
skipped silently. A resume that arrives before this process has published anything is
settled at the first publish (contiguous, a gap, or a counter that went back). `stream_id`
names this process's stream: a client that passes it back gets an explicit gap if it
changed, even when the numbers would look contiguous.

    Broadcaster ── ring: deque[Entry] (bounded, for resume)
        └── _Group per distinct filter ── open Batch (this burst's matching entries)
              └── Subscription × N ── deque[Batch | Gap] (bounded in live changes)
                                       closed: None | Closed(code, reason)
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from api.event_filter import EventFilter, FilterError
from api.pacing import SendPacer
from service.binlog.canonical import row_change_to_dict
from service.binlog.rowchange import RowChange
from service.transactions import Transaction

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_LAGGING",
    "CLOSE_STREAM_RESET",
    "MAX_BATCH_CHARS",
    "Batch",
    "Broadcaster",
    "Closed",
    "Entry",
    "EventFilter",
    "FilterError",
    "Gap",
    "LoggedEntry",
    "SendPacer",
    "Subscription",
    "changes_messages",
    "encode_change",
]

log = logging.getLogger(__name__)

CLOSE_GOING_AWAY = 1001  # the server is shutting down
CLOSE_STREAM_RESET = 1012  # sequence numbers restarted: resubscribe without `after`
CLOSE_LAGGING = 1013  # "try again later": the subscriber's queue overflowed


# --- encoding ------------------------------------------------------------------------------

MAX_BATCH_CHARS = 256 * 1024  # a `changes` message stops growing past this much JSON
_CHANGES_HEAD = '{"type":"changes","changes":['


def _project(row: dict[str, Any] | None, columns: tuple[str, ...]) -> dict[str, Any] | None:
    return None if row is None else {c: row[c] for c in columns if c in row}


def encode_change(seq: int, change: RowChange, columns: tuple[str, ...] | None = None) -> bytes:
    """The websocket message for one change: the canonical row-change JSON
    (`service.binlog.canonical`, docs/row-format.md) plus `type` and `seq`."""
    message = {"type": "change", "seq": seq, **row_change_to_dict(change)}
    if columns is not None:
        message["before"] = _project(message["before"], columns)
        message["after"] = _project(message["after"], columns)
    return orjson.dumps(message)


def changes_messages(parts: list[str]) -> list[str]:
    """`change` messages joined into `{"type": "changes", "changes": [...]}` messages of about
    MAX_BATCH_CHARS each (a larger single change travels alone), keeping their order."""
    messages: list[str] = []
    chunk: list[str] = []
    size = 0
    for part in parts:
        if chunk and size + len(part) > MAX_BATCH_CHARS:
            messages.append(_CHANGES_HEAD + ",".join(chunk) + "]}")
            chunk, size = [], 0
        chunk.append(part)
        size += len(part) + 1
    if chunk:
        messages.append(_CHANGES_HEAD + ",".join(chunk) + "]}")
    return messages


# --- the ring, subscriptions and the hub ----------------------------------------------------


class Entry:
    """One applied change with its sequence number; its JSON is encoded once per projection."""

    __slots__ = ("_full", "_projected", "change", "seq")

    def __init__(self, seq: int, change: RowChange) -> None:
        self.seq = seq
        self.change = change
        self._full: str | None = None
        self._projected: dict[tuple[str, ...], str] | None = None

    def message(self, columns: tuple[str, ...] | None = None) -> str:
        """The `change` message (text) for this entry, projected to `columns` if given."""
        if columns is None:
            if self._full is None:
                self._full = encode_change(self.seq, self.change).decode()
            return self._full
        if self._projected is None:
            self._projected = {}
        text = self._projected.get(columns)
        if text is None:
            text = self._projected[columns] = encode_change(self.seq, self.change, columns).decode()
        return text


class LoggedEntry(Entry):
    """A change read back from the Redis change log (a resume older than the ring, ops #26): the
    log keeps no binlog position, server_id or gtid, so those are null in its message."""

    __slots__ = ("doc",)

    def __init__(self, seq: int, doc: dict[str, Any]) -> None:  # no RowChange: never in the ring
        self.seq = seq
        self.doc = doc  # op, schema, table, before, after, ts (JSON values)
        self._full = None
        self._projected = None

    def message(self, columns: tuple[str, ...] | None = None) -> str:
        message = {"type": "change", "seq": self.seq, **self.doc}
        message.update(position=None, server_id=None, gtid=None)
        if columns is not None:
            message["before"] = _project(message["before"], columns)
            message["after"] = _project(message["after"], columns)
        return orjson.dumps(message).decode()


class Batch:
    """Entries queued as one unit: what one burst published for one filter.

    Every subscriber with that filter queues the same Batch, so matching and encoding happen once
    for all of them. A batch grows only until it is sealed: when a reader first takes from it, or
    when the burst ends; later entries go to a new batch.
    """

    __slots__ = ("_messages", "columns", "entries", "replayed", "sealed")

    def __init__(
        self, columns: tuple[str, ...] | None, entries: list[Entry] | None = None, *, replayed: bool = False
    ) -> None:
        self.columns = columns
        self.entries: list[Entry] = entries if entries is not None else []
        self.replayed = replayed  # replayed from the ring: not counted against the queue bound
        self.sealed = replayed
        self._messages: list[str] | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def messages(self) -> list[str]:
        """The `changes` messages carrying these entries in order, built once for every reader."""
        self.sealed = True
        if self._messages is None:
            self._messages = changes_messages([e.message(self.columns) for e in self.entries])
        return self._messages


@dataclass(frozen=True, slots=True)
class Gap:
    """Changes `first`..`last` (inclusive) will never reach this subscriber."""

    first: int
    last: int | None  # None: unknown (the requested position is not from this stream)
    reason: str

    def message(self) -> str:
        return orjson.dumps(
            {"type": "gap", "from_seq": self.first, "to_seq": self.last, "reason": self.reason}
        ).decode()


@dataclass(frozen=True, slots=True)
class Closed:
    """Why a subscription ended: a websocket close code and a reason for the client."""

    code: int
    reason: str


class Subscription:
    """One subscriber's view of the stream: pending messages and whether it was closed.

    Read it change by change (`get`) or a whole queued batch at a time (`take`); do not mix both.
    """

    def __init__(self, sid: int, flt: EventFilter, maxsize: int) -> None:
        self.id = sid
        self.filter = flt
        self.maxsize = maxsize
        self.closed: Closed | None = None
        self._items: deque[Batch | Gap] = deque()
        self._head_taken = 0  # entries of the head batch already returned by get()
        self._resume_after: int | None = None  # resume asked before this hub saw any change
        self._final: Closed | None = None  # close with this once the queued items are taken
        self._wake = asyncio.Event()

    @property
    def pending(self) -> int:
        """Changes and gaps queued and not yet taken."""
        return sum(len(i) if isinstance(i, Batch) else 1 for i in self._items) - self._head_taken

    @property
    def lagging(self) -> bool:
        """Live changes queued (replays do not count) reach the bound."""
        live = sum(len(i) for i in self._items if isinstance(i, Batch) and not i.replayed)
        head = self._items[0] if self._items else None
        if isinstance(head, Batch) and not head.replayed:
            live -= self._head_taken
        return live >= self.maxsize

    def _push(self, item: Batch | Gap) -> None:
        self._items.append(item)
        self._wake.set()

    def _close(self, closed: Closed) -> None:
        if self.closed is None:
            self.closed = closed
            self._items.clear()
            self._head_taken = 0
            self._wake.set()

    def _close_after_pending(self, closed: Closed) -> None:
        """End once what is queued has been taken (shutdown: the last applied changes still go out)."""
        self._final = closed
        if not self._items:
            self._close(closed)

    def _drained(self) -> Closed | None:
        if self._final is not None:
            self._close(self._final)
        return self.closed

    def get_nowait(self) -> Entry | Gap | Closed | None:
        """The next change or gap, the reason this subscription ended, or None when nothing is pending."""
        if self.closed is not None:
            return self.closed
        if not self._items:
            return self._drained()
        head = self._items[0]
        if isinstance(head, Gap):
            self._items.popleft()
            return head
        head.sealed = True  # it must not grow behind this reader's back
        entry = head.entries[self._head_taken]
        self._head_taken += 1
        if self._head_taken == len(head.entries):
            self._items.popleft()
            self._head_taken = 0
        return entry

    def take_nowait(self) -> Batch | Gap | Closed | None:
        """Everything the next queued unit holds (a batch or a gap), like get_nowait otherwise."""
        if self.closed is not None:
            return self.closed
        if not self._items:
            return self._drained()
        head = self._items.popleft()
        if isinstance(head, Batch):
            head.sealed = True
            if self._head_taken:
                head = Batch(head.columns, head.entries[self._head_taken :], replayed=head.replayed)
                self._head_taken = 0
        return head

    async def get(self) -> Entry | Gap | Closed:
        """The next change or gap, or the reason this subscription ended (returned, then forever)."""
        while (item := self.get_nowait()) is None:
            self._wake.clear()
            await self._wake.wait()
        return item

    async def take(self) -> Batch | Gap | Closed:
        """The next batch or gap, or the reason this subscription ended (returned, then forever)."""
        while (item := self.take_nowait()) is None:
            self._wake.clear()
            await self._wake.wait()
        return item

    async def wait_closed(self) -> Closed:
        while self.closed is None:
            self._wake.clear()
            await self._wake.wait()
        return self.closed


class _Group:
    """The subscribers that share one filter: each change is matched once for all of them, and
    what one burst publishes for them is one Batch that they all queue."""

    __slots__ = ("batch", "filter", "subs")

    def __init__(self, flt: EventFilter) -> None:
        self.filter = flt
        self.subs: dict[int, Subscription] = {}
        self.batch: Batch | None = None  # the open batch; None or sealed: start a new one

    def add(self, entry: Entry) -> None:
        batch = self.batch
        if batch is None or batch.sealed:
            batch = self.batch = Batch(self.filter.columns)
            for sub in self.subs.values():
                sub._push(batch)
        batch.entries.append(entry)


class Broadcaster:
    """Publishes applied changes to subscribers; register `on_applied` with the Replicator."""

    def __init__(self, *, buffer_size: int = 10_000, queue_size: int = 1_000) -> None:
        if queue_size < 1 or buffer_size < 0:
            raise ValueError("queue_size must be >= 1 and buffer_size >= 0")
        self.queue_size = queue_size
        self.pacer = SendPacer()  # every websocket send goes through it (api/routes/events.py)
        self.stream_id = uuid.uuid4().hex[:12]
        self._ring: deque[Entry] = deque(maxlen=buffer_size)
        self._subs: dict[int, Subscription] = {}
        self._groups: dict[EventFilter, _Group] = {}
        self._next_sid = 0
        self._next_seq: int | None = None  # the seq the next change should carry
        self._waiting: list[Subscription] = []  # resumed before the first change (see _replay)
        self.closed = False
        self._burst_open = False
        # (schema, table) -> True when its rows are never written to Redis (no usable key): such
        # changes are not sent (ops #26); set by the app from the Replicator
        self.unkeyed: Callable[[str, str], bool] | None = None
        # counters read by the metrics collector
        self.published = 0  # changes received from the Replicator
        self.dropped = 0  # subscribers cut off because their queue overflowed
        self.gaps = 0  # gap messages queued (resume too old, or a hole in the sequence)
        self.subscribed = 0  # subscriptions ever made

    # -- producer side: called by the Replicator; never awaits --------------------------------

    def on_applied(self, txn: Transaction, first_seq: int) -> None:
        """Hook for the Replicator: `txn` is committed in Redis; its i-th change is `first_seq + i`."""
        if self.closed:
            return
        expected = self._next_seq
        if expected is not None and first_seq < expected:
            log.warning(
                "sequence went back from %d to %d: starting a new stream",
                expected,
                first_seq,
                extra={"expected_seq": expected, "first_seq": first_seq},
            )
            self._reset()
        elif expected is not None and first_seq > expected:
            hole = Gap(expected, first_seq - 1, "changes were not published (sequence hole)")
            log.warning("sequence hole %d..%d", expected, first_seq - 1)
            self._ring.clear()  # a resume must not silently step over the hole
            for sub in list(self._subs.values()):
                self._deliver(sub, hole)
        self._next_seq = first_seq + len(txn.changes)
        if self._waiting:
            self._resolve_waiting(first_seq)
        if not self._burst_open:
            self._open_burst()
        groups = list(self._groups.values())
        ring = self._ring
        unkeyed = self.unkeyed
        for offset, change in enumerate(txn.changes):
            if unkeyed is not None and unkeyed(change.schema, change.table):
                continue  # never applied to Redis: not sent (its seq stays unused)
            entry = Entry(first_seq + offset, change)
            ring.append(entry)
            for group in groups:
                if group.filter.matches(change):
                    group.add(entry)
        self.published += len(txn.changes)

    def _open_burst(self) -> None:
        """Judge lag once per burst: the changes published before the event loop runs again
        (the Replicator hands over a whole applied batch at once). A subscriber that still holds
        `queue_size` or more changes from earlier bursts is cut; one that keeps up gets every
        burst whole, however many rows it has. Each burst starts new batches."""
        for sub in list(self._subs.values()):
            if sub.lagging:
                self._cut_lagging(sub)
        for group in self._groups.values():
            group.batch = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside an event loop: every call is its own burst
            return
        self._burst_open = True
        loop.call_soon(self._close_burst)

    def _close_burst(self) -> None:
        self._burst_open = False

    def _resolve_waiting(self, first_seq: int) -> None:
        """Subscribers that resumed before this hub saw a change learn now whether they missed any."""
        for sub in self._waiting:
            after, sub._resume_after = sub._resume_after, None
            if after is None or sub.closed is not None:
                continue
            if first_seq > after + 1:
                self._deliver(sub, Gap(after + 1, first_seq - 1, "applied before this server started"))
            elif first_seq <= after:
                reason = f"seq {after} is ahead of this stream (next is {first_seq})"
                self._deliver(sub, Gap(after + 1, None, reason))
        self._waiting.clear()

    def _deliver(self, sub: Subscription, gap: Gap) -> None:
        self.gaps += 1
        if sub.lagging:
            self._cut_lagging(sub)
            return
        sub._push(gap)
        group = self._groups.get(sub.filter)
        if group is not None:
            group.batch = None  # later changes must queue after the gap, not in an earlier batch

    def _cut_lagging(self, sub: Subscription) -> None:
        self.dropped += 1
        self._drop(sub, Closed(CLOSE_LAGGING, f"subscriber lagging: more than {sub.maxsize} events queued"))
        log.info("websocket subscriber %d dropped: queue full", sub.id, extra={"subscriber": sub.id})

    def _reset(self) -> None:
        self._ring.clear()
        self._waiting.clear()
        self.stream_id = uuid.uuid4().hex[:12]
        for sub in list(self._subs.values()):
            self._drop(sub, Closed(CLOSE_STREAM_RESET, "stream restarted: resubscribe without 'after'"))

    def _drop(self, sub: Subscription, closed: Closed) -> None:
        self._forget(sub)
        sub._close(closed)

    def _forget(self, sub: Subscription) -> None:
        self._subs.pop(sub.id, None)
        group = self._groups.get(sub.filter)
        if group is not None and group.subs.pop(sub.id, None) is not None and not group.subs:
            del self._groups[sub.filter]

    # -- consumer side ---------------------------------------------------------------------

    @property
    def last_seq(self) -> int | None:
        """The sequence number of the newest published change (None before the first)."""
        return None if self._next_seq is None else self._next_seq - 1

    @property
    def oldest_seq(self) -> int | None:
        """The oldest sequence number still in the ring (None when it is empty)."""
        return self._ring[0].seq if self._ring else None

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def subscribe(
        self,
        flt: EventFilter,
        *,
        after: int | None = None,
        stream: str | None = None,
        queue_size: int | None = None,
        prelude: Iterable[Batch | Gap] = (),
    ) -> Subscription:
        """A new subscription; with `after`, replay matching changes newer than that seq first.

        Synchronous on purpose: the replay snapshot and the registration happen with no await
        in between, so no change can fall between them.
        """
        if self.closed:
            raise RuntimeError("broadcaster is closed")
        sub = Subscription(self._next_sid, flt, queue_size or self.queue_size)
        for item in prelude:  # read before subscribing (the change log, ops #26): sent first
            sub._push(item)
        self._next_sid += 1
        self.subscribed += 1
        if after is not None and self._next_seq is None and stream in (None, self.stream_id):
            # Sequence numbers come from the mirror and outlive this process: whether `after`
            # is still contiguous is known at the first publish.
            sub._resume_after = after
            self._waiting.append(sub)
        elif after is not None:
            for item in self._replay(flt, after, stream):
                sub._push(item)
        self._subs[sub.id] = sub
        group = self._groups.get(flt)
        if group is None:
            group = self._groups[flt] = _Group(flt)
        group.batch = None  # the open batch holds changes from before this subscription
        group.subs[sub.id] = sub
        return sub

    def _replay(self, flt: EventFilter, after: int, stream: str | None) -> list[Batch | Gap]:
        last = self.last_seq
        if stream is not None and stream != self.stream_id:
            return [Gap(after + 1, None, f"stream {stream!r} is gone (now {self.stream_id!r})")]
        if last is None:
            return [Gap(after + 1, None, "nothing published yet on this stream")]
        if after > last:
            return [Gap(after + 1, None, f"seq {after} is ahead of this stream (next is {last + 1})")]
        items: list[Batch | Gap] = []
        oldest = self.oldest_seq
        if oldest is None or after + 1 < oldest:
            # Everything from after+1 up to the oldest kept entry (or the newest seq) is gone.
            end = last if oldest is None else oldest - 1
            if end >= after + 1:
                items.append(Gap(after + 1, end, "requested changes are no longer buffered"))
        self.gaps += len(items)
        entries = [e for e in self._ring if e.seq > after and flt.matches(e.change)]
        if entries:
            items.append(Batch(flt.columns, entries, replayed=True))
        return items

    def unsubscribe(self, sub: Subscription) -> None:
        self._forget(sub)
        if sub in self._waiting:
            self._waiting.remove(sub)

    def close(self) -> None:
        """End every subscription with 1001 (server going away) once it has taken what is queued
        for it; later publishes are ignored. Each stays counted until its handler unsubscribes."""
        self.closed = True
        for sub in list(self._subs.values()):
            sub._close_after_pending(Closed(CLOSE_GOING_AWAY, "server shutting down"))
