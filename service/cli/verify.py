"""`binlog-mirror verify`: compare the mirror with its source; `--repair` rewrites what differs
(the logic is service/verify.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.common import console
from service.errors import ConfigError, ReplicatorError

if TYPE_CHECKING:
    from service.verify import Difference

__all__ = ["verify"]


EXIT_ERROR = 2  # could not verify (or repair): 0 = equal, 1 = differences


def verify(
    mysql: Annotated[
        str | None, typer.Option("--mysql", help="mysql://user:pass@host:port (needs SELECT).")
    ] = None,
    redis: Annotated[str | None, typer.Option("--redis", help="redis://host:port/db")] = None,
    tables: Annotated[
        list[str] | None,
        typer.Option("--tables", help="schema.table globs to verify (repeatable; a,b works)."),
    ] = None,
    exclude_tables: Annotated[
        list[str] | None,
        typer.Option("--exclude-tables", help="schema.table globs to leave out; wins over --tables."),
    ] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis key prefix (default mirror).")] = None,
    value_mode: Annotated[
        str | None, typer.Option("--value-mode", help="hash | json (as the mirror's)")
    ] = None,
    repair: Annotated[
        bool,
        typer.Option("--repair", help="Rewrite the differing, missing and extra rows (takes the lease)."),
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Print at most this many keys.")] = 100,
    chunk_rows: Annotated[int, typer.Option("--chunk-rows", min=1, help="Source rows per chunk.")] = 1000,
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.")] = None,
    master: Annotated[
        str | None,
        typer.Option(
            "--master", help="Run on Spark (local[*], spark://host:7077, ...): key ranges in parallel."
        ),
    ] = None,
    report_dir: Annotated[
        str | None,
        typer.Option("--report", help="With Spark: write the differences (Parquet) and summary.json here."),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --report.")] = False,
) -> None:
    """Compare every mirrored row with the source; print each differing, missing or extra key (up
    to --limit) and a summary. Exit 0 when equal (or, with --repair, once repaired), 1 when not,
    2 when the check could not run."""
    from service.settings import load_settings
    from service.verify import Verifier

    try:
        settings = load_settings(
            config,
            mysql=mysql,
            redis=redis,
            tables=tables,
            exclude_tables=exclude_tables,
            key_prefix=prefix,
            value_mode=value_mode,
        )
        if settings.mysql is None or settings.redis is None:
            raise ConfigError(
                "verify needs --mysql and --redis (or BINLOG_MIRROR_MYSQL / BINLOG_MIRROR_REDIS)"
            )
    except ConfigError as exc:
        console().print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_ERROR) from None
    printed = 0

    def show(d: Difference) -> None:
        nonlocal printed
        if printed < limit:
            detail = f"  ({', '.join(d.fields)})" if d.fields else ""
            typer.echo(f"{d.kind:8} {d.key}{detail}")
        printed += 1

    try:
        if master is not None or report_dir is not None:
            from service.cli.batch import spark_verify  # pyspark only when asked for

            report = spark_verify(settings, master or "local[*]", report_dir, repair, chunk_rows, overwrite)
            for d in report.differences:
                show(d)
        else:
            report = asyncio.run(
                Verifier(settings, chunk_rows=chunk_rows).run(repair=repair, on_difference=show)
            )
    except ReplicatorError as exc:
        console().print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_ERROR) from None
    if printed > limit:
        typer.echo(f"... and {printed - limit} more")
    for t in report.tables:
        if not t.keyed:
            typer.echo(f"{t.schema}.{t.table}: not mirrored (no primary key and no unique NOT NULL key)")
            continue
        expired = f", {t.expired} expired (ttl)" if t.expired else ""
        typer.echo(
            f"{t.schema}.{t.table}: {t.rows} rows, {t.count('differs')} differing, "
            f"{t.count('missing')} missing, {t.count('extra')} extra{expired}"
        )
    found = len(report.differences)
    summary = f"{len(report.tables)} tables, {sum(t.rows for t in report.tables)} rows: "
    summary += "equal" if not found else f"{found} keys differ"
    if repair and found:
        summary += f"; {report.repaired} repaired"
    typer.echo(summary)
    if found and not (repair and report.repaired == found):
        raise typer.Exit(1)
