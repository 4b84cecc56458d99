"""The loop of `binlog-mirror decode`: binlog files in, one JSON line per row change out.

Without typer or click: a plain `binlog-mirror decode FILE...` runs it straight from the light
entry point (service/cli/__init__.py `main`), so decoding a file does not first import every
command's modules (start-up is part of decode's time: issue 42). service/cli/decode.py is the
command around it.
"""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import os
import sys
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from service.binlog import (
    BinlogDecoder,
    DecodeOptions,
    Event,
    RowsEvent,
    TableMapEvent,
    TableSchema,
    scan_binlog_file,
)
from service.binlog.canonical import row_change_to_dict, value_to_json
from service.cli.runtime import tune_gc
from service.errors import DecodeError
from service.jsonlines import has_documents, row_change_lines

if TYPE_CHECKING:
    from service.transport.columns import ColumnNames

__all__ = ["decode_files", "event_to_dict"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.name if not isinstance(value, str) else value.value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    try:
        return value_to_json(value)
    except TypeError:
        return repr(value)


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-able summary of any event: its header plus its own fields."""
    h = event.header
    out: dict[str, Any] = {
        "event": h.type_name,
        "header": {
            "timestamp": h.timestamp,
            "type_code": h.type_code,
            "server_id": h.server_id,
            "event_size": h.event_size,
            "log_pos": h.log_pos,
            "flags": h.flags,
            "offset": h.offset,
        },
    }
    for f in dataclasses.fields(event):
        if f.name in ("header", "events"):
            continue
        value = getattr(event, f.name)
        if f.name == "changes":
            out["changes"] = [row_change_to_dict(c) for c in value]
        elif f.name == "table" and isinstance(event, (RowsEvent, TableMapEvent)):
            out["table"] = _jsonable(value)
        else:
            out[f.name] = _jsonable(value)
    return out


def _wanted(patterns: list[str], schema: str, table: str) -> bool:
    name = f"{schema}.{table}"
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _decoder(
    path: Path, start: int | None, patterns: list[str], schema: ColumnNames | None = None
) -> BinlogDecoder:
    def skip_rows(table: TableSchema) -> bool:
        # Rows before the start or of tables not asked for are not decoded at all: only their
        # TABLE_MAPs matter, and a row the decoder cannot read there must not stop the others.
        before = start is not None and decoder.next_offset <= start
        return before or not _wanted(patterns, table.schema, table.table)

    # DECIMAL and temporal values straight to their canonical text: the JSON is the same, and
    # building Decimal/datetime objects only to format them again was most of decode's time.
    if schema is None:
        options = DecodeOptions(skip_rows=skip_rows, text_values=True)
    else:
        options = DecodeOptions(
            skip_rows=skip_rows,
            text_values=True,
            column_names=schema,
            column_charsets=schema.charsets,
            column_members=schema.members,
        )
    decoder = BinlogDecoder(options, file=path.name)
    return decoder


def _events(path: Path, decoder: BinlogDecoder) -> Iterator[Event]:
    for offset, data in scan_binlog_file(path):
        yield from decoder.decode_events(data, offset)


def decode_files(
    files: list[Path],
    events: bool = False,
    start_position: int | None = None,
    stop_position: int | None = None,
    patterns: list[str] | None = None,
    schema: ColumnNames | None = None,
) -> int:
    """Decode the files to stdout (see service/cli/decode.py `decode`); the exit status."""
    patterns = patterns or []
    out = sys.stdout.buffer
    tune_gc()  # as `stream`: a rows event's changes would be re-walked by every young collection
    last = len(files) - 1
    try:
        for index, path in enumerate(files):
            start = start_position if index == 0 else None
            stop = stop_position if index == last else None

            decoder = _decoder(path, start, patterns, schema)
            for event in _events(path, decoder):
                offset = event.header.offset
                if stop is not None and offset >= stop:
                    break
                if start is not None and offset < start:
                    continue
                if events:
                    if not isinstance(event, RowsEvent) or _wanted(
                        patterns, event.table.schema, event.table.table
                    ):
                        out.write(orjson.dumps(event_to_dict(event)) + b"\n")
                elif isinstance(event, RowsEvent):
                    if _wanted(patterns, event.table.schema, event.table.table):
                        out.write(row_change_lines(event.changes, has_documents(event.table)))
        out.flush()
    except BrokenPipeError:  # `| head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (DecodeError, OSError) as exc:
        out.flush()
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0
