"""`binlog-mirror schema export`: the column definitions `decode --schema` needs for a binlog
written without row metadata (binlog_row_metadata=NO_LOG or MINIMAL)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from service.cli.common import console
from service.errors import ConfigError, ReplicatorError

if TYPE_CHECKING:
    from service.settings import Settings

__all__ = ["schema_app"]


schema_app = typer.Typer(no_args_is_help=True, help="Column definitions for offline decoding.")


@schema_app.command("export")
def export(
    mysql: Annotated[
        str | None, typer.Option("--mysql", help="mysql://user:password@host:port (env BINLOG_MIRROR_MYSQL).")
    ] = None,
    tables: Annotated[
        str | None,
        typer.Option("--tables", help="Comma-separated schema.table globs (default: every table)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the schema file here (default: stdout).")
    ] = None,
) -> None:
    """Write each table's column names, types and character sets from information_schema as a
    schema file for `binlog-mirror decode --schema FILE`."""
    from service.settings import load_settings

    try:
        settings = load_settings(mysql=mysql, tables=tables)
        if settings.mysql is None:
            raise ConfigError(
                "no MySQL URL: pass --mysql mysql://user:password@host:port or set BINLOG_MIRROR_MYSQL"
            )
        doc = asyncio.run(_export(settings))
    except (ConfigError, ReplicatorError) as exc:
        console().print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
    if out is None:
        sys.stdout.buffer.write(data)
    else:
        out.write_bytes(data)
        console().print(f"{len(doc['tables'])} tables written to {out}", highlight=False)


async def _export(settings: Settings) -> dict[str, Any]:
    from service.transactions import TableFilter
    from service.transport.columns import ColumnNames
    from service.transport.connection import close_connection, connect

    names = ColumnNames(
        TableFilter.from_lists(settings.tables, settings.exclude_tables), refuse_undecodable=False
    )
    conn = await connect(settings)
    try:
        await names.refresh(conn)
    finally:
        await close_connection(conn)
    return names.export()
