"""VerifyRun: one pass's connections and the steps of a verify: check a table, read the suspects
again once the mirror has caught up, report what still differs, repair it (repairs.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import aiomysql
from redis.asyncio import Redis

from service.catalog import Catalog
from service.checkpoint import BinlogPosition, Checkpoint
from service.rowcompare import compare_row, expected_value, key_values
from service.settings import Settings
from service.sink.keys import KeyLayout
from service.sink.mirror import RedisMirror
from service.sqltext import keyset_page, rows_by_key
from service.table_info import TableInfo
from service.transport.connection import ServerInfo
from service.verify.entries import entries_wrong
from service.verify.reading import MirrorReader, SourceReader, binary_key_columns, utc_columns
from service.verify.repairs import Repairer
from service.verify.report import Difference, Suspect, TableReport

__all__ = ["VerifyOptions", "VerifyRun"]


class VerifyOptions(Protocol):
    """What a run reads of its Verifier (verifier.py)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def layout(self) -> KeyLayout: ...
    @property
    def json_mode(self) -> bool: ...
    @property
    def catalog(self) -> Catalog: ...  # its shapes: a shaped table's rows are compared as stored
    @property
    def chunk_rows(self) -> int: ...
    @property
    def rounds(self) -> int: ...
    @property
    def settle_timeout(self) -> float: ...
    @property
    def idle_seconds(self) -> float: ...


