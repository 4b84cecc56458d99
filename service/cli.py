"""The `binlog-mirror` command line: thin wrappers that build settings and call the service."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from service.batch_cli import replay, snapshot
from service.binlog_cli import decode
from service.cli_options import GlobalOptionsGroup
from service.ctl_cli import ctl_app
from service.errors import ReplicatorError
from service.logsetup import configure
from service.run_cli import run
from service.stack import LocalStack
from service.stream_cli import stream

__all__ = ["app"]

app = typer.Typer(
    cls=GlobalOptionsGroup,  # global options work before or after the subcommand
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # a bug prints a plain traceback, not an 80-column box
    rich_markup_mode=None,  # usage errors as click's one "Error: ..." line, not a wrapped box
    help="Keep a Redis mirror of MySQL tables in sync.",
)
stack_app = typer.Typer(no_args_is_help=True, help="A throwaway local MariaDB + Redis on 127.0.0.1.")
app.add_typer(stack_app, name="stack")
app.add_typer(ctl_app, name="ctl")
app.command("stream")(stream)
app.command("decode")(decode)
app.command("run")(run)
app.command("snapshot")(snapshot)
app.command("replay")(replay)

console = Console(stderr=True, soft_wrap=True)  # one line, never wrapped at 80 columns

StackDir = Annotated[
    Path | None,
    typer.Option(
        "--dir", envvar="BINLOG_MIRROR_STACK_DIR", help="Where the stack keeps its data (default .stack/)."
    ),
]


def fail(message: str, code: int = 1) -> typer.Exit:
    """One clear line on stderr, then exit non-zero."""
    console.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    return typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        from service.version import compiled, version

        typer.echo(f"binlog-mirror {version()} ({'compiled' if compiled() else 'pure Python'} decoder)")
        raise typer.Exit()


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormatChoice(StrEnum):
    text = "text"
    json = "json"


@app.callback()
def main(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Debug logging (= --log-level debug).")
    ] = False,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", envvar="BINLOG_MIRROR_LOG_LEVEL", case_sensitive=False)
    ] = LogLevel.info,
    log_format: Annotated[
        LogFormatChoice,
        typer.Option(
            "--log-format",
            envvar="BINLOG_MIRROR_LOG_FORMAT",
            case_sensitive=False,
            help="json: one object per line (time, level, logger, message and the record's fields).",
        ),
    ] = LogFormatChoice.text,
    _show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Global options may come before or after the subcommand."""
    configure(
        "debug" if verbose else log_level.value, "json" if log_format is LogFormatChoice.json else "text"
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
