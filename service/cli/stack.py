"""`binlog-mirror stack up|down|status`: the throwaway local MariaDB + Redis (service/devtools/stack.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from service.cli.common import fail
from service.errors import ReplicatorError

__all__ = ["stack_app"]

stack_app = typer.Typer(no_args_is_help=True, help="A throwaway local MariaDB + Redis on 127.0.0.1.")

StackDir = Annotated[
    Path | None,
    typer.Option(
        "--dir", envvar="BINLOG_MIRROR_STACK_DIR", help="Where the stack keeps its data (default .stack/)."
    ),
]


@stack_app.command("up")
def stack_up(
    directory: StackDir = None,
    redis_cluster: Annotated[
        bool,
        typer.Option(
            "--redis-cluster",
            help="A Redis Cluster of 3 masters instead of one Redis (redis+cluster:// URL).",
        ),
    ] = False,
) -> None:
    """Start MariaDB (binlog on, ROW, FULL metadata, CRC32, GTID) and Redis (AOF on)."""
    from service.devtools.stack import LocalStack  # pymysql: only when used

    stack = LocalStack(directory, redis_cluster=redis_cluster)
    try:
        info = stack.up()
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    for name, url in info.urls().items():
        typer.echo(f"{name}: {url}")


@stack_app.command("down")
def stack_down(
    directory: StackDir = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also delete the stack's data directory.")] = False,
) -> None:
    """Stop every process the stack started."""
    from service.devtools.stack import LocalStack  # pymysql: only when used

    LocalStack(directory).down(purge=purge)
    typer.echo("stack stopped")


@stack_app.command("status")
def stack_status(
    directory: StackDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What the running servers report about themselves."""
    from service.devtools.stack import LocalStack  # pymysql: only when used

    status = LocalStack(directory).status()
    if as_json:
        typer.echo(json.dumps(status, indent=2, default=str))
    else:
        for key, value in status.items():
            typer.echo(f"{key}: {value}")
    if not status.get("running"):
        raise typer.Exit(1)