class VerifyRun:
    """One pass's connections and the steps of a verify (check, recheck, repair); `Verifier.run`
    drives it for the CLI, service/pipeline/verifier.py for the background verifier."""

    def __init__(
        self,
        v: VerifyOptions,
        conn: aiomysql.Connection,
        info: ServerInfo,
        redis: Redis,
        mirror: RedisMirror,
        pace: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.v, self.conn, self.info, self.redis, self.mirror = v, conn, info, redis, mirror
        self.layout = v.layout
        self.source = SourceReader(conn, info, v.catalog.shape)
        self.stored = MirrorReader(redis, v.layout, mirror, v.catalog.shapes.json_of)
        self.repairs = Repairer(mirror, redis, v.layout, self.source, v.settings.chunk_rows)
        self._pace = pace  # awaited after each chunk read, with its row count (a rows/s budget)

    async def mirrored_tables(self) -> set[tuple[str, str]]:
        return await self.stored.tables()

    # -- comparing ----------------------------------------------------------------------------
    def _compare(
        self, t: TableInfo, row: Mapping[str, Any] | None, stored: Any, indexed: bool
    ) -> tuple[str, tuple[str, ...]] | None:
        return compare_row(row, stored, indexed, self.v.catalog.shapes.json_of(t.schema, t.table))

    def _expired(self, t: TableInfo, row: Mapping[str, Any]) -> bool:
        """Whether a source row absent from the mirror is a ttl row that expired: with `at`, its
        instant is past; with `seconds` always (when it was last written is not known here)."""
        shape = self.v.catalog.shape(t.schema, t.table)
        ttl = shape.derivation.ttl if shape is not None and shape.derivation is not None else None
        if ttl is None:
            return False
        now_ms = int(time.time() * 1000)
        stored = {k.decode(): v for k, v in expected_value(row, False).items()}
        at = ttl.expires_ms(stored, now_ms)
        return ttl.seconds is not None or (at is not None and at <= now_ms)

    async def check_table(self, t: TableInfo) -> tuple[TableReport, dict[str, Suspect]]:
        report = TableReport(t.schema, t.table)
        if not t.exists:
            return report, {}
        if not t.key:
            report.keyed = False
            return report, {}
        key = t.key
        utc = utc_columns(t)
        lay = self.layout
        seen: set[str] = set()
        suspects: dict[str, Suspect] = {}
        last: tuple[Any, ...] | None = None
        target: BinlogPosition | None = None
        while True:
            await self.repairs.keep_lease()
            rows = await self.source.select(
                keyset_page(t.schema, t.table, key, last, self.v.chunk_rows),
                f"verify of {t.schema}.{t.table}",
            )
            if not rows:
                break
            position = await self.source.position()
            rows = [self.source.stored_form(t, r, utc) for r in rows]
            suffixes = [lay.row_suffix([r[c] for c in key]) for r in rows]
            stored = await self.stored.rows(t.schema, t.table, suffixes)
            expired: set[str] = set()
            for row, suffix, (value, indexed) in zip(rows, suffixes, stored, strict=True):
                if not value and self._expired(t, row):
                    expired.add(suffix)  # not drift: a ttl row Redis removed (or will)
                elif self._compare(t, row, value, indexed) is not None:
                    suspects[suffix] = Suspect(tuple(row[c] for c in key), row)
                    target = position
            report.expired += len(expired)
            by_suffix = {
                s: r for s, r in zip(suffixes, rows, strict=True) if s not in suspects and s not in expired
            }
            for suffix in await self._entries_wrong(t, by_suffix):
                suspects[suffix] = Suspect(tuple(by_suffix[suffix][c] for c in key), by_suffix[suffix])
                target = position
            seen.update(suffixes)
            report.rows += len(rows)
            if self._pace is not None:
                await self._pace(len(rows))
            last = tuple(rows[-1][c] for c in key)
            if len(rows) < self.v.chunk_rows:
                break
        binary = binary_key_columns(t, key)
        extra = await self.stored.suffixes(t.schema, t.table) - seen
        if extra:
            target = await self.source.position()
        for suffix in extra:
            suspects[suffix] = Suspect(key_values(suffix, binary), None)
        return await self.confirm(t, report, suspects, target)

    async def confirm(
        self, t: TableInfo, report: TableReport, suspects: dict[str, Suspect], target: BinlogPosition | None
    ) -> tuple[TableReport, dict[str, Suspect]]:
        """Read the suspects again once the mirror has passed `target` (_recheck); those that
        still differ become the report's differences."""
        assert t.key is not None
        confirmed = await self._recheck(t, suspects, target, utc_columns(t))
        names = sorted(confirmed)
        stored = await self.stored.rows(t.schema, t.table, names)
        found: dict[str, Suspect] = {}
        base = self.layout.table_base(t.schema, t.table)
        for suffix, (value, indexed) in zip(names, stored, strict=True):
            verdict = self._compare(t, confirmed[suffix].source, value, indexed)
            if verdict is not None:
                found[suffix] = confirmed[suffix]
                report.differences.append(
                    Difference(t.schema, t.table, verdict[0], f"{base}:{suffix}", verdict[1])
                )
        rest = {s: confirmed[s].source for s in names if s not in found}
        for suffix, keys in (await self._entries_wrong(t, rest)).items():
            found[suffix] = confirmed[suffix]
            report.differences.append(Difference(t.schema, t.table, "entries", f"{base}:{suffix}", keys))
        return report, found

    async def _entries_wrong(
        self, t: TableInfo, rows: Mapping[str, Mapping[str, Any] | None]
    ) -> dict[str, tuple[str, ...]]:
        """A shaped table's rows whose derived entries are not as their source row says."""
        shape = self.v.catalog.shape(t.schema, t.table)
        if shape is None or shape.derivation is None or not rows:
            return {}
        lay = self.layout
        base, derived = lay.table_base(t.schema, t.table), lay.derived_key(t.schema, t.table)
        return await entries_wrong(self.redis, shape.derivation, base, derived, rows)

    async def _recheck(
        self,
        t: TableInfo,
        suspects: dict[str, Suspect],
        target: BinlogPosition | None,
        utc: frozenset[str],
    ) -> dict[str, Suspect]:
        """The suspects that still differ once the mirror has applied past `target` (the source's
        position when they were read), each with the source row read last."""
        assert t.key is not None
        key = t.key
        for _ in range(self.v.rounds):
            if not suspects or target is None:
                break
            moved = await self._settle(target)
            lookup = [s for s in suspects.values() if s.key_values is not None]
            rows: list[dict[str, Any]] = []
            for start in range(0, len(lookup), self.v.chunk_rows):
                part = [s.key_values for s in lookup[start : start + self.v.chunk_rows] if s.key_values]
                rows += await self.source.select(
                    rows_by_key(t.schema, t.table, key, part),
                    f"verify of {t.schema}.{t.table} (rows read again)",
                )
            position = await self.source.position()
            by_suffix = {
                self.layout.row_suffix([r[c] for c in key]): self.source.stored_form(t, r, utc) for r in rows
            }
            names = sorted(suspects)
            stored = await self.stored.rows(t.schema, t.table, names)
            still: dict[str, Suspect] = {}
            for suffix, (value, indexed) in zip(names, stored, strict=True):
                row = by_suffix.get(suffix)
                if self._compare(t, row, value, indexed) is not None:
                    still[suffix] = Suspect(suspects[suffix].key_values, row)
            rest = {s: by_suffix.get(s) for s in names if s not in still}
            for suffix in await self._entries_wrong(t, rest):
                still[suffix] = Suspect(suspects[suffix].key_values, by_suffix.get(suffix))
            suspects = still
            if not moved and position == target:
                break  # neither side can change the verdict: the mirror is idle, the source too
            target = position
        return suspects

    async def settle(self, target: BinlogPosition) -> bool:
        """`_settle` for the documents' check (service/verify/documents.py)."""
        return await self._settle(target)

    async def _settle(self, target: BinlogPosition) -> bool:
        """Wait until the mirror's checkpoint is at or past `target`, or stops moving for
        `idle_seconds` (a stopped or idle service), or `settle_timeout`. True if it moved."""
        v = self.v
        deadline = time.monotonic() + v.settle_timeout
        first = last = await self._checkpoint()
        still_since = time.monotonic()
        while time.monotonic() < deadline:
            await self.repairs.keep_lease()
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
        extras = sorted(await self.stored.suffixes(schema, table))
        report.differences = [Difference(schema, table, "extra", f"{base}:{s}") for s in extras]
        return report, extras

    # -- repairing (repairs.py) ---------------------------------------------------------------
    async def repair(self, t: TableInfo, suspects: Mapping[str, Suspect]) -> int:
        return await self.repairs.repair(t, suspects, derived=self._derived(t))

    def _derived(self, t: TableInfo) -> bool:
        shape = self.v.catalog.shape(t.schema, t.table)
        return shape is not None and shape.derivation is not None

    async def repair_live(self, t: TableInfo, suffixes: Sequence[str]) -> int:
        """Repair rows while the service applies (Repairer.repair_live)."""
        return await self.repairs.repair_live(t, suffixes, derived=self._derived(t))

    async def repair_orphans(self, schema: str, table: str, extras: Sequence[str]) -> int:
        return await self.repairs.repair_orphans(schema, table, extras)
