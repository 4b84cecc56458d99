"""`binlog-mirror decode FILE...`: decode binlog files offline, one JSON line per row change."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from service.cli.decodefiles import decode_files, event_to_dict

if TYPE_CHECKING:
    from service.transport.columns import ColumnNames

__all__ = ["decode", "event_to_dict"]


def _schema(path: Path | None) -> ColumnNames | None:
    if path is None:
        return None
    from service.transport.columns import ColumnNames  # aiomysql: only with --schema

    try:
        return ColumnNames.from_export(orjson.loads(path.read_bytes()))
    except (OSError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
        sys.stderr.write(f"error: --schema {path}: {exc}\n")
        raise typer.Exit(1) from None


def decode(
    files: Annotated[list[Path], typer.Argument(help="Binlog files, decoded in the order given.")],
    events: Annotated[bool, typer.Option("--events", help="Print every event with its header.")] = False,
    start_position: Annotated[
        int | None,
        typer.Option(
            "--start-position",
            help="In the FIRST file, skip events starting before this offset (as mysqlbinlog).",
        ),
    ] = None,
    stop_position: Annotated[
        int | None,
        typer.Option(
            "--stop-position",
            help="In the LAST file, stop at the first event starting at/after it (as mysqlbinlog).",
        ),
    ] = None,
    tables: Annotated[
        str | None,
        typer.Option("--tables", help="Comma-separated schema.table globs, e.g. shop.orders,crm.*"),
    ] = None,
    schema_file: Annotated[
        Path | None,
        typer.Option(
            "--schema",
            help="A `binlog-mirror schema export` file: column names and character sets for "
            "binlogs written without row metadata (binlog_row_metadata=NO_LOG/MINIMAL).",
        ),
    ] = None,
) -> None:
    """Decode binlog files offline: one JSON line per row change, in file order.

    Like mysqlbinlog, --start-position applies to the first file and --stop-position to the
    last one; the files in between are decoded whole. Events before the start are still
    decoded (silently), so a start inside a transaction knows its table maps.

    A binlog without row metadata does not say which columns are binary or in which charset
    text is: pass --schema, else such text is printed as a string when its bytes are valid UTF-8
    and as base64 of its bytes otherwise (docs/decoder.md)."""
    schema = _schema(schema_file)
    patterns = [p.strip() for p in (tables or "").split(",") if p.strip()]
    code = decode_files(files, events, start_position, stop_position, patterns, schema)
    if code:
        raise typer.Exit(code)
