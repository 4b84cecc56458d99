"""Verify a mirror against its source at scale: the single-process verify (service/verify.py),
with the comparison spread over Spark tasks (docs/pipeline.md, "verify").

1. The driver splits each selected table into key ranges (`plan_ranges`, as the snapshot does).
2. One task per range reads its rows from the source with the snapshot's connector code
   (`snapshot._read`: keyset pagination, TIMESTAMPs in UTC), reads their keys from Redis and
   compares them with `service.rowcompare.compare_row`: the rows that differ (or are missing) come
   back with their source row; every key read comes back too.
3. Keys the mirror holds that no source row has (an anti join of the mirror's keys with the keys
   read) are the extra ones.
4. The driver hands these suspects to `Verifier.confirm_suspects`: each is read again once the
   mirror has passed the source's position (a running service may simply not have applied it
   yet), and what still differs is reported, then repaired through the sink when asked. So the
   result, and the repair, are those of `binlog-mirror verify`.

The report (a temporary path renamed at the end): `differences/` (Parquet: schema, table, kind,
key, fields) and `summary.json`.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import orjson
import pymysql
import redis as redis_sync

from service.batch.session import JobSummary, job_progress, staged_output, write_text
from service.batch.snapshot import KeyRange, _read, table_ranges
from service.catalog import Catalog
from service.checkpoint import BinlogPosition
from service.errors import ConfigError, SinkError, SourceError
from service.rowcompare import compare_row, utc_row
from service.settings import Settings
from service.sink.keys import KeyLayout, glob_literal, row_suffix_of
from service.table_info import TableInfo
from service.transactions import TableFilter
from service.transport.connection import (
    close_connection,
    connect,
    connect_args,
    current_checkpoint,
    server_info,
)
from service.verify import Verifier, VerifyReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["verify_mirror"]


def _check_range(settings: Settings, task: KeyRange, chunk_rows: int) -> Iterator[tuple[Any, ...]]:
    """Executor: (schema, table, suffix, verdict, pickled source row) for every row of the range;
    verdict "" when the mirror holds it exactly."""
    assert settings.mysql is not None and settings.redis is not None
    layout = KeyLayout(settings.key_prefix)
    json_mode = settings.value_mode == "json"
    base, index = layout.table_base(task.schema, task.table), layout.index_key(task.schema, task.table)
    conn = pymysql.connect(
        **connect_args(settings, settings.mysql), init_command="SET SESSION time_zone = '+00:00'"
    )
    r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
    try:
        for chunk in _read(conn, task, chunk_rows):
            rows = [utc_row(row, task.utc_columns) for row in chunk]
            suffixes = [layout.row_suffix([row[c] for c in task.key]) for row in rows]
            pipe = r.pipeline(transaction=False)
            for suffix in suffixes:
                if json_mode:
                    pipe.get(f"{base}:{suffix}")
                else:
                    pipe.hgetall(f"{base}:{suffix}")
                pipe.sismember(index, suffix)
            replies = pipe.execute()
            for i, (row, suffix) in enumerate(zip(rows, suffixes, strict=True)):
                verdict = compare_row(row, replies[2 * i], bool(replies[2 * i + 1]), json_mode)
                if verdict is None:
                    yield (task.schema, task.table, suffix, "", None)
                else:
                    yield (task.schema, task.table, suffix, verdict[0], pickle.dumps(row))
    finally:
        conn.close()
        r.close()


def _mirror_suffixes(r: redis_sync.Redis, layout: KeyLayout, schema: str, table: str) -> set[str]:
    """Every row suffix the mirror holds for a table: its `__keys` members and row keys."""
    base = layout.table_base(schema, table)
    out = {m.decode() for m in r.sscan_iter(layout.index_key(schema, table), count=1000)}
    for key in r.scan_iter(match=glob_literal(base) + ":*", count=1000):
        if (suffix := row_suffix_of(key, base)) is not None:
            out.add(suffix)
    return out


async def _plan(settings: Settings, chunk_rows: int) -> tuple[list[TableInfo], list[KeyRange]]:
    catalog = Catalog(TableFilter.from_lists(settings.tables, settings.exclude_tables))
    conn = await connect(settings)
    try:
        tables = [await catalog.load(conn, s, t) for s, t in await catalog.wanted_tables(conn)]
        ranges = [r for t in tables if t.exists and t.key for r in await table_ranges(conn, t, chunk_rows)]
    finally:
        await close_connection(conn)
    return tables, ranges


async def _position(settings: Settings) -> BinlogPosition:
    conn = await connect(settings)
    try:
        return (await current_checkpoint(conn, await server_info(conn))).position
    finally:
        await close_connection(conn)


def verify_mirror(
    spark: SparkSession,
    settings: Settings,
    out: str,
    *,
    chunk_rows: int = 10_000,
    repair: bool = False,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Compare the tables `settings` selects with the mirror; report to `out`; see the module doc."""
    if settings.mysql is None or settings.redis is None:
        raise ConfigError("verify needs --mysql and --redis (or their env vars / config file)")
    if settings.table or settings.document:
        raise ConfigError(
            'table/document: the Spark verify does not apply [table."…"] or [document.…] sections by '
            "this version yet; use the single-process command (or remove the sections)"
        )
    started = time.monotonic()
    layout = KeyLayout(settings.key_prefix)
    try:
        with staged_output(spark, out, overwrite=overwrite) as tmp:
            tables, ranges = asyncio.run(_plan(settings, chunk_rows))
            if progress is not None:
                progress(f"{len(tables)} tables, {len(ranges)} key ranges")
            schema = "schema string, table string, suffix string, verdict string, row binary"
            with job_progress(spark, "verify"):
                read = (
                    spark.sparkContext.parallelize(ranges, max(1, len(ranges)))
                    .flatMap(lambda kr: _check_range(settings, kr, chunk_rows))
                    .toDF(schema)
                    .cache()
                )
                rows = {
                    (r["schema"], r["table"]): int(r["count"])
                    for r in read.groupBy("schema", "table").count().collect()
                }
                found = read.where("verdict != ''").select("schema", "table", "suffix", "row").collect()
                r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
                try:
                    held = [
                        (t.schema, t.table, s)
                        for t in tables
                        if t.exists and t.key
                        for s in _mirror_suffixes(r, layout, t.schema, t.table)
                    ]
                finally:
                    r.close()
                keys = spark.createDataFrame(held, "schema string, table string, suffix string")
                extra = keys.join(
                    read.select("schema", "table", "suffix"), ["schema", "table", "suffix"], "left_anti"
                )
                extras = extra.collect()
                read.unpersist()
            target = asyncio.run(_position(settings))
            suspects: dict[tuple[str, str], dict[str, Any]] = {}
            for f in found:
                suspects.setdefault((f["schema"], f["table"]), {})[f["suffix"]] = pickle.loads(f["row"])
            for e in extras:
                suspects.setdefault((e["schema"], e["table"]), {})[e["suffix"]] = None
            verifier = Verifier(settings, chunk_rows=min(chunk_rows, 1000))
            report = asyncio.run(verifier.confirm_suspects(suspects, rows, target, repair=repair))
            diffs = [(d.schema, d.table, d.kind, d.key, list(d.fields)) for d in report.differences]
            spark.createDataFrame(
                diffs, "schema string, table string, kind string, key string, fields array<string>"
            ).coalesce(1).write.parquet(f"{tmp}/differences")
            summary = {
                "tables": len(report.tables),
                "rows": sum(t.rows for t in report.tables),
                "differs": sum(t.count("differs") for t in report.tables),
                "missing": sum(t.count("missing") for t in report.tables),
                "extra": sum(t.count("extra") for t in report.tables),
                "entries": sum(t.count("entries") for t in report.tables),
                "repaired": report.repaired,
                "seconds": round(time.monotonic() - started, 3),
                "not_keyed": [f"{t.schema}.{t.table}" for t in report.tables if not t.keyed],
            }
            write_text(
                spark, f"{tmp}/summary.json", orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode()
            )
    except redis_sync.RedisError as exc:
        raise SinkError(f"verify: {exc}") from exc
    except pymysql.MySQLError as exc:
        raise SourceError(f"verify: {exc}") from exc
    return report


def summary_of(report: VerifyReport, seconds: float, out: str) -> JobSummary:
    return JobSummary("verify", sum(t.rows for t in report.tables), 0, len(report.tables), seconds, out)
