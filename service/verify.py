"""Compare a mirror with its source row by row, and repair what differs (`binlog-mirror verify`).

Each selected table is read from the source in key order, in key-range chunks (as a resync reads
it), and each row is compared with its Redis key in the sink's own layout and value encoding
(`service.sink.keys`, `service.sink.values`): the hash's fields or the JSON document, exactly as
the mirror would write that row. Keys the mirror holds for the table (its `__keys` set and any
row key found by SCAN) that no source row has are extra.

The service may run meanwhile: a row that differs may only be one the mirror has not applied yet.
Suspects are read again, from the source and from Redis, once the mirror's checkpoint has passed
the source's binlog position read with them (or the checkpoint stopped moving: the service is
stopped or idle), up to `rounds` times; only what still differs is reported.

`repair` rewrites exactly those rows through the sink (`RedisMirror.apply`), with its guarantees:
the writer lease is taken first (refused while a running service holds it), and each call is atomic
and fenced by the lease and the checkpoint chain. A repair is a transaction that ends where the
mirror's checkpoint already is: a differing or missing row is written whole from the source, an
extra key is deleted (its `__keys` entry, change-log entry and sequence number go with it).
Transactions the mirror has not applied yet (a stopped service) are applied after it and lead
to the same rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiomysql
from redis.asyncio import Redis

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.catalog import Catalog
from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import ConfigError, SinkError
from service.rowcompare import at_span, compare_row, expected_value, key_delete, key_values, utc_row
from service.settings import Settings
from service.sink.checkpoints import decode_checkpoint
from service.sink.client import redis_client
from service.sink.keys import KeyLayout, glob_literal, row_suffix_of, split_key
from service.sink.mirror import MirrorOptions, RedisMirror, map_redis_errors
from service.sqltext import keyset_page, rows_by_key
from service.table_info import TableInfo
from service.transactions import TableFilter, Transaction
from service.transport.connection import (
    ServerInfo,
    close_connection,
    connect,
    current_checkpoint,
    map_errors,
    server_info,
)

__all__ = [
    "Difference",
    "LeaseHeld",
    "TableReport",
    "VerifyReport",
    "VerifyRun",
    "Verifier",
    "compare_row",
    "expected_value",
]

log = logging.getLogger(__name__)

# key columns whose key text is 0x-hex (service.sink.values.key_text)
REPAIR_LEASE_TTL = 10.0  # at least: the lease --repair takes (renewed while it reads)
_BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})


class LeaseHeld(SinkError):
    """--repair could not take the writer lease: a running instance holds it."""

    retriable = False


@dataclass(frozen=True, slots=True)
class Difference:
    schema: str
    table: str
    kind: str  # differs | missing | extra
    key: str  # the row's Redis key
    fields: tuple[str, ...] = ()  # differs: the columns whose stored value is not the source's


@dataclass(slots=True)
class TableReport:
    schema: str
    table: str
    rows: int = 0  # source rows compared
    keyed: bool = True  # False: no usable key, the table is not mirrored (nothing compared)
    differences: list[Difference] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for d in self.differences if d.kind == kind)


@dataclass(slots=True)
class VerifyReport:
    tables: list[TableReport] = field(default_factory=list)
    repaired: int = 0  # rows rewritten or deleted by --repair

    @property
    def differences(self) -> list[Difference]:
        return [d for t in self.tables for d in t.differences]

    @property
    def equal(self) -> bool:
        return not self.differences


@dataclass(slots=True)
class _Suspect:
    key_values: tuple[Any, ...] | None  # typed values for a SELECT by key; None: no such source row
    source: dict[str, Any] | None  # the source row last read (None: absent)


class Verifier:
    """One run of `verify` over the tables `settings` selects (`settings.tables`/`exclude_tables`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        chunk_rows: int = 1000,
        rounds: int = 3,
        settle_timeout: float = 30.0,
        idle_seconds: float = 1.0,
    ) -> None:
        self.settings = settings
        self.chunk_rows = chunk_rows
        self.rounds = rounds
        self.settle_timeout = settle_timeout
        self.idle_seconds = idle_seconds
        self.filter = TableFilter.from_lists(settings.tables, settings.exclude_tables)
        self.layout = KeyLayout(settings.key_prefix)
        self.catalog = Catalog(self.filter)
        self.json_mode = settings.value_mode == "json"

    async def run(
        self, repair: bool = False, on_difference: Callable[[Difference], None] | None = None
    ) -> VerifyReport:
        report = VerifyReport()
        async with self._session() as run:
            tables = await self.catalog.wanted_tables(run.conn)
            for schema, table in tables:
                t = await self.catalog.load(run.conn, schema, table)
                table_report, suspects = await run.check_table(t)
                await self._finish(run, report, table_report, t, suspects, repair, on_difference)
            await self._orphans(run, report, set(tables), repair, on_difference)
        return report

    async def confirm_suspects(
        self,
        suspects: Mapping[tuple[str, str], Mapping[str, Mapping[str, Any] | None]],
        rows: Mapping[tuple[str, str], int],
        target: BinlogPosition | None,
        repair: bool = False,
    ) -> VerifyReport:
        """The end of a verify whose tables were compared elsewhere (the distributed verify,
        service/batch/verify.py): `suspects` per table, row suffix -> the source row read (None:
        the mirror has the key, the source did not), `rows` compared per table, `target` the
        source's position after they were read. Confirms them as `run` does (read again once the
        mirror has passed `target`), then repairs what still differs when asked."""
        report = VerifyReport()
        async with self._session() as run:
            tables = await self.catalog.wanted_tables(run.conn)
            for schema, table in tables:
                t = await self.catalog.load(run.conn, schema, table)
                table_report = TableReport(schema, table, rows.get((schema, table), 0))
                if not t.exists or not t.key:
                    table_report.keyed = bool(t.key)
                    report.tables.append(table_report)
                    continue
                types = {c.name: c.type for c in t.columns}
                binary = [types.get(c, "") in _BINARY_TYPES for c in t.key]
                found: dict[str, _Suspect] = {}
                for suffix, row in suspects.get((schema, table), {}).items():
                    if row is None:
                        found[suffix] = _Suspect(key_values(suffix, binary), None)
                    else:
                        found[suffix] = _Suspect(tuple(row[c] for c in t.key), dict(row))
                table_report, confirmed = await run.confirm(t, table_report, found, target)
                await self._finish(run, report, table_report, t, confirmed, repair, None)
            await self._orphans(run, report, set(tables), repair, None)
        return report

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[VerifyRun]:
        if self.settings.redis is None:
            raise ConfigError("no Redis URL: pass --redis redis://host:port/db or set BINLOG_MIRROR_REDIS")
        conn = await connect(self.settings)
        redis = redis_client(self.settings.redis.url.get_secret_value(), socket_timeout=10)
        options = MirrorOptions(
            json_mode=self.json_mode,
            chunk_size=self.settings.chunk_rows,
            changelog_maxlen=self.settings.changelog_maxlen or None,
            lease_ttl=max(self.settings.lease_ttl_seconds, REPAIR_LEASE_TTL),
        )
        mirror = RedisMirror(redis, self.layout, self.catalog.key_columns, options)
        try:
            with map_errors("verify"):
                async with conn.cursor() as cur:
                    await cur.execute("SET SESSION time_zone = '+00:00'")  # TIMESTAMPs as UTC
            info = await server_info(conn)
            yield VerifyRun(self, conn, info, redis, mirror)
        finally:
            await mirror.release_lease()  # only if this run took it (the token is checked)
            await mirror.close()
            await redis.aclose()
            await close_connection(conn)

    @staticmethod
    async def _finish(
        run: VerifyRun,
        report: VerifyReport,
        table_report: TableReport,
        t: TableInfo,
        suspects: dict[str, _Suspect],
        repair: bool,
        on_difference: Callable[[Difference], None] | None,
    ) -> None:
        report.tables.append(table_report)
        for d in table_report.differences:
            if on_difference is not None:
                on_difference(d)
        if repair and suspects:
            report.repaired += await run.repair(t, suspects)

    async def _orphans(
        self,
        run: VerifyRun,
        report: VerifyReport,
        listed: set[tuple[str, str]],
        repair: bool,
        on_difference: Callable[[Difference], None] | None,
    ) -> None:
        """Tables the mirror holds that the source no longer has (or that are not readable)."""
        for schema, table in sorted(await run.mirrored_tables()):
            if (schema, table) in listed or not self.filter.wants(schema, table):
                continue
            table_report, extras = await run.orphan_table(schema, table)
            report.tables.append(table_report)
            for d in table_report.differences:
                if on_difference is not None:
                    on_difference(d)
            if repair and extras:
                report.repaired += await run.repair_orphans(schema, table, extras)


