"""The Replicator: source -> bounded queue -> RedisMirror, with retry, lease, resync and status.

    run()
      └── loop: wait for the writer lease (standby) ─> session ─> on a retriable error back off
          session (TaskGroup):
            reader   async for txn in source: queue.put(txn)    (bounded: backpressure)
            applier  queue -> batches -> mirror.apply -> on_applied hooks (in order)
            lease    renew every ttl/3; LeaseLost ends the session and goes back to standby
            resyncs  one task per table being re-read after a DDL (service/pipeline/resync.py)
            stats    refresh bytes-behind every few seconds

Every session starts from the checkpoint STORED in Redis, never from memory, so a failure at any
point resumes exactly after the last applied transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiomysql
from prometheus_client import Histogram
from redis.asyncio import Redis

from service.binlog.rowchange import Op
from service.binlog.schema import TableSchema
from service.checkpoint import Checkpoint, StartPoint, parse_start
from service.errors import (
    ConfigError,
    DecodeError,
    LeaseLost,
    PositionLost,
    ReplicatorError,
    SinkError,
)
from service.pipeline.catalog import Catalog, with_table_map
from service.pipeline.ddl import ddl_actions
from service.pipeline.resync import resync_table
from service.pipeline.status import (
    ErrorStatus,
    ReplicatorStatus,
    ResyncStatus,
    SourceStatus,
    State,
    TableStatus,
)
from service.queues import RowQueue
from service.settings import Settings
from service.sink.client import redis_client
from service.sink.keys import KeyLayout, split_key
from service.sink.mirror import MirrorOptions, RedisMirror, SentBatch
from service.sink.plan import ActionKind, TableAction
from service.transactions import TableFilter, Transaction
from service.transport.backoff import Backoff
from service.transport.connection import connect, map_errors

__all__ = ["AppliedHook", "Replicator", "TransactionSource"]

log = logging.getLogger(__name__)

# key columns whose key text is 0x-hex (service.sink.values.key_text), for a resync's reread
_BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})

AppliedHook = Callable[[Transaction, int], None]
# A batch takes up to BATCH_MAX transactions but stops adding once it holds BATCH_ROWS rows. Its
# small transactions share script calls of up to `chunk_rows` changes (RedisMirror.send).
BATCH_MAX = 1000
BATCH_ROWS = 10_000


class TransactionSource(Protocol):
    """What the replicator needs from `service.transport.source.BinlogSource`."""

    start_checkpoint: Checkpoint | None

    async def __aenter__(self) -> Any: ...
    async def __aexit__(self, *exc: object) -> None: ...
    def __aiter__(self) -> AsyncIterator[Transaction]: ...


SourceFactory = Callable[[Settings, StartPoint, TableFilter], TransactionSource]


def _default_source(settings: Settings, start: StartPoint, flt: TableFilter) -> TransactionSource:
    from service.transport.source import BinlogSource

    return BinlogSource(settings, start, table_filter=flt)


@dataclass(slots=True)
class _Flight:
    """A batch written to Redis whose replies are not read yet."""

    units: list[tuple[Transaction, list[TableAction]]]
    started: float  # perf_counter when its planning began
    sent: SentBatch

    @property
    def ddl(self) -> bool:
        return any(txn.ddl for txn, _ in self.units)


@dataclass(slots=True)
class _TableCounters:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    last_change_ts: int | None = None
    resync: ResyncStatus | None = None


class Replicator:
    def __init__(
        self,
        settings: Settings,
        *,
        source_factory: SourceFactory | None = None,
        on_applied: Sequence[AppliedHook] = (),
        backoff: Backoff | None = None,
    ) -> None:
        if settings.redis is None or settings.mysql is None:
            raise ConfigError("the replicator needs --mysql and --redis")
        self.settings = settings
        self.filter = TableFilter.from_lists(settings.tables, settings.exclude_tables)
        self.on_applied: list[AppliedHook] = list(on_applied)
        self._source_factory = source_factory or _default_source
        self._backoff = backoff or Backoff(base=0.2, cap=5.0)
        self.layout = KeyLayout(settings.key_prefix)
        self.catalog = Catalog(self.filter)
        self.redis: Redis = redis_client(
            settings.redis.url.get_secret_value(), socket_timeout=10, socket_connect_timeout=5
        )
        options = MirrorOptions(
            json_mode=settings.value_mode == "json",
            chunk_size=settings.chunk_rows,
            table_step=settings.table_step_rows,
            changelog_maxlen=settings.changelog_maxlen or None,
            lease_ttl=settings.lease_ttl_seconds,
        )
        self.mirror = RedisMirror(self.redis, self.layout, self.catalog.key_columns, options)
        self._stop = asyncio.Event()
        self._source: Any = None
        self._queue: RowQueue[Transaction] = RowQueue(settings.queue_size, settings.queue_rows)
        self._mirrored: set[tuple[str, str]] = set()
        self._resyncs: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._ctl: aiomysql.Connection | None = None
        self._tg: asyncio.TaskGroup | None = None
        # status
        self._state, self._since = State.STARTING, time.time()
        self._leader = False
        self._redis_ok = False
        self._applied: Checkpoint | None = None
        self._applied_ts: int | None = None
        self._received: Transaction | None = None
        self._in_flight = (0, 0)
        self._txns_applied = self._rows_applied = 0
        self._errors = ErrorStatus()
        self._tables: dict[tuple[str, str], _TableCounters] = {}
        self._bytes_behind: int | None = None
        # counters of sources from earlier sessions (the current one is read live)
        self._restarts = 0  # sessions restarted after a retriable error
        self._decode_errors = 0
        self._past_reconnects = 0
        self._past_events: Counter[str] = Counter()
        self._past_ignorable = self._past_invalid = 0
        self._past_bytes = self._past_heartbeats = 0
        self._past_maps: dict[tuple[str, str], TableSchema] = {}  # latest TABLE_MAP per table
        # Seconds per Redis apply call (one batch of transactions). Not registered anywhere: the
        # API registers it in its app registry (api/main.py), next to apply_delay_seconds.
        self.apply_seconds = Histogram(
            "binlog_mirror_apply_seconds",
            "Seconds from planning a batch of transactions (up to 1,000) to reading Redis' replies",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=None,
        )

    # -- public ----------------------------------------------------------------------------------
    def add_applied_hook(self, hook: AppliedHook) -> None:
        """Call `hook(txn, first_seq)` after each applied transaction (sync; must never block)."""
        self.on_applied.append(hook)

    def stop(self) -> None:
        """Ask run() to return after the transaction batch in flight (never half-applied)."""
        self._stop.set()

    async def run(self) -> None:
        """Replicate until stop(); raises on a non-retriable error (state FAILED)."""
        failures = 0
        try:
            while not self._stop.is_set():
                applied_before = self._txns_applied
                try:
                    await self._wait_for_lease()
                    if self._stop.is_set():
                        break
                    await self._session()
                except LeaseLost as exc:
                    self._error(exc)
                    self._leader = False
                    log.warning("lost the writer lease (%s); back to standby", exc)
                except ReplicatorError as exc:
                    if isinstance(exc, PositionLost):
                        exc = self._position_lost(exc)
                    self._error(exc)
                    if not exc.retriable:
                        self._set_state(State.FAILED)
                        log.error("replication stopped: %s", exc)
                        raise exc
                    failures = 1 if self._txns_applied > applied_before else failures + 1
                    self._restarts += 1
                    self._set_state(State.RECONNECTING)
                    delay = self._backoff.delay(failures)
                    log.warning("replication interrupted: %s; retrying in %.2fs", exc, delay)
                    await self._sleep(delay)
            self._set_state(State.STOPPED)
            where = f"at {self._applied.position}" if self._applied else "before the first checkpoint"
            log.info("stopped cleanly %s", where)
        finally:
            if self._leader and await self.mirror.release_lease():
                log.info("writer lease released")
            await self.mirror.close()
            await self.redis.aclose()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or less if stop() is called. Not asyncio.wait_for(): on Python 3.11 it can
        swallow a cancellation (service/sink/client.py)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    def _position_lost(self, exc: PositionLost) -> PositionLost:
        """The same error, with what it means for the mirror and the way out (docs/mirror.md)."""
        where = self._applied.position if self._applied else "?"
        lost = PositionLost(
            f"the stored checkpoint {where} is no longer on the source (binlog purged?): {exc}. "
            f"Way out: delete the mirror's keys ({self.layout.prefix}:*), copy the tables again with "
            "`binlog-mirror snapshot` (parallel, docs/pipeline.md; it stores the checkpoint `run` "
            "streams from), then start `binlog-mirror run` again; or, for small tables, just start "
            "again with on_no_checkpoint=now (the service copies them itself)"
        )
        lost.__cause__ = exc
        return lost

    # -- lease -----------------------------------------------------------------------------------
    async def _wait_for_lease(self) -> None:
        waited: set[bool] = set()  # the reasons already logged: True = standby, False = no Redis
        while not self._stop.is_set():
            self._redis_ok = await self.mirror.ping()
            if self._redis_ok and await self.mirror.acquire_lease():
                self._leader = True
                if True in waited:
                    log.info("took over the writer lease (instance %s)", self.mirror.token)
                return
            if self._redis_ok not in waited:
                if self._redis_ok:
                    log.info("standby: another instance holds the writer lease %s", self.layout.lease_key)
                else:  # not "standby": nobody may hold the lease, it just cannot be seen
                    log.warning("waiting for Redis (unreachable) to take the writer lease")
                waited.add(self._redis_ok)
            await self._sleep(self.settings.lease_ttl_seconds / 3)

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_ttl_seconds / 3)
            await self.mirror.renew_lease()
            self._redis_ok = True

    # -- session ---------------------------------------------------------------------------------
    async def _session(self) -> None:
        self._set_state(State.STARTING)
        checkpoint = await self.mirror.load_checkpoint()
        if checkpoint is None:
            policy = self.settings.on_no_checkpoint
            if policy == "refuse":
                raise ConfigError(
                    f"no checkpoint at {self.layout.checkpoint_key} and on_no_checkpoint=refuse: "
                    "copy the tables first with `binlog-mirror snapshot` (parallel, docs/pipeline.md; "
                    "it stores the checkpoint to stream from), or start once with --on-no-checkpoint "
                    "now (mirror from the current position, after copying the tables) or start "
                    "(replay all binlogs still on the source)"
                )
            start: StartPoint = "start" if policy == "start" else parse_start(self.settings.start)
        else:
            start = checkpoint
        self._applied = checkpoint
        self._queue = RowQueue(self.settings.queue_size, self.settings.queue_rows)
        source = self._source_factory(self.settings, start, self.filter)
        self._source = source
        # The lease is renewed from now on, also while the source connects and runs its preflight
        # (which may wait a few seconds for this mirror's previous dump thread to go away).
        lease = asyncio.create_task(self._renew_loop(), name="lease")
        try:
            async with source:
                self._ctl = await connect(self.settings)
                with map_errors("preparing the catalog session"):
                    async with self._ctl.cursor() as cur:  # TIMESTAMP defaults in UTC, as decoded
                        await cur.execute("SET SESSION time_zone = '+00:00'")
                await self._bootstrap(checkpoint, source)
                self._set_state(State.STREAMING)
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(_watch(lease), name="lease")
                    tg.create_task(self._stats_loop(), name="stats")
                    reader = tg.create_task(self._reader(source), name="reader")
                    for tid in await self.mirror.pending_resyncs():
                        parts = split_key(tid)
                        self._start_resync(tg, (parts[0], parts[1]))
                    self._tg = tg
                    await self._applier(reader)
                    raise _Stopped()
        except BaseExceptionGroup as group:
            exc = _first(group)
            if not isinstance(exc, _Stopped):
                raise exc from None
        finally:
            self._tg = None
            for task in self._resyncs.values():
                task.cancel()
            self._resyncs.clear()
            if self._ctl is not None:
                self._ctl.close()
                self._ctl = None
            self._fold_source(source)
            self._source = None
            lease.cancel()
            await asyncio.wait({lease})  # never raises the task's error; outer cancellation still does
            if not lease.cancelled():
                lease.exception()  # retrieved (a LeaseLost already ended the session via _watch)

    async def _bootstrap(self, checkpoint: Checkpoint | None, source: TransactionSource) -> None:
        """Reconcile the mirrored tables with the table selection, atomically with the checkpoint."""
        assert self._ctl is not None
        self._mirrored = _tables(await self.mirror.mirrored_tables())
        wanted = set(await self.catalog.wanted_tables(self._ctl))
        # rows a cut-short RENAME moved to a name that is not selected (now): nobody mirrors them.
        # Selected, not existing: a mirrored name the source does not have now is left to the
        # statements still to replay (`RENAME TABLE a TO tmp, b TO a, tmp TO b` cut short holds
        # rows under `tmp`, which the replay moves on; dropping them here lost them).
        moved = _tables(await self.mirror.moved_to_tables(checkpoint))
        dropped = {(s, t) for s, t in self._mirrored | moved if not self.filter.wants(s, t)}
        actions = [
            TableAction(ActionKind.DROP, s, t, reason="no longer selected") for s, t in sorted(dropped)
        ]
        actions += [
            TableAction(ActionKind.RESYNC, s, t, reason="newly selected")
            for s, t in sorted(wanted - self._mirrored)
        ]
        end = checkpoint or source.start_checkpoint
        if end is None:
            raise ConfigError("the source did not report its start position")
        if not actions and checkpoint is not None:
            return
        for s, t in wanted:
            await self._table_info(s, t)
        log.info(
            "bootstrap at %s: %d table(s) to copy, %d to drop",
            end.position,
            len(wanted - self._mirrored),
            len(dropped),
        )
        await self.mirror.apply([(Transaction((), (), None, end.ts, end), actions)])
        self._note_actions(actions)
        self._applied = end

    async def _reader(self, source: TransactionSource) -> None:
        async for txn in source:
            self._received = txn
            await self._queue.put(txn, len(txn.changes))

    async def _applier(self, reader: asyncio.Task[None]) -> None:
        """Batches from the queue to Redis, two in flight: batch N+1 is planned and written while
        Redis runs batch N (safe: every call checks the checkpoint chain, so after a failure the
        later calls apply nothing). A batch is finished (replies read, hooks run) as soon as
        nothing else is queued; a DDL batch before and after it is sent, as the table actions
        and catalog of the batches after it depend on it."""
        self._in_flight = (0, 0)
        flight: _Flight | None = None
        carry: Transaction | None = None  # taken from the queue, starts the next batch
        while not self._stop.is_set():
            if flight is not None and (flight.ddl or carry is None and self._queue.empty()):
                await self._finish(flight)
                flight = None
                continue
            if carry is None:
                if reader.done() and self._queue.empty():
                    reader.result()
                    return
                get = asyncio.ensure_future(self._queue.get())
                stop = asyncio.ensure_future(self._stop.wait())
                try:
                    await asyncio.wait({get, stop, reader}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.cancel()
                if not get.done():
                    get.cancel()
                    continue
                carry = get.result()
            batch, carry = self._next_batch(carry)
            if batch[0].ddl and flight is not None:
                await self._finish(flight)
                flight = None
            sent = await self._send(batch)
            if flight is not None:
                await self._finish(flight)
            flight = sent
        if flight is not None:  # stopping: wait for the batch in flight, never abandon it half-read
            await self._finish(flight)

    def _next_batch(self, first: Transaction) -> tuple[list[Transaction], Transaction | None]:
        """`first` and what is queued behind it, up to BATCH_MAX transactions or BATCH_ROWS rows;
        a DDL transaction is a batch of its own (returned second when it ends the batch)."""
        batch = [first]
        rows = len(first.changes)
        while len(batch) < BATCH_MAX and rows < BATCH_ROWS and not first.ddl and not self._queue.empty():
            nxt = self._queue.get_nowait()
            if nxt.ddl:
                return batch, nxt
            rows += len(nxt.changes)
            batch.append(nxt)
        return batch, None

    async def _send(self, batch: list[Transaction]) -> _Flight:
        # Empty transactions (all rows filtered out) only move the checkpoint: keep the last one.
        batch = [t for i, t in enumerate(batch) if t.changes or t.ddl or i == len(batch) - 1]
        for schema, table in {(ch.schema, ch.table) for txn in batch for ch in txn.changes}:
            if not self.catalog.known(schema, table):
                await self._table_info(schema, table)
        inserted = {
            (c.schema, c.table) for t in batch for i in t.partial if (c := t.changes[i]).op is Op.INSERT
        }
        for schema, table in inserted:
            info = self.catalog.get(schema, table)
            if info is not None and info.unknown_defaults:  # read when the table was empty
                await self._table_info(schema, table)
        batch = [self._complete_inserts(t) if t.partial else t for t in batch]
        units: list[tuple[Transaction, list[TableAction]]] = []
        for txn in batch:
            actions = [a for d in txn.ddl for a in ddl_actions(d, self.filter, self._mirrored)]
            units.append((txn, actions))
        flight = _Flight(units, time.perf_counter(), await self.mirror.send(units))
        txns, rows = self._in_flight
        self._in_flight = (txns + len(batch), rows + sum(len(t.changes) for t in batch))
        return flight

    async def _finish(self, flight: _Flight) -> None:
        units = flight.units
        firsts = await flight.sent.replies()
        self.apply_seconds.observe(time.perf_counter() - flight.started)
        txns, rows = self._in_flight
        self._in_flight = (txns - len(units), rows - sum(len(t.changes) for t, _ in units))
        self._redis_ok = True
        for (txn, actions), first in zip(units, firsts, strict=True):
            self._applied, self._applied_ts = txn.end, txn.ts
            self._txns_applied += 1
            self._rows_applied += len(txn.changes)
            tables = self._tables
            for ch in txn.changes:  # once per row: plain attribute updates
                key = (ch.schema, ch.table)
                c = tables.get(key)
                if c is None:
                    c = tables[key] = _TableCounters()
                op = ch.op
                if op is Op.INSERT:
                    c.inserts += 1
                elif op is Op.UPDATE:
                    c.updates += 1
                else:
                    c.deletes += 1
                c.last_change_ts = ch.ts
            if txn.ddl:
                for d in txn.ddl:
                    for s, t in d.tables:
                        self.catalog.forget(s, t or None)
                self._note_actions(actions)
            for hook in self.on_applied:
                try:
                    hook(txn, first)
                except Exception:  # a broken hook must not stop replication
                    log.exception("on_applied hook %r failed", hook)

    def _complete_inserts(self, txn: Transaction) -> Transaction:
        """A partial INSERT image (MINIMAL) omits the columns the statement left at their default:
        fill them from the catalog, so the row in Redis equals the row on the source. (Partial
        UPDATE/DELETE images need nothing: the planner merges the present columns.)"""
        changes = list(txn.changes)
        for i in txn.partial:
            ch = changes[i]
            if ch.op is not Op.INSERT or ch.after is None:
                continue
            info = self.catalog.get(ch.schema, ch.table)
            missing = {k: v for k, v in info.defaults.items() if k not in ch.after} if info else {}
            if missing:
                changes[i] = replace(ch, after={**missing, **ch.after})
        return replace(txn, changes=tuple(changes))

    def _note_actions(self, actions: Sequence[TableAction]) -> None:
        """Follow applied table actions. A resync in flight was restarted (TRUNCATE), moved
        (RENAME) or ended (DROP) by the apply script itself, under a new generation: its task
        follows here; a write it still has in flight is refused by that generation. After a
        TRUNCATE or RENAME a copy starts whether or not a task was seen running (one may have
        just stopped at the fence before it): it ends at once if there is no mark."""
        tg = self._tg
        for a in actions:
            key = (a.schema, a.table)
            if a.kind is ActionKind.DROP:
                self._mirrored.discard(key)
                self._cancel_resync(key)
            elif a.kind is ActionKind.RENAME:
                self._mirrored.discard(key)
                self._cancel_resync(key)
                assert a.new_schema is not None and a.new_table is not None
                new = (a.new_schema, a.new_table)
                self._mirrored.add(new)
                self.catalog.forget(*new)
                if tg is not None:
                    self._start_resync(tg, new)
            elif a.kind is ActionKind.TRUNCATE and tg is not None:
                self._start_resync(tg, key)
            elif a.kind in (ActionKind.REGISTER, ActionKind.RESYNC):
                self._mirrored.add(key)
            if a.kind is ActionKind.RESYNC and tg is not None:
                self._start_resync(tg, key)

    # -- resync ----------------------------------------------------------------------------------
    def _cancel_resync(self, key: tuple[str, str]) -> None:
        task = self._resyncs.pop(key, None)
        if task is not None:
            task.cancel()

    def _start_resync(self, tg: asyncio.TaskGroup, key: tuple[str, str]) -> None:
        self._cancel_resync(key)
        self._resyncs[key] = tg.create_task(self._resync(key), name=f"resync {key[0]}.{key[1]}")

    async def _resync(self, key: tuple[str, str]) -> None:
        schema, table = key
        counters = self._tables.setdefault(key, _TableCounters())
        started = time.time()
        # before any SELECT: every row read from here on is at least as new as this mark
        generation = await self.mirror.resync_generation(schema, table)
        if generation is None:  # none, or ended or fenced by a statement applied meanwhile
            self._resync_done(key)
            return
        self._set_state(State.RESYNCING)
        counters.resync = ResyncStatus(started, 0, None, "resync")
        conn = await connect(self.settings)
        try:
            with map_errors("resync session"):
                async with conn.cursor() as cur:
                    await cur.execute("SET SESSION time_zone = '+00:00'")
            # A fresh definition, swapped in by load() in one step. Never forget() it here: the
            # applier plans transactions across awaits, and a change planned while the table is
            # unknown to the catalog counts as unkeyable and is skipped (rows were lost that way).
            info = await self._table_info(schema, table, conn)

            def progress(done: int, total: int | None, reread: int) -> None:
                counters.resync = ResyncStatus(started, done, total, "resync", reread)
                if reread:
                    log.info("resync %s.%s: %d rows read again (partial images)", schema, table, reread)
                else:
                    of = total if total is not None else "?"
                    log.info("resync %s.%s: %d/%s rows", schema, table, done, of)

            await resync_table(
                conn,
                self.mirror,
                schema,
                table,
                info.key,
                generation=generation,
                chunk_rows=self.settings.resync_chunk_rows,
                progress=progress,
                utc_columns=frozenset(c.name for c in info.columns if c.type == "TIMESTAMP"),
                binary_columns=frozenset(c.name for c in info.columns if c.type in _BINARY_TYPES),
                source_position=getattr(self._source, "source_position", None),
            )
        finally:
            conn.close()
            self._resync_done(key)

    def _resync_done(self, key: tuple[str, str]) -> None:
        owner = self._resyncs.get(key)
        if owner is None or owner is asyncio.current_task():  # else a restarted copy owns it
            self._tables[key].resync = None
            self._resyncs.pop(key, None)
        if not self._resyncs and self._state == State.RESYNCING:
            self._set_state(State.STREAMING)

    async def _table_info(self, schema: str, table: str, conn: aiomysql.Connection | None = None) -> Any:
        conn = conn or self._ctl
        assert conn is not None
        with map_errors(f"reading the definition of {schema}.{table}"):
            return await self.catalog.load(conn, schema, table)

    # -- stats and status ------------------------------------------------------------------------
    async def _stats_loop(self) -> None:
        while True:
            # measured from the APPLIED checkpoint: what is still to read plus what is read
            # and not yet in Redis (the source's end of binlog is the other end)
            lag_bytes = getattr(self._source, "lag_bytes", None)
            applied = self._applied
            if lag_bytes is not None and applied is not None:
                with contextlib.suppress(ReplicatorError):
                    self._bytes_behind = await lag_bytes(applied.position)
            await asyncio.sleep(2.0)

    def _fold_source(self, source: object) -> None:
        """Keep a finished session's source counters (sources live for one session)."""
        stats = getattr(source, "stats", None)
        self._past_reconnects += int(getattr(stats, "reconnects", 0))
        self._past_bytes += int(getattr(stats, "bytes", 0))
        self._past_heartbeats += int(getattr(stats, "heartbeats", 0))
        self._past_maps.update(getattr(stats, "table_maps", {}))
        totals = getattr(source, "decoder_totals", None)
        if totals is not None:
            by_type, ignorable, invalid = totals()
            self._past_events.update(by_type)
            self._past_ignorable += ignorable
            self._past_invalid += invalid

    def _counters(self) -> tuple[int, tuple[tuple[str, int], ...], int, int]:
        """(reconnects, events by type, ignorable skipped, invalid text values), all sessions."""
        src = self._source
        reconnects = self._restarts + self._past_reconnects
        reconnects += int(getattr(getattr(src, "stats", None), "reconnects", 0))
        events = Counter(self._past_events)
        ignorable, invalid = self._past_ignorable, self._past_invalid
        totals = getattr(src, "decoder_totals", None)
        if totals is not None:
            by_type, more_ignorable, more_invalid = totals()
            events.update(by_type)
            ignorable += more_ignorable
            invalid += more_invalid
        return reconnects, tuple(sorted(events.items())), ignorable, invalid

    def _set_state(self, state: State) -> None:
        if state != self._state:
            log.info("state: %s -> %s", self._state, state)
            self._state, self._since = state, time.time()

    def _error(self, exc: BaseException) -> None:
        retriable = bool(getattr(exc, "retriable", False))
        self._errors = ErrorStatus(self._errors.count + 1, repr(exc), time.time(), retriable)
        if isinstance(exc, SinkError):
            self._redis_ok = False
        if isinstance(exc, DecodeError):
            self._decode_errors += 1

    def status(self) -> ReplicatorStatus:
        now = time.time()
        src = self._source
        info = getattr(src, "info", None)
        stats = getattr(src, "stats", None)
        waiting = self._queue.qsize() + self._in_flight[0]
        rows_waiting = self._queue.rows + self._in_flight[1]
        last_event_ts = getattr(stats, "last_event_ts", None) or None
        last_packet = getattr(stats, "last_event_at", 0.0) or 0.0
        lag: float | None = None
        if self._applied_ts is not None or self._applied is not None:
            # liveness (issue 25): a stream that went silent is behind by its silence, at least
            silent = now - last_packet if last_packet else None
            fresh = silent is not None and silent < 2 * self.settings.heartbeat_seconds
            if waiting == 0 and fresh:
                lag = 0.0
            elif waiting == 0 and silent is not None:
                lag = silent
            elif self._applied_ts:
                lag = max(0.0, now - self._applied_ts)
            elif last_packet:
                lag = max(0.0, now - last_packet)
        maps = {**self._past_maps, **getattr(stats, "table_maps", {})}
        names_from = str(getattr(stats, "column_names", "binlog"))
        settling = self.mirror.planner.settling
        tables = []
        for key in sorted(set(self._tables) | self._mirrored):
            c = self._tables.get(key, _TableCounters())
            t = self.catalog.get(*key)
            table_map = maps.get(key)
            skipped = self.mirror.planner.skipped.rows.get(key, 0)
            tables.append(
                TableStatus(
                    schema=key[0],
                    table=key[1],
                    table_id=table_map.table_id if table_map else None,
                    columns=with_table_map(t.columns, table_map, names_from) if t else (),
                    primary_key=(t.key or ()) if t else (),
                    key_source=t.key_source if t else "primary",
                    mirrored=bool(t is None or t.key),
                    inserts=c.inserts,
                    updates=c.updates,
                    deletes=c.deletes,
                    skipped_rows=skipped,
                    last_change_ts=c.last_change_ts,
                    resync=c.resync,
                    settle_until=settling.get(self.layout.table_id(*key)) if settling else None,
                )
            )
        received = self._received
        reconnects, events_by_type, ignorable, invalid = self._counters()
        return ReplicatorStatus(
            state=self._state,
            since=self._since,
            source=SourceStatus(
                flavour=getattr(info, "flavor", None),
                version=getattr(info, "version_string", None),
                server_id=getattr(info, "server_id", None),
                connected=bool(getattr(stats, "connected", False)),
                url=self.settings.mysql.redacted() if self.settings.mysql else None,
            ),
            received_position=received.end.position if received else None,
            received_gtid=received.gtid if received else None,
            received_gtid_set=received.end.gtid_set if received else None,
            applied=self._applied,
            last_event_ts=last_event_ts,
            lag_seconds=lag,
            bytes_behind=self._bytes_behind,
            transactions_waiting=waiting,
            rows_waiting=rows_waiting,
            transactions_applied=self._txns_applied,
            rows_applied=self._rows_applied,
            redis_reachable=self._redis_ok,
            leader=self._leader,
            instance_id=self.mirror.token,
            errors=self._errors,
            tables=tuple(tables),
            reconnects=reconnects,
            decode_errors=self._decode_errors,
            events_by_type=events_by_type,
            skipped_ignorable_events=ignorable,
            invalid_text_values=invalid,
            bytes_received=self._past_bytes + int(getattr(stats, "bytes", 0)),
            heartbeats=self._past_heartbeats + int(getattr(stats, "heartbeats", 0)),
            last_packet_at=last_packet or None,
        )


async def _watch(task: asyncio.Task[None]) -> None:
    """Inside the session's TaskGroup: fail with the outer task's error (LeaseLost) when it fails."""
    await asyncio.shield(task)


class _Stopped(Exception):
    """Internal: ends the session's TaskGroup on a clean stop."""


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The exception that matters in a TaskGroup failure: non-retriable first, then any error."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup[Any]) -> None:
        for e in g.exceptions:
            if isinstance(e, BaseExceptionGroup):
                walk(e)
            else:
                leaves.append(e)

    walk(group)
    for e in leaves:
        if isinstance(e, ReplicatorError) and not e.retriable:
            return e
    for e in leaves:
        if not isinstance(e, _Stopped | asyncio.CancelledError):
            return e
    return leaves[0]


def _tables(table_ids: Iterable[str]) -> set[tuple[str, str]]:
    """(schema, table) of each `schema:table` id."""
    return {(p[0], p[1]) for p in map(split_key, table_ids) if len(p) == 2}
