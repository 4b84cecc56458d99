"""`binlog-mirror replay` and `binlog-mirror snapshot`: the PySpark jobs (docs/pipeline.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from service.cli.common import console, fail, split_globs
from service.errors import ReplicatorError

__all__ = ["replay", "snapshot"]

Master = Annotated[
    str, typer.Option("--master", help="Spark master: local[*], local[N], spark://host:7077, yarn, k8s://...")
]


def _spark_failure(exc: Exception) -> typer.Exit:
    """A failed Spark job: the binlog-mirror error a worker raised, else Spark's own message."""
    from service.batch.session import job_error

    return fail(job_error(exc) or f"the Spark job failed: {str(exc).splitlines()[0]}")


def replay(
    inputs: Annotated[list[str], typer.Argument(help="Binlog files, directories or globs.")],
    out: Annotated[str, typer.Option("--out", help="Parquet output directory (any Spark path).")],
    tables: Annotated[
        list[str] | None, typer.Option("--tables", help="schema.table globs to keep (repeatable; a,b works).")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude-tables", "--exclude", help="Globs to drop.")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output.")] = False,
    master: Master = "local[*]",
) -> None:
    """Decode archived binlog files into Parquet, one row per row change (one Spark task per file)."""
    from service.batch.replay import binlog_paths, replay_to_parquet
    from service.batch.session import spark_session
    from service.transactions import TableFilter

    try:
        paths = binlog_paths(inputs)
        spark = spark_session(master, "binlog-mirror replay")
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    try:
        summary = replay_to_parquet(
            spark,
            paths,
            out,
            TableFilter.from_lists(split_globs(tables), split_globs(exclude)),
            overwrite=overwrite,
        )
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # Py4J / PySpark errors carry the workers' errors as text
        raise _spark_failure(exc) from None
    finally:
        spark.stop()
    console.print(f"{summary.files} file(s) -> {summary.changes} row change(s) in {out}")
    for (schema, table), n in sorted(summary.by_table.items()):
        console.print(f"  {schema}.{table}: {n}")


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
    from service.batch.session import spark_session
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
        spark = spark_session(master, "binlog-mirror snapshot")
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    try:
        result = run_snapshot(spark, settings, chunk_rows=chunk_rows, progress=console.print)
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        raise _spark_failure(exc) from None
    finally:
        spark.stop()
    total = sum(result.rows.values())
    console.print(f"{total} rows of {len(result.rows)} table(s) in {result.seconds:.1f}s")
    for (schema, table), n in sorted(result.rows.items()):
        console.print(f"  {schema}.{table}: {n}")
    for schema, table in result.skipped:
        console.print(f"  {schema}.{table}: skipped (no primary key and no unique NOT NULL key)")
    console.print(f"checkpoint {result.checkpoint.position}: start `binlog-mirror run` to stream from there")
