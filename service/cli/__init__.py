"""The `binlog-mirror` command line: thin wrappers that build settings and call the service.
The CLI is the composition root: the only package that imports both `api` and `service`
(import-linter contracts in pyproject.toml). One module per command group; `common` holds what
they share, so no command module imports this one.

This package itself is light. `main`, the console script, runs a plain `binlog-mirror decode
FILE...` (no option, no log setting in the environment) with service/cli/decodefiles.py alone:
no typer, click or other command's modules, which were a twentieth of decoding a 300 MB binlog
as a whole process (issue 42). Anything else (an option, --help, another command) goes to the
typer app (service/cli/typerapp.py), imported only then; `service.cli.app` is that app, imported on
first use.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from service.cli.plain import plain_decode, run_plain_decode

if TYPE_CHECKING:
    from service.cli.typerapp import app

__all__ = ["app", "main", "plain_decode", "run_plain_decode"]


def main() -> Any:
    """The `binlog-mirror` console script and `python -m service`."""
    files = plain_decode(sys.argv[1:])
    if files is not None:
        return run_plain_decode(files)
    from service.cli.typerapp import app

    return app(prog_name="binlog-mirror")


def __getattr__(name: str) -> Any:
    if name == "app":  # the typer app, imported on first use
        from service.cli.typerapp import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
