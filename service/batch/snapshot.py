"""Snapshot: copy the selected tables into an empty mirror with Spark, then hand over to the service.

The protocol (docs/pipeline.md, "Snapshot"):
1. refuse when the mirror already has a checkpoint (the service keeps such a mirror in sync) or
   another instance holds the writer lease; take the lease and renew it from a thread, so a
   service started meanwhile waits as a standby;
2. note the source's position P (end of binlog and GTID set) BEFORE reading any row;
3. clear what an earlier, failed snapshot left of each table, then read every table in key
   ranges, one Spark task per range, writing rows in the service's key layout and value form;
4. store P as the checkpoint, with the tables registered, in one fenced script; release the lease.
The service then resumes at P and re-applies every change made since. Each row read here is at
least as new as P, and re-applying a change onto a newer row only rewinds it until the later
changes are applied again, so the mirror equals the source once the service has caught up.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymysql
import redis as redis_sync

from service.checkpoint import Checkpoint
from service.errors import ConfigError, PreflightError, SinkError, SourceError
from service.pipeline.catalog import Catalog, TableInfo
from service.settings import Settings
from service.sink.keys import KeyLayout
from service.sink.plan import checkpoint_fields
from service.sink.scripts import RELEASE, RENEW
from service.sink.values import field_value, json_document
from service.transactions import TableFilter, Transaction
from service.transport.connection import connect, connect_args, current_checkpoint, fetch, server_info
from service.transport.preflight import check_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KeyRange", "SnapshotResult", "copy_range", "plan_ranges", "run_snapshot"]

log = logging.getLogger(__name__)

# Fence, then the checkpoint and the table registrations: ARGV = token, n_fields, fields..., tables...
HANDOVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASE_LOST the snapshot lost its writer lease')
end
local n = tonumber(ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[2], unpack(ARGV, 3, 2 + 2 * n))
for i = 3 + 2 * n, #ARGV do redis.call('SADD', KEYS[3], ARGV[i]) end
return 1
"""


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


def _q(ident: str) -> str:
    return "`" + ident.replace("`", "``") + "`"


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
    cols = ", ".join(_q(c) for c in task.key)
    bound = ""
    if task.lo is not None:
        bound = f"{_q(task.key[0])} >= {int(task.lo)} AND {_q(task.key[0])} < {int(task.hi or 0)}"
    last: tuple[Any, ...] | None = None
    while True:
        where = [bound] if bound else []
        args: tuple[Any, ...] = ()
        if last is not None:
            where.append(f"({cols}) > ({', '.join(['%s'] * len(task.key))})")
            args = last
        sql = f"SELECT * FROM {_q(task.schema)}.{_q(task.table)}"
        sql += f" WHERE {' AND '.join(where)}" if where else ""
        sql += f" ORDER BY {cols} LIMIT {chunk_rows}"
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(sql, args)
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
    base = layout.table_base(task.schema, task.table)
    index = layout.index_key(task.schema, task.table)
    conn = pymysql.connect(
        **connect_args(settings, url),
        init_command="SET SESSION time_zone = '+00:00'",  # TIMESTAMPs in UTC, as the binlog has them
    )
    r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
    written = 0
    try:
        for rows in _read(conn, task, chunk_rows):
            pipe = r.pipeline(transaction=False)
            suffixes = []
            for row in rows:
                for c in task.utc_columns:
                    v = row.get(c)
                    if isinstance(v, dt.datetime):
                        row[c] = v.replace(tzinfo=dt.UTC)
                suffix = layout.row_suffix([row[c] for c in task.key])
                suffixes.append(suffix)
                key = f"{base}:{suffix}"
                if json_mode:
                    pipe.set(key, json_document(row))
                    continue
                pipe.delete(key)
                present = {k: field_value(v) for k, v in row.items() if v is not None}
                if present:
                    pipe.hset(key, mapping=present)  # type: ignore[arg-type]
            pipe.sadd(index, *suffixes)
            pipe.execute()
            written += len(rows)
    finally:
        conn.close()
        r.close()
    return written


# -- driver side -----------------------------------------------------------------------------------
async def _prepare(settings: Settings, chunk_rows: int) -> tuple[Checkpoint, list[TableInfo], list[KeyRange]]:
    conn = await connect(settings)
    try:
        info = await server_info(conn)
        problems, _ = check_config(info)
        if problems:
            raise PreflightError("the source cannot be mirrored:\n  " + "\n  ".join(problems))
        position = await current_checkpoint(conn, info)  # P: before any row is read
        now = await fetch(conn, "SELECT UNIX_TIMESTAMP()")
        position = Checkpoint(position.position, position.gtid_set, int(now[0][0]))
        catalog = Catalog(TableFilter.from_lists(settings.tables, settings.exclude_tables))
        tables = [await catalog.load(conn, s, t) for s, t in await catalog.wanted_tables(conn)]
        ranges: list[KeyRange] = []
        for t in tables:
            if not t.key:
                continue
            types = {c.name: c.type for c in t.columns}
            bounds: tuple[int, int] | None = None
            est = 0
            if len(t.key) == 1 and types.get(t.key[0]) in _INTEGER:
                k, name = _q(t.key[0]), f"{_q(t.schema)}.{_q(t.table)}"
                lo, hi = (await fetch(conn, f"SELECT MIN({k}), MAX({k}) FROM {name}"))[0]
                if lo is None:
                    continue  # empty table: registered, nothing to read
                bounds = (int(lo), int(hi))
                rows = await fetch(
                    conn,
                    "SELECT TABLE_ROWS FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (t.schema, t.table),
                )
                est = int(rows[0][0] or 0) if rows else 0
            ranges += plan_ranges(t, bounds, est, chunk_rows)
        return position, tables, ranges
    finally:
        conn.close()


