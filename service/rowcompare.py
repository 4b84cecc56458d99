"""One source row against what the mirror stores for it: the comparison of `binlog-mirror verify`,
single-process (service/verify.py) and on Spark (service/batch/verify.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import orjson

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.sink.keys import split_key
from service.sink.values import field_value, json_document

__all__ = ["at_span", "compare_row", "expected_value", "key_delete", "key_values", "utc_row"]


def expected_value(row: Mapping[str, Any], json_mode: bool) -> Any:
    """What the mirror stores for a source row: the hash's fields as HGETALL returns them, or the
    JSON document parsed."""
    if json_mode:
        return orjson.loads(json_document(row))
    out: dict[bytes, bytes] = {}
    for k, v in row.items():
        if v is not None:
            fv = field_value(v)
            out[k.encode()] = fv if isinstance(fv, bytes) else fv.encode()
    return out


def compare_row(
    row: Mapping[str, Any] | None, stored: Any, indexed: bool, json_mode: bool
) -> tuple[str, tuple[str, ...]] | None:
    """A source row (None: absent) against its stored value (HGETALL / GET reply) and whether
    its key is in `__keys`: None when equal, else (differs | missing | extra, differing fields).
    Shared with the distributed verify (service/batch/verify.py)."""
    present = bool(stored)
    if row is None:
        return ("extra", ()) if present or indexed else None
    if not present:
        return "missing", ()
    expected = expected_value(row, json_mode)
    if json_mode:
        try:
            got = orjson.loads(stored)
        except orjson.JSONDecodeError:
            return "differs", ("<document>",)
        if not isinstance(got, dict):
            return "differs", ("<document>",)
        expected_fields: Mapping[Any, Any] = expected
        got_fields: Mapping[Any, Any] = got
    else:
        expected_fields, got_fields = expected, stored
    names = sorted(
        _s(k) for k in set(expected_fields) | set(got_fields) if expected_fields.get(k) != got_fields.get(k)
    )
    if names:
        return "differs", tuple(names)
    if not indexed:
        return "differs", ("<not in __keys>",)
    return None


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def at_span(change: RowChange, span: EventSpan) -> RowChange:
    return RowChange(change.op, change.schema, change.table, change.before, change.after, span, change.ts, 0)


def key_delete(
    schema: str, table: str, key: tuple[str, ...], suffix: str, span: EventSpan, ts: int
) -> RowChange:
    """A DELETE whose before image holds just the key, as text: the sink keys it to `suffix`
    again (key_text of a str is the str; the escaping is undone by split_key)."""
    parts = split_key(suffix)
    before: dict[str, Any] = dict(zip(key, parts, strict=False))
    return RowChange(Op.DELETE, schema, table, before, None, span, ts, 0)


def key_values(suffix: str, binary: Sequence[bool]) -> tuple[Any, ...] | None:
    """The source key of a row suffix, for a SELECT; None when no source row can have it."""
    parts = split_key(suffix)
    if len(parts) != len(binary):
        return None
    out: list[Any] = []
    for part, is_binary in zip(parts, binary, strict=True):
        if is_binary:
            if not part.startswith("0x"):
                return None
            try:
                out.append(bytes.fromhex(part[2:]))
            except ValueError:
                return None
        else:
            out.append(part)
    return tuple(out)


def utc_row(row: dict[str, Any], columns: Collection[str]) -> dict[str, Any]:
    """TIMESTAMP values as the binlog decodes them (aware UTC), as a resync stores them: a SELECT
    in a session at time_zone +00:00 returns them naive. A copy; `row` itself when `columns` is
    empty."""
    if not columns:
        return row
    out = dict(row)
    for c in columns:
        v = out.get(c)
        if isinstance(v, dt.datetime) and v.tzinfo is None:
            out[c] = v.replace(tzinfo=dt.UTC)
    return out
