"""Global options of `binlog-mirror` (`--log-level`, `--log-format`, `-v`, `--version`), accepted
before or after the subcommand: `binlog-mirror run --log-format json` means the same as
`binlog-mirror --log-format json run`."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

__all__ = ["GlobalOptionsGroup", "hoist_global_options"]

FLAGS = frozenset({"-v", "--verbose", "--version"})
VALUED = frozenset({"--log-level", "--log-format"})


def hoist_global_options(args: list[str]) -> list[str]:
    """Move the global options (with their values) to the front; nothing after `--` moves."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg in FLAGS:
            front.append(arg)
        elif arg.split("=", 1)[0] in VALUED:
            front.append(arg)
            if "=" not in arg and i + 1 < len(args):
                i += 1
                front.append(args[i])
        else:
            rest.append(arg)
        i += 1
    return front + rest


class GlobalOptionsGroup(TyperGroup):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's vendored click
        return super().parse_args(ctx, hoist_global_options(list(args)))
