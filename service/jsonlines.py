"""The JSON lines of row changes, written straight from the decoded values: the same bytes as
orjson.dumps(row_change_to_dict(change)) + newline, the canonical form (docs/row-format.md), at a
fraction of the cost (`binlog-mirror decode`; tests/unit/binlog/test_decode_lines.py). Pure, and
compiled with the decoder (service/devtools/build_decoder.py).

orjson writes the native values (int, str, float, None) itself and calls the compiled
`value_to_json` only for the rest (Decimal, bytes, dates, ...): datetimes and dataclasses
(Geometry, JsonPartial, ...) too, whose native forms differ from the canonical ones
(PASSTHROUGH). A JSON column's dict or list is the exception: its canonical form wraps reserved
keys and formats nested values its own way, so a row holding one goes through `row_to_json`.
The keys around the two rows are shared by all the changes of one rows event: they are encoded
once per event.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from service.binlog.canonical import row_change_to_dict, row_to_json, value_to_json
from service.binlog.rowchange import Row, RowChange

__all__ = ["row_change_lines"]

_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _row_json(row: Row | None) -> bytes:
    if row is None:
        return b"null"
    for v in row.values():
        t = type(v)
        if t is dict or t is list:
            return orjson.dumps(row_to_json(row))
    return orjson.dumps(row, default=value_to_json, option=_PASSTHROUGH)


def _frame(c: RowChange) -> tuple[bytes, bytes, bytes]:
    """row_change_to_dict(c)'s encoding around its two rows: up to `"before":`, from there to
    `"after":`, and after that row (with the newline). Cut at those keys, which no encoded string
    can hold unescaped."""
    shape = RowChange(c.op, c.schema, c.table, {}, {}, c.position, c.ts, c.server_id, c.gtid)
    line = orjson.dumps(row_change_to_dict(shape))
    head, before, rest = line.partition(b'"before":{}')
    mid, after, tail = rest.partition(b'"after":{}')
    if not (before and after):
        raise AssertionError(f"row_change_to_dict changed its keys: {line!r}")
    return head + b'"before":', mid + b'"after":', tail + b"\n"


def row_change_lines(changes: Sequence[RowChange]) -> bytes:
    """The JSON lines (each ending in a newline) of these row changes, in order."""
    parts: list[bytes] = []
    last: RowChange | None = None
    head = mid = tail = b""
    for c in changes:
        # The frame is encoded once per rows event, whose changes share these very objects; any
        # other change (equal or not) gets its own.
        if (
            last is None
            or c.position is not last.position
            or c.op is not last.op
            or c.schema is not last.schema
            or c.table is not last.table
            or c.ts is not last.ts
            or c.server_id is not last.server_id
            or c.gtid is not last.gtid
        ):
            head, mid, tail = _frame(c)
            last = c
        parts.append(head)
        parts.append(_row_json(c.before))
        parts.append(mid)
        parts.append(_row_json(c.after))
        parts.append(tail)
    return b"".join(parts)
