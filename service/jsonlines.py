"""The JSON lines of row changes, written straight from the decoded values: the same bytes as
orjson.dumps(row_change_to_dict(change)) + newline, the canonical form (docs/row-format.md), at a
fraction of the cost (`binlog-mirror decode`; tests/unit/binlog/test_decode_lines.py). Pure, and
compiled with the decoder (service/devtools/build_decoder.py).

Each row is handed to orjson as it is when all its values are native JSON types (int, str, float,
None), else as a copy whose other values have their canonical form (`value_to_json`): no dict
per value, and none per row for the common all-native rows. Datetimes, the costly ones, are
formatted by orjson and used as JSON fragments when that is the canonical text (checked on the
bytes; otherwise `value_to_json`). The keys around the two rows are shared by all the changes of
one rows event: they are encoded once per event.

Rows of tables without a JSON column (`documents=False`, has_documents) skip even that look at
each value: orjson takes them as they are and calls back (`default`) only for the values it
would not print in canonical form. `decode` also decodes DECIMAL and temporal columns to their
canonical text (DecodeOptions.text_values), so most rows need no call back at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson

from service.binlog.canonical import row_change_to_dict, value_to_json
from service.binlog.constants import ColumnType
from service.binlog.rowchange import RowChange
from service.binlog.schema import TableSchema
from service.binlog.utctext import UtcText

__all__ = ["has_documents", "row_change_lines", "row_json"]


def _datetime(v: datetime) -> Any:
    """The canonical text of a datetime (canonical.py: naive "YYYY-MM-DD HH:MM:SS[.ffffff]", aware
    in UTC with a Z) as an orjson fragment: orjson's own format differs only in the naive `T`."""
    if v.tzinfo is None:
        b = orjson.dumps(v)
        if len(b) > 12 and b[11] == 84:  # "YYYY-MM-DDT...": a 4-digit year; T becomes a space
            return orjson.Fragment(b[:11] + b" " + b[12:])
    elif not v.utcoffset():
        b = orjson.dumps(v, option=orjson.OPT_UTC_Z)
        if b.endswith(b'Z"'):
            return orjson.Fragment(b)
    return value_to_json(v)


def row_json(row: Mapping[str, Any] | None) -> bytes:
    """A row as compact canonical JSON: the same bytes as orjson.dumps(row_to_json(row)), the
    form of decode's lines, the json-mode document and the change log's images."""
    if row is None:
        return b"null"
    out: dict[str, Any] | None = None
    for k, v in row.items():
        t = type(v)
        if t is int or t is str or t is float or t is UtcText or v is None:
            continue
        if out is None:
            out = dict(row)
        if t is datetime:
            out[k] = _datetime(v)
        elif t is Decimal:
            out[k] = format(v, "f")  # value_to_json's form, without its type tests
        else:
            out[k] = value_to_json(v)
    return orjson.dumps(row if out is None else out)


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


def has_documents(table: TableSchema) -> bool:
    """Whether a table's rows can hold JSON documents (dicts, lists: only JSON columns decode to
    them): row_change_lines' `documents`."""
    return any(c.type == ColumnType.JSON for c in table.columns)


def _default(v: Any) -> Any:
    """orjson's `default` for the values it does not print in canonical form (_ROW_OPTIONS)."""
    return _datetime(v) if type(v) is datetime else value_to_json(v)


# Datetimes, dates and dataclasses (Geometry) and subclasses of str and int go to _default
# like Decimal, bytes and timedelta (which orjson cannot print), not to orjson's own forms.
_ROW_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def row_change_lines(changes: Sequence[RowChange], documents: bool = True) -> bytes:
    """The JSON lines (each ending in a newline) of these row changes, in order.

    documents=False says that no value is a JSON document (a dict or list: the changes are of
    tables without a JSON column). Rows then go to orjson as they are, which hands the values it
    would not print in canonical form to _default: no loop over the values here."""
    parts: list[bytes] = []
    append = parts.append
    # Bound once: a compiled module's globals and orjson's attribute are dict lookups per use
    dumps = orjson.dumps
    default: Any = _default
    option: Any = _ROW_OPTIONS  # Any: kept boxed, not converted to a native int and back
    last: RowChange | None = None
    head = mid = tail = null_mid = null_tail = b""
    for c in changes:
        # The frame is encoded once per rows event, whose changes share these very objects (the
        # ints compare by value: a compiled RowChange holds them unboxed); any other change,
        # equal or not, gets its own.
        if (
            last is None
            or c.position is not last.position
            or c.op is not last.op
            or c.schema is not last.schema
            or c.table is not last.table
            or c.gtid is not last.gtid
            or c.ts != last.ts
            or c.server_id != last.server_id
        ):
            head, mid, tail = _frame(c)
            null_mid, null_tail = head + b"null" + mid, b"null" + tail
            last = c
        before, after = c.before, c.after
        if before is None:  # an insert
            append(null_mid)
        else:
            append(head)
            append(row_json(before) if documents else dumps(before, default=default, option=option))
            append(mid)
        if after is None:  # a delete
            append(null_tail)
        else:
            append(row_json(after) if documents else dumps(after, default=default, option=option))
            append(tail)
    return b"".join(parts)
