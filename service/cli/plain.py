"""A plain `binlog-mirror decode FILE...`: recognised and run without typer (service/cli/__init__.py
`main`, and the typer app's own shortcut in service/cli/typerapp.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["plain_decode", "run_plain_decode"]


def plain_decode(argv: list[str]) -> list[Path] | None:
    """The files of `decode FILE...` when that is all the command line says, else None."""
    if len(argv) < 2 or argv[0] != "decode" or any(a.startswith("-") for a in argv[1:]):
        return None
    if any(os.environ.get(f"BINLOG_MIRROR_LOG_{name}") for name in ("LEVEL", "FORMAT")):
        return None
    return [Path(a) for a in argv[1:]]


def run_plain_decode(files: list[Path]) -> None:
    """`decode` with its defaults, as typer would run it: the global options' defaults (the
    app's `main`), then the standalone mode's exits (the command's code, 130 on Ctrl-C)."""
    from service.cli.decodefiles import decode_files
    from service.logsetup import configure

    configure("info", "text")
    try:
        code = decode_files(files)
    except KeyboardInterrupt:
        sys.exit(130)
    if code:
        sys.exit(code)