class _Lease:
    """The mirror's writer lease, held by the snapshot (renewed from a daemon thread)."""

    def __init__(self, r: redis_sync.Redis, layout: KeyLayout, ttl: float) -> None:
        self.r, self.key, self.ttl_ms = r, layout.lease_key, int(ttl * 1000)
        self.token = "snapshot-" + secrets.token_hex(6)
        self._stop = threading.Event()
        self.lost = False
        if not r.set(self.key, self.token, nx=True, px=self.ttl_ms):
            holder = r.get(self.key)
            raise SinkError(f"{self.key} is held by {holder!r}: stop the running binlog-mirror first")
        self._thread = threading.Thread(target=self._renew, name="snapshot-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        renew = self.r.register_script(RENEW)
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if not renew(keys=[self.key], args=[self.token, self.ttl_ms]):
                    self.lost = True
                    return
            except redis_sync.RedisError as exc:
                log.warning("renewing the snapshot's lease: %s", exc)

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        self.r.register_script(RELEASE)(keys=[self.key], args=[self.token])


def _clear(r: redis_sync.Redis, layout: KeyLayout, schema: str, table: str) -> None:
    """Remove the rows an earlier snapshot or mirror left for this table."""
    index, base = layout.index_key(schema, table), layout.table_base(schema, table)
    batch: list[str] = []
    for member in r.sscan_iter(index, count=1000):
        batch.append(f"{base}:{member.decode()}")
        if len(batch) >= 1000:
            r.delete(*batch)
            batch = []
    if batch:
        r.delete(*batch)
    r.unlink(index)  # a big set is freed off Redis' main thread


def run_snapshot(
    spark: SparkSession,
    settings: Settings,
    *,
    chunk_rows: int = 10_000,
    progress: Callable[[str], None] = log.info,
) -> SnapshotResult:
    if settings.mysql is None or settings.redis is None:
        raise ConfigError("snapshot needs --mysql and --redis (or their env vars / config file)")
    started = time.monotonic()
    layout = KeyLayout(settings.key_prefix)
    r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
    try:
        try:
            if r.exists(layout.checkpoint_key):
                raise ConfigError(
                    f"{layout.checkpoint_key} exists: this mirror is already kept in sync by the service. "
                    f"To copy it again, delete the mirror's keys ({layout.prefix}:*) first: "
                    f"binlog-mirror ctl clear --prefix {layout.prefix} --yes"
                )
            lease = _Lease(r, layout, settings.lease_ttl_seconds)
        except redis_sync.RedisError as exc:
            raise SinkError(f"snapshot: {exc}") from exc
        try:
            position, tables, ranges = asyncio.run(_prepare(settings, chunk_rows))
            gtid = position.gtid_set or "no GTID"
            progress(f"source at {position.position} ({gtid}): {len(tables)} tables, {len(ranges)} ranges")
            for t in tables:
                _clear(r, layout, t.schema, t.table)
            tasks = spark.sparkContext.parallelize(ranges, max(1, len(ranges)))
            counts = tasks.map(lambda kr: ((kr.schema, kr.table), copy_range(settings, kr, chunk_rows)))
            rows: dict[tuple[str, str], int] = {(t.schema, t.table): 0 for t in tables if t.key}
            for table, n in counts.collect():
                rows[table] += n
            if lease.lost:
                raise SinkError("the snapshot lost its writer lease while copying; run it again")
            # the same checkpoint hash the service writes after a transaction ending at P
            fields = checkpoint_fields(Transaction((), (), None, position.ts, position), settings.value_mode)
            args: list[Any] = [lease.token, len(fields)]
            for k, v in fields.items():
                args += [k, str(v)]
            # every selected table, keyless ones too (as the service registers them): a table
            # missing from `__tables` would be copied again by the service as newly selected
            args += [layout.table_id(t.schema, t.table) for t in tables]
            keys = [layout.lease_key, layout.checkpoint_key, layout.tables_key]
            r.register_script(HANDOVER)(keys=keys, args=args)
        finally:
            lease.release()
    except redis_sync.RedisError as exc:
        raise SinkError(f"snapshot: {exc}") from exc
    except pymysql.MySQLError as exc:
        raise SourceError(f"snapshot: {exc}") from exc
    finally:
        r.close()
    skipped = [(t.schema, t.table) for t in tables if not t.key]
    return SnapshotResult(position, rows, skipped, time.monotonic() - started)
