"""The `binlog-mirror` command line: thin wrappers that build settings and call the service.

The CLI is the composition root: the only package that imports both `api` and `service`
(import-linter contracts in pyproject.toml). One module per command group; `common` holds what
they share, so no command module imports this one.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from service.cli import batch, decode, run, schema, stack, stream, verify

__all__ = ["app"]

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Keep a Redis mirror of MySQL tables in sync."
)
app.add_typer(stack.stack_app, name="stack")
app.command("stream")(stream.stream)
app.command("decode")(decode.decode)
app.command("run")(run.run)
app.command("snapshot")(batch.snapshot)
app.command("replay")(batch.replay)
app.command("verify")(verify.verify)
app.add_typer(schema.schema_app, name="schema")


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
