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
from service.binlog.constants import EventType
from service.binlog.events import FormatDescriptionEvent
from service.binlog.schema import TableSchema
from service.binlog.stats import DecoderStats
from service.checkpoint import (
    BinlogPosition,
    Checkpoint,
    CheckpointTracker,
    EventMark,
    MariadbGtidPos,
    MysqlGtidSet,
    StartPoint,
    parse_gtid_set,
    parse_start,
)
from service.errors import DecodeError, HistoryMismatch, ReplicatorError, SourceError
from service.history import GtidResume, plan_mariadb, plan_mysql
from service.queues import RowQueue
from service.settings import Settings
from service.transactions import TableFilter, Transaction, TransactionAssembler
from service.transport.columns import ColumnNames
from service.transport.connection import (
    CONNECT_TIMEOUT,
    QUERY_TIMEOUT,
    ServerInfo,
    binlog_files,
    close_connection,
    connect,
    current_checkpoint,
    fetch,
    server_info,
)
from service.transport.preflight import preflight
from service.transport.pump import EventPump
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
class SourceStats:
    """Counters of the reader; a plain mutable record, read by the API (copy it to keep it)."""

    events: int = 0  # events decoded (heartbeats excluded)
    bytes: int = 0  # event bytes received (heartbeats included)
    heartbeats: int = 0
    transactions: int = 0  # transactions put in the queue
    reconnects: int = 0
    connected: bool = False
    last_event_ts: int = 0  # source timestamp of the last non-heartbeat event (seconds)
    last_event_at: float = 0.0  # time.time() when the last packet (event or heartbeat) arrived
    last_error: str = ""
    read_position: BinlogPosition | None = None  # after the last event read (maybe mid-transaction)
    delivered: Checkpoint | None = None  # end of the last transaction put in the queue
    # decoder counters, summed over every connection's decoder (see BinlogSource.decoder_totals)
    events_by_type: Counter[str] = field(default_factory=Counter)  # EventType name -> events
    skipped_ignorable: int = 0  # unknown events skipped thanks to LOG_EVENT_IGNORABLE_F
    invalid_text_values: int = 0  # text values whose bytes were invalid in their charset
    # the latest TABLE_MAP read per (schema, table): its table id, column metadata and names
    table_maps: dict[tuple[str, str], TableSchema] = field(default_factory=dict)
    # where the decoder takes column names from: "binlog" (binlog_row_metadata=FULL, as read at
    # start) or "information_schema" (any other value: looked up by `ColumnNames`)
    column_names: str = "binlog"
    # resumes that followed another server by GTID (docs/operations.md, "Source failover")
    failovers: int = 0
    last_failover_at: float = 0.0  # time.time() of the last one
    last_failover: str = ""  # "server_id=1 domain=0 -> server_id=2 domain=0 at 0-1-125"


