"""Verifier: a verify over the tables the settings select (the CLI's `verify`, the distributed
verify's end): opens the connections, checks each table (run.py), repairs when asked."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from service.catalog import Catalog
from service.checkpoint import BinlogPosition
from service.errors import ConfigError
from service.rowcompare import key_values
from service.settings import Settings
from service.sink.client import redis_client
from service.sink.keys import KeyLayout
from service.sink.mirror import MirrorOptions, RedisMirror
from service.table_info import TableInfo
from service.transactions import TableFilter
from service.transport.connection import close_connection, connect, map_errors, server_info
from service.verify.documents import DocumentCheck
from service.verify.reading import binary_key_columns
from service.verify.report import Difference, Suspect, TableReport, VerifyReport
from service.verify.run import VerifyRun

__all__ = ["REPAIR_LEASE_TTL", "Verifier"]

REPAIR_LEASE_TTL = 10.0  # at least: the lease --repair takes (renewed while it reads)


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
        self.catalog = Catalog(self.filter, settings.shapes())
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
            if self.catalog.shapes.documents:
                await self._documents(run, report, repair, on_difference)
        return report

    async def _documents(
        self,
        run: VerifyRun,
        report: VerifyReport,
        repair: bool,
        on_difference: Callable[[Difference], None] | None,
    ) -> None:
        """Each document built again from the source and compared (service/verify/documents.py);
        what differs is read again once the mirror has passed the source's position."""
        check = DocumentCheck(self.catalog.shapes, run.source, run.redis, self._info)
        for name in sorted(self.catalog.shapes.documents.settings):
            found, tree, expected = await check.differences(name)
            if found and await run.settle(await run.source.position()):
                found, tree, expected = await check.differences(name)
            table_report = check.report(name, expected, found)
            report.tables.append(table_report)
            for d in table_report.differences:
                if on_difference is not None:
                    on_difference(d)
            if repair and found:
                report.repaired += await check.repair(tree, expected, found)

    def _info(self, schema: str, table: str) -> TableInfo:
        info = self.catalog.get(schema, table)
        if info is None:
            raise ConfigError(f"verify: {schema}.{table} is in a document but was not read")
        return info

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
                binary = binary_key_columns(t, t.key)
                found: dict[str, Suspect] = {}
                for suffix, row in suspects.get((schema, table), {}).items():
                    if row is None:
                        found[suffix] = Suspect(key_values(suffix, binary), None)
                    else:
                        found[suffix] = Suspect(tuple(row[c] for c in t.key), dict(row))
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
        mirror = RedisMirror(
            redis,
            self.layout,
            self.catalog.key_columns,
            options,
            derive_of=self.catalog.derive_spec,
            json_of=self.catalog.shapes.json_of,
        )
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
        suspects: dict[str, Suspect],
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
