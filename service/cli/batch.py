"""The PySpark jobs (docs/pipeline.md): `replay`, `compact`, `load`, `snapshot`, and `verify --master`'s
run (`spark_verify`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.common import console, fail, split_globs
from service.errors import ReplicatorError

if TYPE_CHECKING:
    from service.settings import Settings
    from service.verify import VerifyReport

__all__ = ["compact", "load", "replay", "snapshot", "spark_verify"]

log = logging.getLogger(__name__)

Master = Annotated[
    str, typer.Option("--master", help="Spark master: local[*], local[N], spark://host:7077, yarn, k8s://...")
]


def _spark_failure(job: str, exc: BaseException, code: int = 1) -> typer.Exit:
    """A failed job as one line: the binlog-mirror error a worker raised (a Spark executor's or a
    local worker process's: replay_local.TaskFailed), else the error's own first line; the whole
    error (the JVM stack, the worker's traceback) goes to a file named in that line."""
    from service.batch.session import failure_details, job_error

    details = failure_details(job, exc)
    message = job_error(exc) or f"the job failed: {str(exc).strip().splitlines()[0]}"
    return fail(f"{job}: {message} (details: {details})", code)


@contextlib.contextmanager
def _job(job: str, code: int = 1) -> Iterator[None]:
    """Our errors as their one line; anything else from Spark as `_spark_failure`."""
    try:
        yield
    except ReplicatorError as exc:
        raise fail(str(exc), code) from None
    except typer.Exit:
        raise
    except Exception as exc:  # Py4J / PySpark errors carry the workers' errors as text
        raise _spark_failure(job, exc, code) from None


def _refuse_sentinel(settings: Settings, job: str) -> None:
    """Shaped tables and Sentinel: refused. The Spark jobs' workers connect with redis-py's sync
    client from the URL, which has no Sentinel form: one line with the way round instead of their
    traceback."""
    if settings.table or settings.document:  # the Spark jobs know no shaping (service/shaping.py)
        raise fail(
            f'table/document: {job} does not apply [table."…"] or [document.…] sections by this '
            "version yet; run the single-process command, or remove the sections"
        )
    if settings.redis is not None and settings.redis.sentinel:
        raise fail(
            f"{job} does not support Redis Sentinel (redis+sentinel://) yet: give it the current "
            "master's redis:// URL (redis-cli -h SENTINEL -p 26379 SENTINEL GET-MASTER-ADDR-BY-NAME "
            "SERVICE)"
        )


def _summary(line: str) -> None:
    log.info("%s", line)
    console().print(line, highlight=False)


def replay(
    inputs: Annotated[list[str], typer.Argument(help="Binlog files, directories or globs.")],
    out: Annotated[str, typer.Option("--out", help="Output directory of the change log (any Spark path).")],
    tables: Annotated[
        list[str] | None, typer.Option("--tables", help="schema.table globs to keep (repeatable; a,b works).")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude-tables", "--exclude", help="Globs to drop.")
    ] = None,
    json_columns: Annotated[
        bool, typer.Option("--json", help="Also keep the canonical JSON images (before_json, after_json).")
    ] = False,
    schema_file: Annotated[
        Path | None,
        typer.Option(
            "--schema", help="A `binlog-mirror schema export` file, for binlogs without column names."
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output.")] = False,
    split_mb: Annotated[
        int,
        typer.Option("--split-mb", min=1, help="Decode a bigger file in ranges of about this many MiB."),
    ] = 64,
    master: Master = "local[*]",
) -> None:
    """Decode archived binlog files into a typed change log (one task per file range)."""
    from service.batch.localfs import local_paths
    from service.batch.replay import binlog_paths, replay_to_parquet
    from service.batch.session import spark_session
    from service.transactions import TableFilter

    with _job("replay"):
        paths = binlog_paths(inputs)
        wanted = TableFilter.from_lists(split_globs(tables), split_globs(exclude))
        schema_doc, split = (str(schema_file) if schema_file else None), split_mb << 20
        if local_paths(master, out):  # the same tasks in worker processes: no JVM
            from service.batch.replay_local import local_workers, refuse_pandas, replay_locally

            refuse_pandas()  # this process may run tasks too (local, one file): pyarrow would import it
            summary = replay_locally(
                paths, out, wanted, local_workers(master),
                overwrite=overwrite, canonical=json_columns, schema_file=schema_doc, split_bytes=split,
            )  # fmt: skip
        else:
            spark = spark_session(master, "binlog-mirror replay")
            try:
                summary = replay_to_parquet(
                    spark, paths, out, wanted,
                    overwrite=overwrite, canonical=json_columns, schema_file=schema_doc, split_bytes=split,
                )  # fmt: skip
            finally:
                spark.stop()
    for (schema, table), n in sorted(summary.by_table.items()):
        console().print(f"  {schema}.{table}: {n} changes", highlight=False)
    console().print(f"  {summary.ddl} DDL statements, {summary.transactions} transactions", highlight=False)
    if summary.end:
        console().print(f"  ends at {summary.end['file']}:{summary.end['pos']}", highlight=False)
    _summary(summary.job(out).line())


def compact(
    log_dir: Annotated[str, typer.Argument(help="A change log written by `binlog-mirror replay`.")],
    out: Annotated[str, typer.Option("--out", help="Output directory of the compacted state.")],
    until: Annotated[
        str | None,
        typer.Option("--until", help="FILE:POS: the state after the transactions ending there or before."),
    ] = None,
    tables: Annotated[
        list[str] | None, typer.Option("--tables", help="schema.table globs to keep (repeatable; a,b works).")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output.")] = False,
    master: Master = "local[*]",
) -> None:
    """The latest row per key of each table of a change log (deletes removed, partial images merged)."""
    from service.batch.compact import compact as run_compact
    from service.batch.compact import parse_until
    from service.batch.compact_arrow import arrow_compact, fits_in_memory
    from service.batch.localfs import local_paths
    from service.batch.session import spark_session
    from service.transactions import TableFilter

    with _job("compact"):
        position = parse_until(until) if until else None
        wanted = TableFilter.from_lists(split_globs(tables)) if tables else None
        if local_paths(master, log_dir, out) and fits_in_memory(log_dir):  # the same fold, no JVM
            result = arrow_compact(log_dir, out, until=position, tables=wanted, overwrite=overwrite)
        else:
            spark = spark_session(master, "binlog-mirror compact")
            try:
                result = run_compact(spark, log_dir, out, until=position, tables=wanted, overwrite=overwrite)
            finally:
                spark.stop()
    for (schema, table), n in sorted(result.by_table.items()):
        console().print(f"  {schema}.{table}: {n} rows", highlight=False)
    for schema, table in result.skipped:
        console().print(f"  {schema}.{table}: skipped (the binlog names no primary key)", highlight=False)
    if result.checkpoint:
        console().print(f"  as of {result.checkpoint['file']}:{result.checkpoint['pos']}", highlight=False)
    _summary(result.job(out, 0).line())


def load(
    state: Annotated[str, typer.Argument(help="A compacted state written by `binlog-mirror compact`.")],
    redis: Annotated[str | None, typer.Option("--redis", help="redis://host:port/db")] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis key prefix (default mirror).")] = None,
    value_mode: Annotated[str | None, typer.Option("--value-mode", help="hash | json")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.")] = None,
    master: Master = "local[*]",
) -> None:
    """Write a compacted state into an empty mirror with the checkpoint `run` continues from."""
    from service.batch.localfs import local_paths
    from service.settings import load_settings

    with _job("load"):
        settings = load_settings(config, redis=redis, key_prefix=prefix, value_mode=value_mode)
        _refuse_sentinel(settings, "load")
        local = local_paths(master, state)
        if local:  # this process writes the rows: pyarrow's first scalar would import pandas (0.2-0.7 s)
            from service.batch.replay_local import refuse_pandas

            refuse_pandas()
        from service.batch.load import load_mirror
        from service.batch.session import spark_session

        if local:  # this process writes the rows instead of Spark tasks
            result = load_mirror(None, settings, state)
        else:
            spark = spark_session(master, "binlog-mirror load")
            try:
                result = load_mirror(spark, settings, state)
            finally:
                spark.stop()
    for (schema, table), n in sorted(result.by_table.items()):
        console().print(f"  {schema}.{table}: {n} rows", highlight=False)
    for schema, table in result.left:
        console().print(
            f"  {schema}.{table}: not loaded (rows older than its last ALTER): `run` copies it",
            highlight=False,
        )
    console().print(
        f"checkpoint {result.checkpoint.position}: start `binlog-mirror run` to continue from there",
        highlight=False,
    )
    _summary(result.job(state).line())


def spark_verify(
    settings: Settings, master: str, report_dir: str | None, repair: bool, chunk_rows: int, overwrite: bool
) -> VerifyReport:
    """`binlog-mirror verify --master/--report`: the distributed verify (service/batch/verify.py)."""
    import tempfile
    import time

    from service.batch.session import spark_session
    from service.batch.verify import summary_of, verify_mirror

    _refuse_sentinel(settings, "verify --master")
    out = report_dir or tempfile.mkdtemp(prefix="binlog-mirror-verify-") + "/report"
    started = time.monotonic()
    with _job("verify", code=2):
        spark = spark_session(master, "binlog-mirror verify")
        try:
            report = verify_mirror(
                spark,
                settings,
                out,
                chunk_rows=chunk_rows,
                repair=repair,
                overwrite=overwrite,
                progress=log.info,
            )
        finally:
            spark.stop()
    _summary(summary_of(report, time.monotonic() - started, out).line())
    return report


def snapshot(
    mysql: Annotated[str | None, typer.Option("--mysql", help="mysql://user:pass@host:port")] = None,
    redis: Annotated[str | None, typer.Option("--redis", help="redis://host:port/db")] = None,
    tables: Annotated[
        list[str] | None, typer.Option("--tables", help="schema.table globs to copy (repeatable; a,b works).")
    ] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis key prefix (default mirror).")] = None,
    value_mode: Annotated[str | None, typer.Option("--value-mode", help="hash | json")] = None,
    chunk_rows: Annotated[int, typer.Option("--chunk-rows", help="Rows per range and per read.")] = 10_000,
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.")] = None,
    master: Master = "local[*]",
) -> None:
    """Copy the selected tables into an empty mirror, then store the checkpoint `run` resumes from."""
    from service.batch.session import JobSummary, spark_session
    from service.batch.snapshot import run_snapshot
    from service.settings import load_settings

    try:
        settings = load_settings(
            config,
            mysql=mysql,
            redis=redis,
            tables=split_globs(tables),
            key_prefix=prefix,
            value_mode=value_mode,
        )
        if settings.redis is not None and settings.redis.cluster:
            raise fail("snapshot does not support a Redis Cluster (redis+cluster://) yet")
        _refuse_sentinel(settings, "snapshot")
        spark = spark_session(master, "binlog-mirror snapshot")
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    try:
        result = run_snapshot(spark, settings, chunk_rows=chunk_rows, progress=console().print)
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        raise _spark_failure("snapshot", exc) from None
    finally:
        spark.stop()
    total = sum(result.rows.values())
    console().print(f"{total} rows of {len(result.rows)} table(s) in {result.seconds:.1f}s")
    _summary(JobSummary("snapshot", total, 0, len(result.rows), result.seconds).line())
    for (schema, table), n in sorted(result.rows.items()):
        console().print(f"  {schema}.{table}: {n}")
    for schema, table in result.skipped:
        console().print(f"  {schema}.{table}: skipped (no primary key and no unique NOT NULL key)")
    console().print(
        f"checkpoint {result.checkpoint.position}: start `binlog-mirror run` to stream from there"
    )
