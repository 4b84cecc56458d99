"""Snapshot: copy the selected tables into an empty mirror with Spark, then hand over to the service.

The protocol (docs/pipeline.md, "Snapshot"):
1. refuse when the mirror already has a checkpoint (the service keeps such a mirror in sync) or
   another instance holds the writer lease; take the lease and renew it while the copy runs, so
   a service started meanwhile waits as a standby (all through the sink's `RedisMirror`);
2. note the source's position P (end of binlog and GTID set) BEFORE reading any row;
3. clear what an earlier, failed snapshot left of each table, then read every table in key
   ranges, one Spark task per range, writing rows in the service's key layout and value form
   (`service.sink.bulk`);
4. store P as the checkpoint, with the tables registered, in one fenced apply (`RedisMirror.apply`
   of an empty transaction ending at P, as the service's own bootstrap); release the lease.
The service then resumes at P and re-applies every change made since. Each row read here is at
least as new as P, and re-applying a change onto a newer row only rewinds it until the later
changes are applied again, so the mirror equals the source once the service has caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiomysql
import pymysql
import redis as redis_sync

from service.catalog import Catalog
from service.checkpoint import Checkpoint
from service.errors import ConfigError, LeaseLost, PreflightError, SinkError, SourceError
from service.rowcompare import utc_row
from service.settings import Settings
from service.sink.bulk import clear_table, write_rows
from service.sink.checkpoints import decode_checkpoint
from service.sink.client import redis_client
from service.sink.keys import KeyLayout
from service.sink.mirror import MirrorOptions, RedisMirror
from service.sink.plan import ActionKind, TableAction
from service.sqltext import keyset_page
from service.table_info import TableInfo
from service.transactions import TableFilter, Transaction
from service.transport.connection import (
    connect,
    connect_args,
    current_checkpoint,
    fetch,
    quote_ident,
    server_info,
)
from service.transport.preflight import check_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KeyRange", "SnapshotResult", "copy_range", "plan_ranges", "run_snapshot"]

log = logging.getLogger(__name__)

_IN_SYNC = (
    "{key} exists: this mirror is already kept in sync by the service. "
    "To copy it again, delete the mirror's keys ({prefix}:*) first: "
    "binlog-mirror ctl clear --prefix {prefix} --yes"
)
_INTEGER = ("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT")


@dataclass(frozen=True, slots=True)
class KeyRange:
    """One Spark task: the rows of a table whose single integer key is in [lo, hi), or the whole
    table (lo = hi = None) when the key is not one integer column."""

    schema: str
    table: str
    key: tuple[str, ...]
    utc_columns: tuple[str, ...]  # TIMESTAMP columns (read as naive UTC, stored as aware UTC)
    lo: int | None = None
    hi: int | None = None


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    checkpoint: Checkpoint
    rows: dict[tuple[str, str], int]
    skipped: list[tuple[str, str]]  # tables without a usable key
    seconds: float


def plan_ranges(
    info: TableInfo, bounds: tuple[int, int] | None, est_rows: int, chunk_rows: int
) -> list[KeyRange]:
    """Split a table into ~est_rows/chunk_rows key ranges (integer key) or one whole-table task."""
    assert info.key
    utc = tuple(c.name for c in info.columns if c.type == "TIMESTAMP")
    if bounds is None:
        return [KeyRange(info.schema, info.table, info.key, utc)]
    lo, hi = bounds[0], bounds[1] + 1
    parts = max(1, min(4096, -(-est_rows // max(1, chunk_rows)), hi - lo))
    step = -(-(hi - lo) // parts)
    return [
        KeyRange(info.schema, info.table, info.key, utc, start, min(start + step, hi))
        for start in range(lo, hi, step)
    ]


# -- executor side ---------------------------------------------------------------------------------
def _read(conn: pymysql.Connection[Any], task: KeyRange, chunk_rows: int) -> Iterator[list[dict[str, Any]]]:
    """The task's rows in key order, chunk by chunk (keyset pagination: no OFFSET scans)."""
    bound = ""
    if task.lo is not None:
        k = quote_ident(task.key[0])
        bound = f"{k} >= {int(task.lo)} AND {k} < {int(task.hi or 0)}"
    last: tuple[Any, ...] | None = None
    while True:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(keyset_page(task.schema, task.table, task.key, last, chunk_rows, bound))
            rows = list(cur.fetchall())
        if not rows:
            return
        yield rows
        if len(rows) < chunk_rows:
            return
        last = tuple(rows[-1][c] for c in task.key)