class VerifyRun:
    """One pass's connections and the steps of a verify (check, recheck, repair); `Verifier.run`
    drives it for the CLI, service/pipeline/verifier.py for the background verifier."""

    def __init__(
        self,
        v: Verifier,
        conn: aiomysql.Connection,
        info: ServerInfo,
        redis: Redis,
        mirror: RedisMirror,
        pace: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.v, self.conn, self.info, self.redis, self.mirror = v, conn, info, redis, mirror
        self.layout = v.layout
        self._leased = False
        self._renewed = 0.0  # time.monotonic() of the last taking or renewal of the lease
        self._pace = pace  # awaited after each chunk read, with its row count (a rows/s budget)

    # -- reading ------------------------------------------------------------------------------
    async def _source_position(self) -> BinlogPosition:
        return (await current_checkpoint(self.conn, self.info)).position

    async def _select(self, sql: str, what: str) -> list[dict[str, Any]]:
        with map_errors(what):
            async with self.conn.cursor(aiomysql.DictCursor) as cur:
                await cur.execute(sql)
                return list(await cur.fetchall())

    async def _mirror_suffixes(self, schema: str, table: str) -> set[str]:
        """Every row suffix the mirror holds for the table: `__keys` members and row keys."""
        lay = self.layout
        base = lay.table_base(schema, table)
        out: set[str] = set()
        with map_redis_errors("listing the mirror's keys"):
            async for member in self.redis.sscan_iter(lay.index_key(schema, table), count=1000):
                out.add(_s(member))
            async for key in self.redis.scan_iter(match=glob_literal(base) + ":*", count=1000):
                if (suffix := row_suffix_of(key, base)) is not None:
                    out.add(suffix)
        return out

    async def mirrored_tables(self) -> set[tuple[str, str]]:
        out = set()
        for tid in await self.mirror.mirrored_tables():
            parts = split_key(tid)
            if len(parts) == 2:
                out.add((parts[0], parts[1]))
        return out

    # -- comparing ----------------------------------------------------------------------------
    def _compare(
        self, row: Mapping[str, Any] | None, stored: Any, indexed: bool
    ) -> tuple[str, tuple[str, ...]] | None:
        return compare_row(row, stored, indexed, self.v.json_mode)

    async def check_table(self, t: TableInfo) -> tuple[TableReport, dict[str, _Suspect]]:
        report = TableReport(t.schema, t.table)
        if not t.exists:
            return report, {}
        if not t.key:
            report.keyed = False
            return report, {}
        key = t.key
        utc = frozenset(c.name for c in t.columns if c.type == "TIMESTAMP")
        lay = self.layout
        index = lay.index_key(t.schema, t.table)
        seen: set[str] = set()
        suspects: dict[str, _Suspect] = {}
        last: tuple[Any, ...] | None = None
        target: BinlogPosition | None = None
        while True:
            await self._keep_lease()
            rows = await self._select(
                keyset_page(t.schema, t.table, key, last, self.v.chunk_rows),
                f"verify of {t.schema}.{t.table}",
            )
            if not rows:
                break
            position = await self._source_position()
            rows = [utc_row(r, utc) for r in rows]
            suffixes = [lay.row_suffix([r[c] for c in key]) for r in rows]
            stored = await self._stored_rows(t.schema, t.table, suffixes, index)
            for row, suffix, (value, indexed) in zip(rows, suffixes, stored, strict=True):
                if self._compare(row, value, indexed) is not None:
                    suspects[suffix] = _Suspect(tuple(row[c] for c in key), row)
                    target = position
            seen.update(suffixes)
            report.rows += len(rows)
            if self._pace is not None:
                await self._pace(len(rows))
            last = tuple(rows[-1][c] for c in key)
            if len(rows) < self.v.chunk_rows:
                break
        types = {c.name: c.type for c in t.columns}
        binary = [types.get(c, "") in _BINARY_TYPES for c in key]
        extra = await self._mirror_suffixes(t.schema, t.table) - seen
        if extra:
            target = await self._source_position()
        for suffix in extra:
            suspects[suffix] = _Suspect(key_values(suffix, binary), None)
        return await self.confirm(t, report, suspects, target)

    async def confirm(
        self, t: TableInfo, report: TableReport, suspects: dict[str, _Suspect], target: BinlogPosition | None
    ) -> tuple[TableReport, dict[str, _Suspect]]:
        """Read the suspects again once the mirror has passed `target` (_recheck); those that
        still differ become the report's differences."""
        assert t.key is not None
        utc = frozenset(c.name for c in t.columns if c.type == "TIMESTAMP")
        index = self.layout.index_key(t.schema, t.table)
        confirmed = await self._recheck(t, suspects, target, utc)
        names = sorted(confirmed)
        stored = await self._stored_rows(t.schema, t.table, names, index)
        found: dict[str, _Suspect] = {}
        base = self.layout.table_base(t.schema, t.table)
        for suffix, (value, indexed) in zip(names, stored, strict=True):
            verdict = self._compare(confirmed[suffix].source, value, indexed)
            if verdict is not None:
                found[suffix] = confirmed[suffix]
                report.differences.append(
                    Difference(t.schema, t.table, verdict[0], f"{base}:{suffix}", verdict[1])
                )
        return report, found

    async def _stored_rows(
        self, schema: str, table: str, suffixes: Sequence[str], index: str
    ) -> list[tuple[Any, bool]]:
        base = self.layout.table_base(schema, table)
        if not suffixes:
            return []
        with map_redis_errors("reading the mirror"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for suffix in suffixes:
                    key = f"{base}:{suffix}"
                    if self.v.json_mode:
                        pipe.get(key)
                    else:
                        pipe.hgetall(key)
                    pipe.sismember(index, suffix)
                replies = await pipe.execute()
        return [(replies[i], bool(replies[i + 1])) for i in range(0, len(replies), 2)]

    async def _recheck(
        self,
        t: TableInfo,
        suspects: dict[str, _Suspect],
        target: BinlogPosition | None,
        utc: frozenset[str],
    ) -> dict[str, _Suspect]:
        """The suspects that still differ once the mirror has applied past `target` (the source's
        position when they were read), each with the source row read last."""
        assert t.key is not None
        key = t.key
        index = self.layout.index_key(t.schema, t.table)
        for _ in range(self.v.rounds):
            if not suspects or target is None:
                break
            moved = await self._settle(target)
            lookup = [s for s in suspects.values() if s.key_values is not None]
            rows: list[dict[str, Any]] = []
            for start in range(0, len(lookup), self.v.chunk_rows):
                part = [s.key_values for s in lookup[start : start + self.v.chunk_rows] if s.key_values]
                rows += await self._select(
                    rows_by_key(t.schema, t.table, key, part),
                    f"verify of {t.schema}.{t.table} (rows read again)",
                )
            position = await self._source_position()
            by_suffix = {self.layout.row_suffix([r[c] for c in key]): utc_row(r, utc) for r in rows}
            names = sorted(suspects)
            stored = await self._stored_rows(t.schema, t.table, names, index)
            still: dict[str, _Suspect] = {}
            for suffix, (value, indexed) in zip(names, stored, strict=True):
                row = by_suffix.get(suffix)
                if self._compare(row, value, indexed) is not None:
                    still[suffix] = _Suspect(suspects[suffix].key_values, row)
            suspects = still
            if not moved and position == target:
                break  # neither side can change the verdict: the mirror is idle, the source too
            target = position
        return suspects

    async def _settle(self, target: BinlogPosition) -> bool:
        """Wait until the mirror's checkpoint is at or past `target`, or stops moving for
        `idle_seconds` (a stopped or idle service), or `settle_timeout`. True if it moved."""
        v = self.v
        deadline = time.monotonic() + v.settle_timeout
        first = last = await self._checkpoint()
        still_since = time.monotonic()
        while time.monotonic() < deadline:
            await self._keep_lease()
            if last is None or not last.position.file or not last.position < target:
                break
            await asyncio.sleep(0.1)
            cp = await self._checkpoint()
            if cp != last:
                last, still_since = cp, time.monotonic()
            elif time.monotonic() - still_since >= v.idle_seconds:
                break
        return last != first

    async def _checkpoint(self) -> Checkpoint | None:
        return await self.mirror.load_checkpoint()

    # -- tables the source does not have ------------------------------------------------------
    async def orphan_table(self, schema: str, table: str) -> tuple[TableReport, list[str]]:
        report = TableReport(schema, table)
        base = self.layout.table_base(schema, table)
        extras = sorted(await self._mirror_suffixes(schema, table))
        report.differences = [Difference(schema, table, "extra", f"{base}:{s}") for s in extras]
        return report, extras

    # -- repairing ----------------------------------------------------------------------------
    async def _keep_lease(self) -> None:
        """Once --repair took the lease, renew it during the long reads between repairs (the
        next table's check, a settle wait): a third of its TTL at the latest."""
        if self._leased and time.monotonic() - self._renewed > self.mirror.options.lease_ttl / 3:
            await self.mirror.renew_lease()
            self._renewed = time.monotonic()

    async def _lease(self) -> Checkpoint:
        if not self._leased:
            if not await self.mirror.acquire_lease():
                raise LeaseHeld(
                    "cannot repair: the writer lease is held by a running binlog-mirror instance "
                    f"({self.layout.lease_key}); stop it, run verify --repair, then start it again"
                )
            self._leased = True
        else:
            await self.mirror.renew_lease()
        self._renewed = time.monotonic()
        with map_redis_errors("reading the mirror's progress"):
            if await self.redis.exists(self.layout.progress_key):
                raise SinkError(
                    "cannot repair: a transaction is half applied (the mirror's __progress key); "
                    "start the service to finish it, then repair"
                )
        cp = await self.mirror.load_checkpoint()
        if cp is None:
            raise SinkError("cannot repair: the mirror has no checkpoint (it was never started)")
        return cp

    async def _apply(self, changes: list[RowChange]) -> int:
        """Apply `changes` as transactions that end at the stored checkpoint, which they rewrite
        with the same position and the same last GTID."""
        size = max(1, self.v.settings.chunk_rows)
        for start in range(0, len(changes), size):
            cp = await self._lease()
            with map_redis_errors("reading the checkpoint"):
                stored = decode_checkpoint(await self.redis.hgetall(self.layout.checkpoint_key))
            gtid = stored.gtid if stored else None
            span = EventSpan(cp.position.file, cp.position.pos, cp.position.pos)
            part = tuple(at_span(c, span) for c in changes[start : start + size])
            # the checkpoint's own time: the stored hash is rewritten exactly as it was
            txn = Transaction(part, (), gtid, cp.ts, cp)
            await self.mirror.apply([(txn, ())])
        return len(changes)

    async def repair(self, t: TableInfo, suspects: Mapping[str, _Suspect]) -> int:
        assert t.key is not None
        changes: list[RowChange] = []
        span = EventSpan("", 0, 0)
        now = int(time.time())
        for suffix, s in sorted(suspects.items()):
            if s.source is not None:
                changes.append(RowChange(Op.INSERT, t.schema, t.table, None, s.source, span, now, 0))
            else:
                changes.append(key_delete(t.schema, t.table, t.key, suffix, span, now))
        done = await self._apply(changes)
        log.info("repaired %d rows of %s.%s", done, t.schema, t.table)
        return done

    async def repair_live(self, t: TableInfo, suffixes: Sequence[str]) -> int:
        """Repair rows while the service applies (the background verifier, which shares its
        writer lease): the checkpoint C is read first, then the rows from the source (at or past
        C: the source is never behind its mirror), and the call is fenced by the chain check on C.
        The transactions after C the service applies next lead to the source's rows again; when
        it applied one meanwhile, the call writes nothing (SinkError) and the rows wait for the
        next pass."""
        assert t.key is not None
        key, utc = t.key, frozenset(c.name for c in t.columns if c.type == "TIMESTAMP")
        types = {c.name: c.type for c in t.columns}
        binary = [types.get(c, "") in _BINARY_TYPES for c in key]
        done = 0
        size = max(1, self.v.settings.chunk_rows)
        for start in range(0, len(suffixes), size):
            part = list(suffixes[start : start + size])
            cp = await self._lease()  # the chain head is now C
            with map_redis_errors("reading the checkpoint"):
                stored = decode_checkpoint(await self.redis.hgetall(self.layout.checkpoint_key))
            if stored is None or stored.checkpoint != cp:
                raise SinkError("the checkpoint moved while repairing: retried at the next pass")
            lookup = {sfx: kv for sfx in part if (kv := key_values(sfx, binary)) is not None}
            rows: dict[str, dict[str, Any]] = {}
            if lookup:
                sql = rows_by_key(t.schema, t.table, key, list(lookup.values()))
                for r in await self._select(sql, f"repair of {t.schema}.{t.table}"):
                    rows[self.layout.row_suffix([r[c] for c in key])] = utc_row(r, utc)
            span = EventSpan(cp.position.file, cp.position.pos, cp.position.pos)
            now = int(time.time())
            changes = tuple(
                RowChange(Op.INSERT, t.schema, t.table, None, rows[sfx], span, now, 0)
                if sfx in rows
                else key_delete(t.schema, t.table, key, sfx, span, now)
                for sfx in part
            )
            await self.mirror.apply([(Transaction(changes, (), stored.gtid, cp.ts, cp), ())])
            done += len(changes)
        return done

    async def repair_orphans(self, schema: str, table: str, extras: Sequence[str]) -> int:
        """Delete the row keys of a mirrored table the source does not have. Not through the
        planner (the table has no definition to key it by): one MULTI/EXEC under WATCH of the
        lease, so it writes nothing unless this run still holds the lease."""
        await self._lease()
        lay = self.layout
        base = lay.table_base(schema, table)
        keys = [f"{base}:{s}" for s in extras]
        with map_redis_errors(f"repairing {schema}.{table}"):
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(lay.lease_key)
                if _s(await pipe.get(lay.lease_key) or b"") != self.mirror.token:
                    raise LeaseHeld("cannot repair: the writer lease was lost during the repair")
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.delete(*keys)
                pipe.srem(lay.index_key(schema, table), *extras)
                pipe.srem(lay.tables_key, lay.table_id(schema, table))
                await pipe.execute()
        return len(keys)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
