"""`binlog-mirror stream`: committed row changes as JSON lines, `tail -f` for a database."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from service.cli.common import console
from service.cli.runtime import tune_gc
from service.errors import ConfigError, ReplicatorError

if TYPE_CHECKING:
    from service.checkpoint import BinlogPosition
    from service.transport.source import BinlogSource

__all__ = ["stream"]

POLL_SECONDS = 0.2


def stream(
    mysql: Annotated[
        str | None, typer.Option("--mysql", help="mysql://user:password@host:port (env BINLOG_MIRROR_MYSQL).")
    ] = None,
    start: Annotated[
        str | None,
        typer.Option("--from", help="now | start | FILE:POS | GTID set (uuid:1-5 or 0-1-100). Default: now."),
    ] = None,
    tables: Annotated[
        str | None,
        typer.Option("--tables", help="Comma-separated schema.table globs, e.g. shop.orders,crm.*"),
    ] = None,
    until_caught_up: Annotated[
        bool, typer.Option("--until-caught-up", help="Exit once the source's position at start is reached.")
    ] = False,
    server_id: Annotated[int | None, typer.Option("--server-id", help="Replica server id (unique).")] = None,
    heartbeat: Annotated[float | None, typer.Option("--heartbeat", help="Heartbeat period, seconds.")] = None,
) -> None:
    """Print committed row changes as JSON lines, one per change, in commit order."""
    from service.checkpoint import parse_start
    from service.settings import load_settings
    from service.transport.source import BinlogSource

    try:
        settings = load_settings(
            mysql=mysql, start=start, tables=tables, server_id=server_id, heartbeat_seconds=heartbeat
        )
        if settings.mysql is None:
            raise ConfigError(
                "no MySQL URL: pass --mysql mysql://user:password@host:port or set BINLOG_MIRROR_MYSQL"
            )
        start_point = parse_start(settings.start)
    except (ConfigError, ValueError) as exc:
        console().print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    try:
        asyncio.run(_stream(BinlogSource(settings, start_point), until_caught_up))
    except ReplicatorError as exc:
        console().print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


async def _stream(source: BinlogSource, until_caught_up: bool) -> None:
    from service.binlog.canonical import row_change_to_dict

    out = sys.stdout.buffer
    async with source:
        tune_gc()
        target: BinlogPosition | None = None
        if until_caught_up:
            target = (await source.source_position()).position
        iterator = aiter(source)
        while True:
            if target is not None and source.caught_up(target):
                return
            try:
                async with asyncio.timeout(POLL_SECONDS if target else None):  # not wait_for: 3.11
                    txn = await anext(iterator)
            except TimeoutError:
                continue
            except StopAsyncIteration:
                return
            for change in txn.changes:
                out.write(orjson.dumps(row_change_to_dict(change)) + b"\n")
            out.flush()