def copy_range(settings: Settings, task: KeyRange, chunk_rows: int) -> int:
    """Read one range from the source and write its rows to Redis; returns the rows written."""
    url = settings.mysql
    assert url is not None and settings.redis is not None
    layout = KeyLayout(settings.key_prefix)
    json_mode = settings.value_mode == "json"
    conn = pymysql.connect(
        **connect_args(settings, url),
        init_command="SET SESSION time_zone = '+00:00'",  # TIMESTAMPs in UTC, as the binlog has them
    )
    r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
    written = 0
    try:
        for chunk in _read(conn, task, chunk_rows):
            rows = [utc_row(row, task.utc_columns) for row in chunk]
            write_rows(r, layout, task.schema, task.table, task.key, rows, json_mode=json_mode)
            written += len(rows)
    finally:
        conn.close()
        r.close()
    return written


# -- driver side -----------------------------------------------------------------------------------
async def table_ranges(conn: aiomysql.Connection, t: TableInfo, chunk_rows: int) -> list[KeyRange]:
    """The key ranges a keyed table is read in: by integer bounds and the row estimate when its
    key is one integer column (none when the table is empty), else one range."""
    assert t.key is not None
    bounds: tuple[int, int] | None = None
    est = 0
    if len(t.key) == 1 and {c.name: c.type for c in t.columns}.get(t.key[0]) in _INTEGER:
        k, name = quote_ident(t.key[0]), quote_ident(t.schema, t.table)
        lo, hi = (await fetch(conn, f"SELECT MIN({k}), MAX({k}) FROM {name}"))[0]
        if lo is None:
            return []  # empty table: registered, nothing to read
        bounds = (int(lo), int(hi))
        rows = await fetch(
            conn,
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (t.schema, t.table),
        )
        est = int(rows[0][0] or 0) if rows else 0
    return plan_ranges(t, bounds, est, chunk_rows)


async def _prepare(
    settings: Settings, chunk_rows: int, catalog: Catalog
) -> tuple[Checkpoint, list[TableInfo], list[KeyRange]]:
    conn = await connect(settings)
    try:
        info = await server_info(conn)
        problems, _ = check_config(info)
        if problems:
            raise PreflightError("the source cannot be mirrored:\n  " + "\n  ".join(problems))
        position = await current_checkpoint(conn, info)  # P: before any row is read
        now = await fetch(conn, "SELECT UNIX_TIMESTAMP()")
        position = Checkpoint(position.position, position.gtid_set, int(now[0][0]))
        tables = [await catalog.load(conn, s, t) for s, t in await catalog.wanted_tables(conn)]
        ranges = [r for t in tables if t.key for r in await table_ranges(conn, t, chunk_rows)]
        return position, tables, ranges
    finally:
        conn.close()


def run_snapshot(
    spark: SparkSession,
    settings: Settings,
    *,
    chunk_rows: int = 10_000,
    progress: Callable[[str], None] = log.info,
) -> SnapshotResult:
    if settings.mysql is None or settings.redis is None:
        raise ConfigError("snapshot needs --mysql and --redis (or their env vars / config file)")
    if settings.table or settings.document:
        raise ConfigError(
            'table/document: the Spark snapshot does not apply [table."…"] or [document.…] sections by '
            "this version yet; use the single-process command (or remove the sections)"
        )
    started = time.monotonic()
    layout = KeyLayout(settings.key_prefix)
    try:
        # first, and without an event loop: a call from async code is refused as it always was
        r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
        try:
            if decode_checkpoint(r.hgetall(layout.checkpoint_key)) is not None:
                raise ConfigError(_IN_SYNC.format(key=layout.checkpoint_key, prefix=layout.prefix))
        finally:
            r.close()
        position, tables, rows = asyncio.run(_snapshot(spark, settings, chunk_rows, progress))
    except redis_sync.RedisError as exc:
        raise SinkError(f"snapshot: {exc}") from exc
    except pymysql.MySQLError as exc:
        raise SourceError(f"snapshot: {exc}") from exc
    skipped = [(t.schema, t.table) for t in tables if not t.key]
    return SnapshotResult(position, rows, skipped, time.monotonic() - started)


