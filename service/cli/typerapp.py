"""The typer app of `binlog-mirror`: every command group, the global options. Imported by the
package's `main` for anything but a plain `decode FILE...`, and through `service.cli.app` (the
package's lazy attribute) by whoever needs the app itself (the tests)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from service.cli import batch, ctl, decode, run, schema, stack, stream, verify
from service.cli.options import GlobalOptionsGroup
from service.cli.plain import plain_decode, run_plain_decode
from service.logsetup import configure

__all__ = ["app"]


class _App(typer.Typer):
    """The app, with one shortcut: a plain `binlog-mirror decode FILE...` (no option, no log
    setting in the environment) runs the command without click's parsing. Building the parameters
    imports typer's pydantic adapters: about 0.1-0.2 s, a twentieth of decoding a 300 MB binlog,
    paid by every offline decode (issue 42: decode timed as whole processes). Anything else (an
    option, --help, another command) goes through typer as before."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args and set(kwargs) <= {"prog_name"}:  # the console script, python -m service
            files = plain_decode(sys.argv[1:])
            if files is not None:
                return run_plain_decode(files)
        return super().__call__(*args, **kwargs)


app = _App(
    cls=GlobalOptionsGroup,  # global options work before or after the subcommand
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # a bug prints a plain traceback, not an 80-column box
    rich_markup_mode=None,  # usage errors as click's one "Error: ..." line, not a wrapped box
    help="Keep a Redis mirror of MySQL tables in sync.",
)
app.add_typer(stack.stack_app, name="stack")
app.add_typer(ctl.ctl_app, name="ctl")
app.add_typer(schema.schema_app, name="schema")
app.command("stream")(stream.stream)
app.command("decode")(decode.decode)
app.command("run")(run.run)
app.command("demo")(run.demo)
app.command("snapshot")(batch.snapshot)
app.command("replay")(batch.replay)
app.command("compact")(batch.compact)
app.command("load")(batch.load)
app.command("verify")(verify.verify)


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
