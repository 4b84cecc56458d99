"""The `binlog-mirror` command line: thin wrappers that build settings and call the service."""

from __future__ import annotations

import json
import logging
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from service.batch_cli import replay, snapshot
from service.binlog_cli import decode
from service.errors import ReplicatorError
from service.run_cli import demo, run
from service.stack import LocalStack
from service.stream_cli import stream

__all__ = ["app"]

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Keep a Redis mirror of MySQL tables in sync."
)
stack_app = typer.Typer(no_args_is_help=True, help="A throwaway local MariaDB + Redis on 127.0.0.1.")
app.add_typer(stack_app, name="stack")
app.command("stream")(stream)
app.command("decode")(decode)
app.command("run")(run)
app.command("demo")(demo)
app.command("snapshot")(snapshot)
app.command("replay")(replay)

console = Console(stderr=True)

StackDir = Annotated[
    Path | None,
    typer.Option(
        "--dir", envvar="BINLOG_MIRROR_STACK_DIR", help="Where the stack keeps its data (default .stack/)."
    ),
]


def fail(message: str, code: int = 1) -> typer.Exit:
    """One clear line on stderr, then exit non-zero."""
    console.print(f"[red]error:[/red] {message}", highlight=False, markup=True, soft_wrap=True)
    return typer.Exit(code)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"binlog-mirror {version('binlog-mirror')}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@stack_app.command("up")
def stack_up(directory: StackDir = None) -> None:
    """Start MariaDB (binlog on, ROW, FULL metadata, CRC32, GTID) and Redis (AOF on)."""
    stack = LocalStack(directory)
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
    LocalStack(directory).down(purge=purge)
    typer.echo("stack stopped")


@stack_app.command("status")
def stack_status(
    directory: StackDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What the running servers report about themselves."""
    status = LocalStack(directory).status()
    if as_json:
        typer.echo(json.dumps(status, indent=2, default=str))
    else:
        for key, value in status.items():
            typer.echo(f"{key}: {value}")
    if not status.get("running"):
        raise typer.Exit(1)