async def _snapshot(
    spark: SparkSession, settings: Settings, chunk_rows: int, progress: Callable[[str], None]
) -> tuple[Checkpoint, list[TableInfo], dict[tuple[str, str], int]]:
    assert settings.redis is not None
    url = settings.redis.url.get_secret_value()
    layout = KeyLayout(settings.key_prefix)
    catalog = Catalog(TableFilter.from_lists(settings.tables, settings.exclude_tables))
    redis = redis_client(url, socket_timeout=10, socket_connect_timeout=5)
    options = MirrorOptions(json_mode=settings.value_mode == "json", lease_ttl=settings.lease_ttl_seconds)
    token = "snapshot-" + secrets.token_hex(6)
    mirror = RedisMirror(redis, layout, catalog.key_columns, options, token=token)
    async with writer_lease(mirror, settings.lease_ttl_seconds, "snapshot") as register:
        position, tables, ranges = await _prepare(settings, chunk_rows, catalog)
        gtid = position.gtid_set or "no GTID"
        progress(f"source at {position.position} ({gtid}): {len(tables)} tables, {len(ranges)} ranges")
        rows = await asyncio.to_thread(_copy, spark, settings, layout, tables, ranges, chunk_rows)
        # every selected table, keyless ones too (as the service registers them): a table
        # missing from `__tables` would be copied again by the service as newly selected
        await register([(t.schema, t.table) for t in tables], position)
    return position, tables, rows


@contextlib.asynccontextmanager
async def writer_lease(
    mirror: RedisMirror, ttl: float, job: str
) -> AsyncIterator[Callable[[list[tuple[str, str]], Checkpoint], Awaitable[None]]]:
    """A bulk job's hold on an empty mirror: refuses one with a checkpoint, takes the writer lease
    and keeps it while the job writes, then closes the mirror and its client. Yields the job's
    last step: register the tables and store the checkpoint, in one apply, if the lease held."""
    layout, redis = mirror.layout, mirror.redis
    try:
        if await mirror.load_checkpoint() is not None:
            raise ConfigError(_IN_SYNC.format(key=layout.checkpoint_key, prefix=layout.prefix))
        if not await mirror.acquire_lease():
            holder = await redis.get(layout.lease_key)
            raise SinkError(f"{layout.lease_key} is held by {holder!r}: stop the running binlog-mirror first")
        lease = asyncio.create_task(_keep_lease(mirror, ttl), name=f"{job}-lease")

        async def register(tables: list[tuple[str, str]], at: Checkpoint) -> None:
            if lease.done():
                raise SinkError(f"the {job} lost its writer lease while writing; run it again")
            actions = [TableAction(ActionKind.REGISTER, schema, table) for schema, table in tables]
            await mirror.apply([(Transaction((), (), None, at.ts, at), actions)])

        try:
            yield register
        finally:
            lease.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lease
            await mirror.release_lease()
    finally:
        await mirror.close()
        await redis.aclose()


async def _keep_lease(mirror: RedisMirror, ttl: float) -> None:
    """Renew every ttl/3; returns when the lease is lost (Redis errors are retried)."""
    while True:
        await asyncio.sleep(ttl / 3)
        try:
            await mirror.renew_lease()
        except LeaseLost:
            return
        except SinkError as exc:
            log.warning("renewing the snapshot's lease: %s", exc)


def _copy(
    spark: SparkSession,
    settings: Settings,
    layout: KeyLayout,
    tables: list[TableInfo],
    ranges: list[KeyRange],
    chunk_rows: int,
) -> dict[tuple[str, str], int]:
    """Clear what an earlier copy left, then copy every range (Spark tasks); rows per table."""
    assert settings.redis is not None
    r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
    try:
        for t in tables:
            clear_table(r, layout, t.schema, t.table)
    finally:
        r.close()
    tasks = spark.sparkContext.parallelize(ranges, max(1, len(ranges)))
    counts = tasks.map(lambda kr: ((kr.schema, kr.table), copy_range(settings, kr, chunk_rows)))
    rows: dict[tuple[str, str], int] = {(t.schema, t.table): 0 for t in tables if t.key}
    for table, n in counts.collect():
        rows[table] += n
    return rows
