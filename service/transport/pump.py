"""The reader loop's synchronous half: a batch of raw events in, committed transactions out
into the consumer's queue.

`BinlogSource._pump` awaits the socket and, when the queue is full, the consumer; everything
between (heartbeat filter, decode, the events inside TRANSACTION_PAYLOAD, table-map registry,
transaction assembly, the hand-off to the queue, the time slice) runs here, compiled with the
decoder (`make fast`): on one-row transactions this per-event and per-transaction work cost as
much as decoding the events did, interpreted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from service.binlog import BinlogDecoder
from service.binlog.constants import LOG_EVENT_ARTIFICIAL_F, EventType
from service.binlog.events import Event, FormatDescriptionEvent, TableMapEvent, TransactionPayloadEvent
from service.binlog.schema import TableSchema
from service.checkpoint import FORMAT_DESCRIPTION_EVENT, BinlogPosition, Checkpoint, EventMark
from service.errors import HistoryMismatch
from service.history import ExpectedTransaction, describe_mark
from service.queues import RowQueue
from service.transactions import Transaction, TransactionAssembler

__all__ = ["EventPump"]

_HEARTBEAT = int(EventType.HEARTBEAT)
_HEARTBEAT_V2 = int(EventType.HEARTBEAT_V2)
_TYPE_AT = 4  # the type code's offset in the common header


class EventPump:
    """`load(raws)` a batch (returns its bytes and heartbeats), then `run(deadline)` until
    `pending` is False. Committed transactions go straight into `queue` while it has room; a run
    returns the one the caller must deliver itself (awaiting room, or after its own work for a
    DDL when `hold_ddl`). Transactions ending at or before `skip_until` (already delivered
    before a reconnect) are dropped; it clears at the first one past it.
    `seen` (events of the last run), `delivered` (transactions it queued), `last` (the last of
    them) and `last_ts` are for the caller to publish. TRANSACTION_PAYLOAD is
    flattened here as `BinlogDecoder.decode_events` does, without its generator per event.

    `expect`: the history check (docs/mirror.md). The dump then starts at the event ending at
    the checkpoint, and the first real event (not one the server makes up: the fake ROTATE, the
    FORMAT_DESCRIPTION resent) must be that event, else HistoryMismatch; its transaction
    ends at `skip_until` and is dropped. A FORMAT_DESCRIPTION is such an event only when it is
    the expected one (the mark of a checkpoint at a file's start).

    `expect_txn`: the same check for a resume by GTID (service/history.py): the dump starts just
    before the last applied transaction, which must come first in its stream (a MariaDB domain,
    a MySQL uuid), with the stored commit event; it is dropped, and `found` is where it ends in
    this source's binlog."""

    def __init__(
        self,
        decoder: BinlogDecoder,
        assembler: TransactionAssembler,
        table_maps: dict[tuple[str, str], TableSchema],
        queue: RowQueue[object],
        *,
        skip_until: BinlogPosition | None = None,
        hold_ddl: bool = False,
        expect: EventMark | None = None,
        expect_txn: ExpectedTransaction | None = None,
    ) -> None:
        self.decoder = decoder
        self.assembler = assembler
        self.table_maps = table_maps  # (schema, table) -> its latest TABLE_MAP, for the API
        self.queue = queue
        self.skip_until = skip_until
        self.hold_ddl = hold_ddl
        self.expect = expect
        self.expect_txn = expect_txn
        self.found: Checkpoint | None = None  # the end of the expected transaction, once seen
        self.seen = 0  # events decoded by the last run() (payloads' inner events included)
        self.delivered = 0  # transactions the last run() put in the queue
        self.last: Transaction | None = None  # the last transaction put in the queue
        self.last_ts = 0  # timestamp of the latest event that had one
        self._raws: list[bytes] = []
        self._next = 0
        self._inner: Iterator[Event] | None = None  # a TRANSACTION_PAYLOAD's events still to go

    @property
    def pending(self) -> bool:
        return self._next < len(self._raws) or self._inner is not None

    def load(self, raws: list[bytes]) -> tuple[int, int]:
        """Start on a new batch; returns its (bytes, heartbeats)."""
        assert not self.pending, "load() before the previous batch was run through"
        self._raws = [raw for raw in raws if not _is_heartbeat(raw)]
        self._next = 0
        return sum(map(len, raws)), len(raws) - len(self._raws)

    def run(self, deadline: float) -> Transaction | None:
        """Decode and queue until a transaction must be delivered by the caller (returned),
        `time.perf_counter()` passes `deadline`, or the batch is through (both None)."""
        self.seen = self.delivered = 0
        clock = time.perf_counter
        raws, feed = self._raws, self.decoder.feed
        while True:
            inner = self._inner
            if inner is not None:
                event = next(inner, None)
                if event is None:
                    self._inner = None
                    continue
            elif self._next < len(raws):
                decoded = feed(raws[self._next])
                self._next += 1
                if decoded is None:
                    continue
                event = decoded
                if type(event) is TransactionPayloadEvent:
                    self._inner = event.events  # its events follow it, before the next raw one
            else:
                return None
            txn = self._event(event)
            if txn is not None and not self._queued(txn):
                return txn
            # The clock at each transaction's end and every 8th event, not at every event.
            if (txn is not None or not self.seen & 7) and clock() > deadline:
                return None

    def _event(self, event: Event) -> Transaction | None:
        if self.expect is not None:
            self._check(event, self.expect)
        self.seen += 1
        ts = event.header.timestamp
        if ts:
            self.last_ts = ts
        if type(event) is TableMapEvent:
            table = event.table
            self.table_maps[table.schema, table.table] = table
        return self.assembler.feed(event)

    def _check(self, event: Event, expect: EventMark) -> None:
        h = event.header
        if (
            h.flags & LOG_EVENT_ARTIFICIAL_F
            or (h.log_pos == 0 and self._inner is None)
            or (type(event) is FormatDescriptionEvent and expect.type_code != FORMAT_DESCRIPTION_EVENT)
        ):
            return  # made up by the server for this dump
        if h.offset == expect.offset and h.type_code != expect.type_code:
            if type(event) is TransactionPayloadEvent or self._inner is not None:
                return  # a compressed transaction: its commit event inside carries the mark
        self.expect = None
        found = EventMark.of(event)
        if found != expect:
            raise HistoryMismatch(
                f"the event at offset {expect.offset} is not the one applied: stored "
                f"{describe_mark(expect)}, the source has {describe_mark(found)}"
            )

    def _queued(self, txn: Transaction) -> bool:
        """Put `txn` in the queue unless the caller must deliver it; True when it is done with."""
        expected = self.expect_txn
        if expected is not None and expected.check(txn.gtid, txn.end):
            self.expect_txn, self.found = None, txn.end
            return True
        skip = self.skip_until
        if skip is not None:
            if txn.end.position <= skip:
                return True
            self.skip_until = None
        rows = len(txn.changes)
        queue = self.queue
        if (self.hold_ddl and txn.ddl) or queue.full(rows):
            return False
        queue.put_nowait(txn, rows)
        self.delivered += 1
        self.last = txn
        return True


def _is_heartbeat(raw: bytes) -> bool:
    return len(raw) > _TYPE_AT and (raw[_TYPE_AT] == _HEARTBEAT or raw[_TYPE_AT] == _HEARTBEAT_V2)