@dataclass(slots=True)
class _Resume:
    """Where the next connection starts."""

    checkpoint: Checkpoint
    gtid_mode: bool  # dump by GTID set (else by file/pos)
    skip_until: BinlogPosition | None = None  # drop transactions ending at or before this
    expect: EventMark | None = None  # the history check of the dump being opened (_open)
    by_gtid: GtidResume | None = None  # the dump being opened resumes by GTID (service/history.py)


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
        self._resume: _Resume | None = None
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
        self._resume = await self._resolve(ctl, info, self.start_point)
        self.start_checkpoint = self._resume.checkpoint
        session = await self._open()
        start = self._resume.checkpoint
        resolved = not isinstance(self.start_point, Checkpoint)  # now, start, FILE:POS
        if resolved and start.position.file and not self._resume.gtid_mode:
            # A start point (bootstrap) carries its history's identity too: its file's
            # FORMAT_DESCRIPTION, the first event the dump sends (docs/mirror.md)
            mark = await self._file_mark(session)
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
            self._fold(self._session.decoder.stats)
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

    async def lag_bytes(self, since: BinlogPosition) -> int | None:
        """Binlog bytes from `since` (the replicator passes its applied checkpoint) to the source's
        end of binlog, summed over `since`'s file and every later one (SHOW BINARY LOGS).

        None when unknown: `since` has no file name (a start from a GTID set, until its first
        transaction is applied: the dump skips to the GTID without telling where it is), or the
        source lists no binary logs. When `since`'s file was purged, the files still listed are
        counted: a lower bound."""
        if not since.file:
            return None
        async with self._side("listing the binary logs") as ctl:
            files = await binlog_files(ctl)
        if not files:
            return None
        total = 0
        for name, size in files:
            if name == since.file:
                total += max(size - since.pos, 0)
            elif BinlogPosition(name, 0) > since:
                total += size
        return total

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

    async def _resolve(self, ctl: aiomysql.Connection, info: ServerInfo, start: StartPoint) -> _Resume:
        if isinstance(start, Checkpoint):
            if start.position.file:
                return _Resume(start, gtid_mode=False)
            return _Resume(start, gtid_mode=True)
        if isinstance(start, MysqlGtidSet | MariadbGtidPos):
            if isinstance(start, MariadbGtidPos) != info.mariadb:
                raise SourceError(f"GTID set {start} is not in the {info.flavour} form")
            return _Resume(Checkpoint(BinlogPosition("", 4), str(start)), gtid_mode=True)
        if start == "now":
            return _Resume(await current_checkpoint(ctl, info), gtid_mode=False)
        if start == "start":
            files = await binlog_files(ctl)
            if not files:
                raise SourceError("SHOW BINARY LOGS is empty: is binary logging on?")
            begin = BinlogPosition(files[0][0], 4)
            return _Resume(Checkpoint(begin, await self._gtid_at(ctl, info, begin)), gtid_mode=False)
        assert isinstance(start, BinlogPosition)
        # An explicit FILE:POS may point inside a transaction: read the file from its start and
        # hand out transactions that end after POS, so the one holding POS comes out whole.
        begin = BinlogPosition(start.file, 4)
        skip = start if start.pos > 4 else None
        return _Resume(
            Checkpoint(begin, await self._gtid_at(ctl, info, begin)), gtid_mode=False, skip_until=skip
        )

    @staticmethod
    async def _gtid_at(ctl: aiomysql.Connection, info: ServerInfo, position: BinlogPosition) -> str:
        if not info.mariadb:
            return ""  # MySQL: the set is learnt from the GTID events that follow
        rows = await fetch(ctl, "SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
        return str(rows[0][0] or "") if rows else ""

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

    async def _file_mark(self, session: _Session) -> EventMark | None:
        """The FORMAT_DESCRIPTION's mark of the file the dump starts in (the events read for it
        are kept for the pump). None when the dump does not start with one."""
        decoder = BinlogDecoder(DecodeOptions(), file=session.decoder.file)
        while True:
            raws = await session.stream.read_batch()
            if raws is None:
                return None
            session.head += raws
            for raw in raws:
                if len(raw) > 4 and raw[4] in _HEARTBEATS:
                    continue
                event = decoder.feed(raw)
                if isinstance(event, FormatDescriptionEvent):
                    return EventMark.of_file(event)
                if event is not None and event.header.type_code != EventType.ROTATE:
                    return None

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

    async def _gtid_resume(self, cp: Checkpoint) -> GtidResume | None:
        """How to resume `cp` by GTID on this source (service/history.py), after checking the
        source holds what the mirror applied; None: by file and position."""
        info = self.info
        assert info is not None
        if (cp.mark is None and cp.txn_mark is None) or not cp.gtid_set or not info.gtids:
            return None  # a start point, a checkpoint from before marks, or no GTIDs
        async with self._side("reading the source's GTIDs") as ctl:
            if info.mariadb:
                rows = await fetch(ctl, "SELECT @@gtid_binlog_pos")
                return plan_mariadb(cp, MariadbGtidPos.parse(str(rows[0][0] or "")))
            rows = await fetch(ctl, "SELECT @@gtid_executed, @@gtid_purged")
        executed, purged = (MysqlGtidSet.parse(str(v or "")) for v in rows[0])
        return plan_mysql(cp, executed, purged)

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
        resume.by_gtid = by_gtid = None if resume.gtid_mode else await self._gtid_resume(cp)
        conn = await connect(self.settings)
        stream = BinlogStream(conn, self.info, read_timeout=self.heartbeat * READ_TIMEOUT_FACTOR)
        try:
            await stream.prepare(heartbeat=self.heartbeat, server_id=self.server_id)
            gtids = parse_gtid_set(cp.gtid_set) if cp.gtid_set else None
            mark = _history_mark(cp) if not resume.gtid_mode and by_gtid is None else None
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
            log.info(
                "streaming from GTID %s (after %s, checked against the source) on %s (dump thread %d)",
                cp.gtid_set,
                cp.gtid,
                self.info.identity,
                stream.thread_id,
            )
        else:
            log.info(
                "streaming from %s%s (dump thread %d)",
                "GTID " + cp.gtid_set if resume.gtid_mode else cp.position,
                "" if resume.gtid_mode or not cp.gtid_set else f" [GTID {cp.gtid_set}]",
                stream.thread_id,
            )
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
            self._fold(session.decoder.stats)
        self._session = None

    def _fold(self, dstats: DecoderStats) -> None:
        """Add a finished connection's decoder counters to the totals."""
        stats = self.stats
        stats.events_by_type.update(_type_names(dstats))
        stats.skipped_ignorable += dstats.skipped_ignorable
        stats.invalid_text_values += dstats.invalid_text_values

    def decoder_totals(self) -> tuple[dict[str, int], int, int]:
        """(events by type name, ignorable events skipped, invalid text values) over every
        decoder this source has used, the current connection's included."""
        stats = self.stats
        by_type = Counter(stats.events_by_type)
        skipped, invalid = stats.skipped_ignorable, stats.invalid_text_values
        session = self._session
        if session is not None:
            by_type.update(_type_names(session.decoder.stats))
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
        expected, before = resume.by_gtid.expect, session.resumed_from
        resume.by_gtid = None  # a later reconnect plans again from the delivered checkpoint
        now = found.source
        moved = before != now if before else found.position != expected.position
        if not moved:
            return
        stats = self.stats
        stats.failovers += 1
        stats.last_failover_at = time.time()
        stats.last_failover = f"{before or 'unknown'} -> {now} at {found.gtid}"
        log.warning(
            "source failover: following %s by GTID, its binlog has the transaction the mirror "
            "applied last (%s) at %s (was %s on %s); no table copy",
            now,
            found.gtid,
            found.position,
            expected.position,
            before or "another server",
        )

    def _delivered(self, session: _Session, count: int, last: Transaction) -> None:
        # Only now is it safe to resume after `last`: the transaction is in the consumer's hands.
        assert self._resume is not None
        self._resume.checkpoint = last.end
        session.delivered_any = True
        self.received = last
        self.stats.transactions += count
        self.stats.delivered = last.end


_HEARTBEATS = (int(EventType.HEARTBEAT), int(EventType.HEARTBEAT_V2))


def _history_mark(cp: Checkpoint) -> EventMark | None:
    """The event to check when resuming from `cp` by file and position: its mark, when it ends
    exactly at `cp` in `cp`'s file (a file's start, or a start point, has none)."""
    mark = cp.mark
    if mark is None or not cp.position.file or not 4 <= mark.offset < cp.position.pos:
        return None
    return mark


def _type_names(dstats: DecoderStats) -> Counter[str]:
    out: Counter[str] = Counter()
    for code, n in dstats.events_by_type.items():
        try:
            out[EventType(code).name] += n
        except ValueError:
            out[f"UNKNOWN_{code}"] += n
    return out
