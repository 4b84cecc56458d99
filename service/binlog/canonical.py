"""Lossless JSON-able form of a RowChange (documented in docs/row-format.md).

int -> number            Decimal -> "string"         float -> number
str -> string            bytes -> base64 string      BIT -> number
date -> "YYYY-MM-DD"     datetime (naive) -> "YYYY-MM-DD HH:MM:SS[.ffffff]"
TIMESTAMP (aware) -> "YYYY-MM-DDTHH:MM:SS[.ffffff]Z"
timedelta (TIME) -> "[-]HH:MM:SS[.ffffff]"         zero/partial dates: their text
ENUM/SET -> names ("a,b" for SET) when known, else index / bitmask number
JSON -> embedded JSON, except: JSON_NULL -> {"json": null} (SQL NULL stays null) and a
        document that is a one-key object {"json": ...} or {"json_diffs": ...} -> {"json": doc}
GEOMETRY -> {"srid", "wkb"}                         VECTOR -> [float, ...]
PARTIAL JSON -> {"json_diffs": [{"op", "path", "value"?}]}
"""

from __future__ import annotations

import base64
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from service.binlog.jsonb import JsonNull, JsonOpaque, JsonPartial
from service.binlog.rowchange import Row, RowChange
from service.binlog.values import Geometry

__all__ = ["naive_text", "row_change_to_dict", "row_to_json", "value_to_json"]

# A whole JSON column value that is one of these one-key objects is wrapped as {"json": doc},
# so that {"json": null} (the JSON literal null) and {"json_diffs": [...]} (a partial update)
# never collide with a document (docs/row-format.md, "JSON null and SQL NULL").
_RESERVED_KEYS = frozenset({"json", "json_diffs"})


def _frac(us: int) -> str:
    return f".{us:06d}" if us else ""


_2D = tuple(f"{i:02d}" for i in range(100))  # "00".."99": cheaper than a format spec per field


def naive_text(v: datetime, sep: str) -> str:
    """`YYYY-MM-DD{sep}HH:MM:SS[.ffffff]` of v's own fields, its tzinfo ignored. For an aware
    value this is the cheap way: isoformat() formats the UTC offset too, then it must be cut,
    which costs more than the rest (a naive value's isoformat(" ") is cheaper still)."""
    t, y = _2D, v.year
    text = (
        f"{y if y >= 1000 else f'{y:04d}'}-{t[v.month]}-{t[v.day]}{sep}"
        f"{t[v.hour]}:{t[v.minute]}:{t[v.second]}"
    )
    us = v.microsecond
    return f"{text}.{us:06d}" if us else text


def _datetime(v: datetime) -> str:
    if v.tzinfo is None:
        return v.isoformat(" ")
    off = v.utcoffset()
    if off:
        v = v - off
    return naive_text(v, "T") + "Z"


def _time(v: timedelta) -> str:
    us = v.days * 86_400_000_000 + v.seconds * 1_000_000 + v.microseconds
    sign = "-" if us < 0 else ""
    us = abs(us)
    secs, frac = divmod(us, 1_000_000)
    return f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}{_frac(frac)}"


def _json_doc(v: Any) -> Any:
    """Values inside a JSON document: opaque scalars get MySQL's JSON text forms."""
    if isinstance(v, dict):
        return {k: _json_doc(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_doc(x) for x in v]
    if isinstance(v, Decimal):
        f = float(v)
        return f if Decimal(repr(f)) == v else format(v, "f")
    if isinstance(v, JsonOpaque):
        return f"base64:type{v.type_code}:{base64.b64encode(v.data).decode()}"
    if isinstance(v, (datetime, date, timedelta)):
        return value_to_json(v)
    if isinstance(v, JsonNull):  # a partial-update diff value: a document, never SQL NULL
        return None
    return v


def value_to_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Decimal):
        return format(value, "f")  # never exponent notation ("0E-30")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime):
        return _datetime(value)
    if isinstance(value, date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, timedelta):
        return _time(value)
    if isinstance(value, dict):
        doc = _json_doc(value)
        return {"json": doc} if len(value) == 1 and next(iter(value)) in _RESERVED_KEYS else doc
    if isinstance(value, list):
        return _json_doc(value)
    if isinstance(value, JsonNull):
        return {"json": None}  # the JSON literal null: distinct from SQL NULL (null)
    if isinstance(value, tuple):  # VECTOR
        return list(value)
    if isinstance(value, Geometry):
        return {"srid": value.srid, "wkb": base64.b64encode(value.wkb).decode("ascii")}
    if isinstance(value, JsonPartial):
        diffs: list[dict[str, Any]] = []
        for d in value.diffs:
            item: dict[str, Any] = {"op": d.op.name.lower(), "path": d.path}
            if d.op.name != "REMOVE":
                item["value"] = _json_doc(d.value)  # JSON_NULL -> null: no SQL NULL here
            diffs.append(item)
        return {"json_diffs": diffs}
    if isinstance(value, JsonOpaque):
        return _json_doc(value)
    raise TypeError(f"no canonical JSON form for {type(value).__name__}")


def row_to_json(row: Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {k: value_to_json(v) for k, v in row.items()}


def row_change_to_dict(change: RowChange) -> dict[str, Any]:
    p = change.position
    return {
        "op": change.op.value,
        "schema": change.schema,
        "table": change.table,
        "before": row_to_json(change.before),
        "after": row_to_json(change.after),
        "position": {"file": p.file, "start": p.start, "end": p.end},
        "ts": change.ts,
        "server_id": change.server_id,
        "gtid": change.gtid,
    }
