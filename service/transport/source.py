"""`BinlogSource`: committed transactions from a MySQL/MariaDB source, exactly once, in order.

    source = BinlogSource(settings, checkpoint or "now")
    async with source:                      # connect, preflight, first dump (errors raise here)
        async for txn in source:            # Transaction(changes, ddl, gtid, ts, end)
            ...                             # txn.end is the Checkpoint to store with the rows

A reader task reads the socket continuously into a bounded queue (backpressure: when the
consumer is slow the task stops reading and TCP pushes back on the server). That queue is the
only buffer between the source and the replicator's applier, which takes from it directly
(`__anext__`, then `take_nowait()` to fill a batch). On a retriable
error (network, server restart, heartbeat timeout, killed dump thread) the task reconnects with
exponential backoff + jitter and resumes at the end of the last transaction it put in the queue,
with a new decoder: no transaction is lost or repeated. Non-retriable errors (PositionLost,
PreflightError, DecodeError) and permanent ones (SourceAccessDenied) come out of the iterator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiomysql

from service.backoff import Backoff
from service.binlog import BinlogDecoder, DecodeOptions
from service.checkpoint import (
    BinlogPosition,
    Checkpoint,
    CheckpointTracker,
    MariadbGtidPos,
    MysqlGtidSet,
    StartPoint,
    parse_gtid_set,
    parse_start,
)
from service.errors import DecodeError, HistoryMismatch, ReplicatorError, SourceError
from service.queues import RowQueue
from service.settings import Settings
from service.transactions import TableFilter, Transaction, TransactionAssembler
from service.transport.columns import ColumnNames
from service.transport.connection import (
    CONNECT_TIMEOUT,
    QUERY_TIMEOUT,
    BinlogRoom,
    ServerInfo,
    binlog_expiry,
    binlog_files,
    close_connection,
    connect,
    current_checkpoint,
    fetch,
    server_info,
)
from service.transport.preflight import preflight
from service.transport.pump import EventPump
from service.transport.resume import Resume, failover_note, file_mark, gtid_resume, history_mark, resolve
from service.transport.sourcestats import SourceStats, type_names
from service.transport.stream import BinlogStream

__all__ = ["BinlogSource", "SourceStats"]

log = logging.getLogger(__name__)

READ_TIMEOUT_FACTOR = 2.5
SLICE_SECONDS = 0.001  # the longest the reader decodes before letting the other tasks run
# The longest a caller waits for the side connection (held by another caller): every read on it
# is bounded by QUERY_TIMEOUT, and a holder runs at most a reconnect and a few queries.
SIDE_WAIT = CONNECT_TIMEOUT + 2 * QUERY_TIMEOUT
KILL_TIMEOUT = 2.0  # the longest close() spends asking the source to end an old dump thread


@dataclass(slots=True)
class _Session:
    stream: BinlogStream
    decoder: BinlogDecoder
    assembler: TransactionAssembler
    delivered_any: bool = False
    extra: dict[str, object] = field(default_factory=dict)
    head: list[bytes] = field(default_factory=list)  # events read by _start, for the pump first
    resumed_from: str = ""  # the identity stored with the checkpoint this dump resumes


_EOF = object()
_OUR_DUMP_THREAD = (
    "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = %s AND COMMAND LIKE 'Binlog Dump%%' "
    "AND USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1)"
)


class BinlogSource:
    """Async iterator of committed `Transaction`s; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        start: StartPoint | None = None,
        *,
        table_filter: TableFilter | None = None,
        backoff: Backoff | None = None,
        heartbeat: float | None = None,
        queue_size: int | None = None,
        queue_rows: int | None = None,
        non_blocking: bool = False,
        check_source: bool = True,
        follow_failover: bool = True,
        stored_text: bool = False,
    ) -> None:
        self.settings = settings
        # DECIMAL and temporal values as their Redis text where that is their canonical text
        # too (DecodeOptions.stored_text): for a consumer that only writes those texts
        self.stored_text = stored_text
        self.start_point: StartPoint = start if start is not None else parse_start(settings.start)
        self.table_filter = table_filter or TableFilter.from_lists(settings.tables, settings.exclude_tables)
        self.backoff = backoff or Backoff()
        self.heartbeat = heartbeat or settings.heartbeat_seconds
        self.server_id = settings.server_id
        self.non_blocking = non_blocking  # stop (end the iterator) at the end of the binlog
        self.check_source = check_source
        # resume by GTID on another server than the checkpoint's (docs/mirror.md, "Source
        # failover"); off: such a resume goes by file and position, whose check stops it
        self.follow_failover = follow_failover
        self.stats = SourceStats()
        self.info: ServerInfo | None = None
        self.start_checkpoint: Checkpoint | None = None  # the resolved start
        self.received: Transaction | None = None  # the last transaction put in the queue
        self._queue: RowQueue[object] = RowQueue(
            queue_size or settings.queue_size, queue_rows or settings.queue_rows
        )
        self._columns = ColumnNames(self.table_filter)
        self._names_from_schema = False
        self._ctl: aiomysql.Connection | None = None
        self._ctl_lock = asyncio.Lock()
        self._resume: Resume | None = None
        self._session: _Session | None = None
        self._task: asyncio.Task[None] | None = None
        self._done = False
        # dump threads of connections this source gave up on: the server notices a dead dump
        # socket only when it next writes to it, and until then lists the registration that makes
        # the next preflight wait (docs/replication.md); they are KILLed instead
        self._stale_dumps: list[int] = []

    # -- lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> BinlogSource:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect, check the source, resolve the start point and send the dump command.
        Errors here are raised as they are (no retry): a bad URL or config should fail fast."""
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        ctl = await self._control()
        self.info = info = await server_info(ctl)
        if self.check_source:
            await preflight(
                ctl,
                info,
                server_id=self.server_id,
                settle=self.heartbeat * READ_TIMEOUT_FACTOR,
                tables=self.table_filter,
            )
        self._names_from_schema = info.var("binlog_row_metadata").upper() != "FULL"
        self.stats.column_names = "information_schema" if self._names_from_schema else "binlog"
        if self._names_from_schema:
            await self._columns.refresh(ctl)
        self._resume = await resolve(ctl, info, self.start_point)
        self.start_checkpoint = self._resume.checkpoint
        session = await self._open()
        start = self._resume.checkpoint
        resolved = not isinstance(self.start_point, Checkpoint)  # now, start, FILE:POS
        if resolved and start.position.file and not self._resume.gtid_mode:
            # A start point (bootstrap) carries its history's identity too: its file's
            # FORMAT_DESCRIPTION, the first event the dump sends (docs/mirror.md)
            mark = await file_mark(session.stream, session.decoder.file, session.head)
            start = Checkpoint(start.position, start.gtid_set, start.ts, mark, "", info.identity)
            self._resume.checkpoint = self.start_checkpoint = start
        self._task = asyncio.create_task(self._read_loop(session), name="binlog-reader")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._session is not None:
            self._stale_dumps.append(self._session.stream.thread_id)
            await close_connection(self._session.stream.connection)
            self.stats.fold(self._session.decoder.stats)
            self._session = None
        if self._stale_dumps and self._ctl is not None and not self._ctl.closed:
            # only on a side connection still open: close() must not wait for a reconnect
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_TIMEOUT):
                    await self._kill_stale_dumps()
        if self._ctl is not None:
            await close_connection(self._ctl)
            self._ctl = None
        self.stats.connected = False

    # -- iteration -------------------------------------------------------------------------------
    def __aiter__(self) -> BinlogSource:
        return self

    async def __anext__(self) -> Transaction:
        if self._done:
            raise StopAsyncIteration
        queue = self._queue
        item = queue.get_nowait() if queue.qsize() else await queue.get()
        if item is _EOF:
            self._done = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        assert isinstance(item, Transaction)
        return item

    def take_nowait(self) -> Transaction | None:
        """The next transaction when one is queued, else None (also when the queue's head is the
        end or an error: the next `__anext__` raises it). For the applier, which fills a batch
        from what is already waiting."""
        queue = self._queue
        if self._done or not queue.qsize() or not isinstance(queue.peek(), Transaction):
            return None
        item = queue.get_nowait()
        assert isinstance(item, Transaction)
        return item

    def waiting(self) -> tuple[int, int]:
        """(transactions, rows) read and queued, not yet taken."""
        return self._queue.qsize(), self._queue.rows

    # -- position and lag ------------------------------------------------------------------------
    @property
    def position(self) -> Checkpoint | None:
        """End of the last transaction handed to the queue (the resume point on reconnect)."""
        return self._resume.checkpoint if self._resume else None

    async def source_position(self) -> Checkpoint:
        """The source's current end of binlog (SHOW MASTER STATUS / SHOW BINARY LOG STATUS)."""
        async with self._side("reading the source's position") as ctl:
            assert self.info is not None
            return await current_checkpoint(ctl, self.info)

    async def binlog_room(self, since: BinlogPosition) -> BinlogRoom:
        """The binlog bytes from `since` (the replicator passes its applied checkpoint) to the
        source's end of binlog, summed over `since`'s file and every later one (SHOW BINARY
        LOGS); whether `since`'s file is still there; the source's binlog expiry.

        Bytes are None when unknown: `since` has no file name (a start from a GTID set, until its
        first transaction is applied: the dump skips to the GTID without telling where it is), or
        the source lists no binary logs. When `since`'s file was purged, the files still listed are
        counted: a lower bound."""
        async with self._side("listing the binary logs") as ctl:
            files = await binlog_files(ctl)
            expiry = await binlog_expiry(ctl)
        if not since.file or not files:
            return BinlogRoom(None, True, expiry)
        total = 0
        for name, size in files:
            if name == since.file:
                total += max(size - since.pos, 0)
            elif BinlogPosition(name, 0) > since:
                total += size
        return BinlogRoom(total, any(name == since.file for name, _ in files), expiry)

    def caught_up(self, target: BinlogPosition) -> bool:
        """Every transaction up to `target` has been read and handed out."""
        read = self.stats.read_position
        session = self._session
        return (
            read is not None
            and read.file != ""
            and read >= target
            and self._queue.empty()
            and (session is None or not session.assembler.in_transaction)
        )

    # -- internals -------------------------------------------------------------------------------
    async def _control(self) -> aiomysql.Connection:
        """The side connection (preflight, positions, information_schema); reopened when lost
        (a read that timed out closed it)."""
        if self._ctl is None or self._ctl.closed:
            self._ctl = await connect(self.settings)
        return self._ctl

    @contextlib.asynccontextmanager
    async def _side(self, what: str) -> AsyncIterator[aiomysql.Connection]:
        """The side connection, for one caller at a time. The lock is held across I/O whose
        every read is bounded (QUERY_TIMEOUT), and waiting for it is bounded too (SIDE_WAIT)."""
        try:
            async with asyncio.timeout(SIDE_WAIT):
                await self._ctl_lock.acquire()
        except TimeoutError:
            raise SourceError(f"{what}: the side connection stayed busy for {SIDE_WAIT:g} s") from None
        try:
            yield await self._control()
        finally:
            self._ctl_lock.release()

    async def _kill_stale_dumps(self) -> None:
        """End the server side of dump connections given up on (the registration of our
        server_id goes with them), so the next dump or preflight need not wait for the server
        to notice. Best effort: a thread already gone (1094) or an error leaves it to time."""
        async with self._side("ending an old dump thread") as ctl:
            while self._stale_dumps:
                thread = self._stale_dumps.pop()
                with contextlib.suppress(SourceError):
                    # only a dump thread of this user: after a server restart the id may be
                    # someone else's connection
                    if await fetch(ctl, _OUR_DUMP_THREAD, (thread,)):
                        await fetch(ctl, f"KILL CONNECTION {int(thread)}")

    def _decode_options(self) -> DecodeOptions:
        skip_rows = self.table_filter.skips
        if self._names_from_schema:
            columns = self._columns
            return DecodeOptions(
                skip_rows=skip_rows,
                column_names=columns,
                column_charsets=columns.charsets,
                column_members=columns.members,
                stored_text=self.stored_text,
            )
        return DecodeOptions(skip_rows=skip_rows, stored_text=self.stored_text)

    async def _server_info(self) -> ServerInfo:
        """The server's settings, on the side connection; once more on a new connection when the
        old one was lost with the dump's (a failed read closes it, the next use reopens it)."""
        for attempt in (1, 2):
            try:
                async with self._side("reading the source's settings") as ctl:
                    return await server_info(ctl)
            except SourceError:
                if attempt == 2 or self._ctl is None or not self._ctl.closed:
                    raise
        raise AssertionError("unreachable")

    async def _open(self) -> _Session:
        """A new dump connection + decoder + tracker from the resume point."""
        assert self._resume is not None and self.info is not None
        resume = self._resume
        if self._task is not None:
            # a reconnect: the server behind the address may be another one now (a failover)
            info = await self._server_info()
            if info.identity != self.info.identity:
                self._stale_dumps.clear()  # thread ids of the old server
            self.info = info
        if self._stale_dumps:
            with contextlib.suppress(SourceError):
                await self._kill_stale_dumps()
        cp = resume.checkpoint
        by_gtid = None
        if not resume.gtid_mode:
            if not self.follow_failover and cp.source and cp.source != self.info.identity:
                raise HistoryMismatch(
                    f"the source is another server ({self.info.identity}) than the one the checkpoint "
                    f"was read from ({cp.source}), and this mirror does not follow a source failover "
                    "(a Redis Cluster mirror orders transactions by binlog position)"
                )
            async with self._side("reading the source's GTIDs") as ctl:
                by_gtid = await gtid_resume(ctl, self.info, cp)
        resume.by_gtid = by_gtid
        conn = await connect(self.settings)
        stream = BinlogStream(conn, self.info, read_timeout=self.heartbeat * READ_TIMEOUT_FACTOR)
        try:
            await stream.prepare(heartbeat=self.heartbeat, server_id=self.server_id)
            gtids = parse_gtid_set(cp.gtid_set) if cp.gtid_set else None
            mark = history_mark(cp) if not resume.gtid_mode and by_gtid is None else None
            resume.expect = mark
            if by_gtid is not None:
                # From just before the last applied transaction: the source sends it again and
                # the pump compares it (service/history.py); positions of another binlog are
                # meaningless here, the tracker learns this one's from the dump
                resume.skip_until = None
                gtids = by_gtid.dump_from
                await stream.dump_gtid(
                    gtids, server_id=self.server_id, non_block=self.non_blocking, strict=by_gtid.strict
                )
            elif mark is not None:
                # The history check: dump from the start of the event ending at the checkpoint
                # (the pump compares it); its transaction, applied already, is skipped.
                if resume.skip_until is None or resume.skip_until < cp.position:
                    resume.skip_until = cp.position
                await stream.dump_position(
                    BinlogPosition(cp.position.file, mark.offset),
                    server_id=self.server_id,
                    non_block=self.non_blocking,
                )
            elif resume.gtid_mode:
                empty: MysqlGtidSet | MariadbGtidPos = (
                    MariadbGtidPos() if self.info.mariadb else MysqlGtidSet()
                )
                await stream.dump_gtid(gtids or empty, server_id=self.server_id, non_block=self.non_blocking)
            else:
                await stream.dump_position(cp.position, server_id=self.server_id, non_block=self.non_blocking)
        except BaseException:
            stream.close()
            raise
        tracker = CheckpointTracker(cp.position, gtids, self.info.identity, cp)
        decoder = BinlogDecoder(self._decode_options(), file=cp.position.file)
        session = _Session(stream, decoder, TransactionAssembler(tracker, self.table_filter))
        session.resumed_from = cp.source
        self._session = session
        self.stats.connected = True
        if by_gtid is not None:
            where = f"GTID {cp.gtid_set} (after {cp.gtid}, checked against {self.info.identity})"
        else:
            where = f"GTID {cp.gtid_set}" if resume.gtid_mode else str(cp.position)
            where += "" if resume.gtid_mode or not cp.gtid_set else f" [GTID {cp.gtid_set}]"
        log.info("streaming from %s (dump thread %d)", where, stream.thread_id)
        return session

    async def _read_loop(self, session: _Session | None) -> None:
        failures = 0
        while True:
            try:
                if session is None:
                    session = await self._open()
                if await self._pump(session):
                    await self._queue.put(_EOF)
                    return
            except ReplicatorError as exc:
                if not exc.retriable or exc.permanent:  # the consumer reports it (once) and decides
                    log.debug("binlog reader stopped: %s", exc)
                    await self._queue.put(exc)
                    return
                if session is not None and session.delivered_any:
                    failures = 0
                failures += 1
                self._drop(session, exc)
                session = None
                delay = self.backoff.delay(failures)
                log.warning("replication interrupted (%s); reconnecting in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                self.stats.reconnects += 1
            except Exception as exc:  # a bug: hand it to the consumer instead of leaving it waiting
                log.exception("binlog reader failed")
                await self._queue.put(exc)
                return

    def _drop(self, session: _Session | None, exc: Exception) -> None:
        self.stats.connected = False
        self.stats.last_error = str(exc)
        if session is not None:
            self._stale_dumps.append(session.stream.thread_id)
            session.stream.close()
            self.stats.fold(session.decoder.stats)
        self._session = None

    def decoder_totals(self) -> tuple[dict[str, int], int, int]:
        """(events by type name, ignorable events skipped, invalid text values) over every
        decoder this source has used, the current connection's included."""
        stats = self.stats
        by_type = Counter(stats.events_by_type)
        skipped, invalid = stats.skipped_ignorable, stats.invalid_text_values
        session = self._session
        if session is not None:
            by_type.update(type_names(session.decoder.stats))
            skipped += session.decoder.stats.skipped_ignorable
            invalid += session.decoder.stats.invalid_text_values
        return dict(by_type), skipped, invalid

    async def _pump(self, session: _Session) -> bool:
        """Read until an error (raised) or a non-blocking dump's EOF (returns True).

        The counters other tasks read (events, last_event_ts, read_position, delivered) are
        published before each await, not after each event."""
        stats, tracker, resume = self.stats, session.assembler.tracker, self._resume
        assert resume is not None
        pump = EventPump(
            session.decoder,
            session.assembler,
            stats.table_maps,
            self._queue,
            skip_until=resume.skip_until,
            hold_ddl=self._names_from_schema,  # refresh the column names before the next rows
            expect=resume.expect,
            expect_txn=resume.by_gtid.expect if resume.by_gtid is not None else None,
        )
        clock = time.perf_counter
        slice_end = clock() + SLICE_SECONDS
        while True:
            raws: list[bytes] | None = session.head
            if raws:
                session.head = []
            else:
                raws = await session.stream.read_batch()
            if raws is None:
                if pump.expect is not None:
                    raise HistoryMismatch(
                        f"the source's binlog ends before the event at {resume.checkpoint.position.file}:"
                        f"{pump.expect.offset} that the mirror applied last"
                    )
                if pump.expect_txn is not None:
                    raise HistoryMismatch(
                        f"the source's binlog ends before {pump.expect_txn.gtid}, the transaction the "
                        "mirror applied last"
                    )
                return True
            stats.last_event_at = time.time()
            size, heartbeats = pump.load(raws)
            stats.bytes += size
            stats.heartbeats += heartbeats
            while pump.pending:
                try:
                    txn = pump.run(slice_end)
                except DecodeError as exc:
                    if pump.expect is None:
                        raise
                    # not even an event boundary there: bytes of another history
                    raise HistoryMismatch(
                        f"no event starts at {resume.checkpoint.position.file}:{pump.expect.offset} "
                        f"where the mirror's last applied event did: {exc}"
                    ) from exc
                if pump.expect is None:
                    resume.expect = None
                if pump.found is not None:
                    self._followed(session, pump.found)
                    pump.found = None
                stats.events += pump.seen
                stats.last_event_ts = pump.last_ts or stats.last_event_ts
                stats.read_position = tracker.position
                resume.skip_until = pump.skip_until
                if pump.delivered:
                    assert pump.last is not None
                    self._delivered(session, pump.delivered, pump.last)
                if txn is not None:
                    await self._deliver(session, txn)
                if clock() > slice_end:
                    # A whole read is decoded without a pause otherwise (and the next read does
                    # not pause when bytes are buffered): give the consumer, the API and the
                    # websockets their turn every SLICE_SECONDS. Time, not bytes: an event costs
                    # from ~2 µs (small transactions) to milliseconds (many rows).
                    await asyncio.sleep(0)
                    slice_end = clock() + SLICE_SECONDS

    async def _deliver(self, session: _Session, txn: Transaction) -> None:
        """The hand-off the pump leaves to us: a DDL whose column names must be refreshed first,
        or a transaction that waits for room in the queue."""
        if txn.ddl and self._names_from_schema:
            schemas = sorted({s for d in txn.ddl for s, _ in d.tables} | {d.schema for d in txn.ddl})
            async with self._side("reading column names") as ctl:
                await self._columns.refresh(ctl, [s for s in schemas if s] or None)
        # The consumer may be behind: waiting here stops reading (TCP pushes back).
        await self._queue.put(txn, len(txn.changes))
        self._delivered(session, 1, txn)

    def _followed(self, session: _Session, found: Checkpoint) -> None:
        """The last applied transaction was found again by GTID on this source: a failover when
        the checkpoint was read from another server (or, stored without its server's identity,
        from another binlog position)."""
        resume = self._resume
        assert resume is not None and resume.by_gtid is not None
        was = resume.by_gtid.expect.position
        resume.by_gtid = None  # a later reconnect plans again from the delivered checkpoint
        note = failover_note(session.resumed_from, found, was)
        if note is None:
            return
        self.stats.failed_over(note)
        log.warning(
            "source failover: following %s by GTID: it has the transaction the mirror applied last "
            "at %s (was %s); no table copy (%s)",
            found.source, found.position, was, note,
        )  # fmt: skip

    def _delivered(self, session: _Session, count: int, last: Transaction) -> None:
        # Only now is it safe to resume after `last`: the transaction is in the consumer's hands.
        assert self._resume is not None
        self._resume.checkpoint = last.end
        session.delivered_any = True
        self.received = last
        self.stats.transactions += count
        self.stats.delivered = last.end
