"""Column values in Redis (documented in docs/mirror.md, "Values").

Hash fields and key parts use the text forms below, lossless, one per type; NULL is never stored
(the field is absent). Everything that is JSON (json-mode row documents, change-log images) uses
the product's one JSON form, `service.binlog.canonical` (docs/row-format.md): `json_document`.
Hash-field text forms:

    int                  decimal digits                     -5, 18446744073709551615
    float (FLOAT/DOUBLE) shortest round-trip repr           0.1, 1e+20, inf, nan
    Decimal              its exact digits, scale kept       12.50
    str                  as is (UTF-8)
    bytes                raw bytes in hash fields (Redis is binary-safe); 0x-hex in keys
    datetime             YYYY-MM-DD HH:MM:SS[.ffffff]       (TIMESTAMP: its UTC wall time)
    date / time          YYYY-MM-DD / HH:MM:SS[.ffffff]
    timedelta (TIME)     [-]H:MM:SS[.ffffff], hours may exceed 24 (MySQL TIME range)
    set / frozenset      comma-joined, sorted
    dict / list (JSON)   compact JSON (orjson, keys sorted); the JSON literal null is `null`

The stream hands DATE, DATETIME, TIME and DECIMAL (scale <= 6) over as these texts already, and
TIMESTAMP as a UtcText (canonical text; stored here as its wall time): DecodeOptions.stored_text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, cast

import orjson

from service.binlog.canonical import naive_text
from service.binlog.jsonb import JsonNull
from service.binlog.utctext import UtcText
from service.jsonlines import row_json

__all__ = ["TEXT_FORMS", "field_value", "hash_text", "json_document", "key_text", "row_fields", "same_text"]


def _timedelta(value: dt.timedelta) -> str:
    total_us = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if total_us < 0 else ""
    total_us = abs(total_us)
    secs, us = divmod(total_us, 1_000_000)
    hours, rem = divmod(secs, 3600)
    minutes, seconds = divmod(rem, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{text}.{us:06d}" if us else text


def _datetime(value: dt.datetime) -> str:
    tz = value.tzinfo
    if tz is None or tz is dt.UTC:  # DATETIME; TIMESTAMP as decoded: its UTC wall time
        # naive_text, not isoformat(" "): that goes through a printf format, twice the cost
        return naive_text(value, " ")
    # TIMESTAMP with another zone: stored as UTC wall time, like DATETIME
    return naive_text(value.astimezone(dt.UTC), " ")


def _set(value: set[Any] | frozenset[Any]) -> str:
    return ",".join(sorted(str(v) for v in value))


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()


# One dict lookup per value on the apply path; subclasses fall back to isinstance, in this order
# (bool before int: bool is an int).
TEXT_FORMS: dict[type, Callable[[Any], str]] = {
    str: str.__str__,
    bool: lambda v: "1" if v else "0",
    int: int.__repr__,
    float: float.__repr__,  # the shortest round-trip form
    Decimal: Decimal.__str__,
    dt.datetime: _datetime,  # before date: a datetime is a date
    dt.date: dt.date.isoformat,
    dt.time: dt.time.isoformat,
    dt.timedelta: _timedelta,
    set: _set,
    frozenset: _set,
    dict: _json,
    list: _json,
    JsonNull: lambda v: "null",  # a JSON column holding the JSON literal null (SQL NULL: no field)
    UtcText: UtcText.wall_time,  # a TIMESTAMP decoded as text (DecodeOptions.stored_text)
}


def text_value(value: Any) -> str:
    """The string form of a non-NULL, non-binary value."""
    form = TEXT_FORMS.get(type(value))
    if form is not None:
        return form(value)
    for kind, form in TEXT_FORMS.items():
        if isinstance(value, kind):
            return form(value)
    return str(value)


def field_value(value: Any) -> str | bytes:
    """A hash field value (value is not None)."""
    form = TEXT_FORMS.get(type(value))
    if form is not None:
        return form(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return text_value(value)


def json_document(row: Mapping[str, Any] | None) -> bytes:
    """A row as compact canonical JSON (`service.binlog.canonical.row_to_json`): the json-mode
    document and the change-log `before`/`after`, the same form as the websocket's and `decode`'s
    lines. The same bytes as orjson.dumps(row_to_json(row)), cheaper (the apply of json-mode
    inserts was bound by it): service/jsonlines.py's `row_json`."""
    return row_json(row)


def key_text(value: Any) -> str:
    """A key part: like field_value, but binary becomes 0x-hex so keys stay printable."""
    if value is None:
        return ""  # never happens for a usable key (PK or unique NOT NULL)
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    return text_value(value)


def hash_text(v: object) -> str | bytes:
    """A non-NULL value's hash-field form (the apply's call per value): str and int first, the
    other common types through TEXT_FORMS' direct lookup."""
    t = type(v)
    if t is str:
        return cast(str, v)
    if t is int:
        return str(v)  # int.__repr__, without the lookup
    form = TEXT_FORMS.get(t)
    return form(v) if form is not None else field_value(v)


def row_fields(row: Mapping[str, Any]) -> list[str | bytes]:
    """A whole row as its hash's field-value pairs, flat; NULL columns are not stored. The one
    form of a hash row in Python: the codec's op WP, the plain form's HSET, the bulk copy's."""
    out: list[str | bytes] = []
    append = out.append
    for k, v in row.items():
        if v is not None:
            append(k)
            append(hash_text(v))
    return out


def same_text(v: object, b: object) -> bool:
    """An int, str, bytes or float equal to `b` and of its type: stored as the same text. Not `==`
    alone: 1 == 1.0 == True and 0.0 == -0.0 print differently, and equal JSON documents can
    differ in their numbers' types."""
    t = type(v)
    if t is not type(b):
        return False
    if t is int or t is str or t is bytes:
        return v == b
    return t is float and v == b and v != 0.0
