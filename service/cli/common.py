"""What every command module of the CLI shares: the stderr console, `fail`, `split_globs`."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["console", "fail", "split_globs"]


@cache
def console() -> Console:
    """The stderr console: one line, never wrapped at 80 columns. Made on first use, so a command
    that prints nothing through it (decode) does not import rich."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """One clear line on stderr, then exit non-zero. The message is text, not markup: settings'
    names such as `[document.orders]` or `[table]` are printed as they are."""
    from rich.markup import escape

    console().print(f"[red]error:[/red] {escape(message)}", highlight=False, markup=True)
    return typer.Exit(code)


def split_globs(values: list[str] | None) -> list[str] | None:
    """Repeated flags and comma-separated lists alike; None when not given (env/file apply)."""
    return [p.strip() for v in values or [] for p in v.split(",") if p.strip()] or None
