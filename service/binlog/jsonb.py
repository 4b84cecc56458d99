"""MySQL binary JSON (sql-common/json_binary.cc) and partial-update JSON diffs (json_diff.cc).

Documents decode to dict / list / str / int / float / bool / None. Opaque scalars become
Decimal, date, datetime, timedelta (DECIMAL/DATE/DATETIME/TIMESTAMP/TIME) or `JsonOpaque`.
A column holding the JSON literal null decodes to `JSON_NULL`, so it stays distinct from
SQL NULL (None).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from service.binlog.decimal import decode_decimal
from service.binlog.reader import ByteReader
from service.binlog.temporal import date_from_packed, datetime_from_packed, time_from_packed
from service.errors import InvalidValue, TruncatedEvent

__all__ = [
    "JSON_NULL",
    "JsonDiff",
    "JsonDiffOp",
    "JsonNull",
    "JsonOpaque",
    "JsonPartial",
    "decode_json",
    "decode_json_diffs",
]

MAX_DEPTH = 150  # JSON_DOCUMENT_MAX_DEPTH is 100; a little slack, but never unbounded


class JsonNull:
    """The JSON literal null as a whole column value (distinct from SQL NULL)."""

    _instance: JsonNull | None = None
    __slots__ = ()

    def __new__(cls) -> JsonNull:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "JSON_NULL"


JSON_NULL: Final = JsonNull()


@dataclass(frozen=True, slots=True)
class JsonOpaque:
    """An opaque JSON scalar of a MySQL type we keep as bytes (BLOB, GEOMETRY, BIT...)."""

    type_code: int
    data: bytes


class JsonDiffOp(IntEnum):
    REPLACE = 0
    INSERT = 1
    REMOVE = 2


@dataclass(frozen=True, slots=True)
class JsonDiff:
    op: JsonDiffOp
    path: str
    value: Any = None  # absent (None) for REMOVE


@dataclass(frozen=True, slots=True)
class JsonPartial:
    """A PARTIAL_UPDATE_ROWS after-image JSON value: diffs against the before-image."""

    diffs: tuple[JsonDiff, ...]


_SMALL_OBJ, _LARGE_OBJ, _SMALL_ARR, _LARGE_ARR = 0, 1, 2, 3
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING = 4, 5, 6, 7, 8, 9, 10, 11, 12
_OPAQUE = 15
_D = struct.Struct("<d")


def decode_json(raw: bytes) -> Any:
    if not raw:
        return JSON_NULL  # empty value: what a NOT NULL JSON column holds when given nothing
    value = _value(raw, raw[0], 1, len(raw), 0)
    return JSON_NULL if value is None else value


def _uint(buf: bytes, pos: int, n: int, end: int) -> int:
    if pos + n > end or pos < 0:
        raise TruncatedEvent(f"JSON value cut short at {pos}")
    return int.from_bytes(buf[pos : pos + n], "little")


def _varlen(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = 0
    for i in range(5):
        if pos >= end:
            raise TruncatedEvent("JSON string length cut short")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos
    raise InvalidValue("JSON variable-length integer longer than 5 bytes")


def _value(buf: bytes, type_: int, start: int, end: int, depth: int) -> Any:
    """Decode the value of type `type_` whose data starts at `start` (within [.., end))."""
    if type_ in (_SMALL_OBJ, _LARGE_OBJ, _SMALL_ARR, _LARGE_ARR):
        if depth > MAX_DEPTH:
            raise InvalidValue("JSON document nested too deeply")
        return _container(buf, type_, start, end, depth + 1)
    if type_ == _LITERAL:
        lit = _uint(buf, start, 1, end)
        if lit == 0:
            return None
        if lit == 1:
            return True
        if lit == 2:
            return False
        raise InvalidValue(f"JSON literal {lit}")
    if type_ == _INT16:
        v = _uint(buf, start, 2, end)
        return v - 0x10000 if v & 0x8000 else v
    if type_ == _UINT16:
        return _uint(buf, start, 2, end)
    if type_ == _INT32:
        v = _uint(buf, start, 4, end)
        return v - (1 << 32) if v & 0x80000000 else v
    if type_ == _UINT32:
        return _uint(buf, start, 4, end)
    if type_ == _INT64:
        v = _uint(buf, start, 8, end)
        return v - (1 << 64) if v >> 63 else v
    if type_ == _UINT64:
        return _uint(buf, start, 8, end)
    if type_ == _DOUBLE:
        _uint(buf, start, 8, end)
        return _D.unpack_from(buf, start)[0]
    if type_ == _STRING:
        n, p = _varlen(buf, start, end)
        if p + n > end:
            raise TruncatedEvent("JSON string cut short")
        return buf[p : p + n].decode("utf-8", "replace")
    if type_ == _OPAQUE:
        field_type = _uint(buf, start, 1, end)
        n, p = _varlen(buf, start + 1, end)
        if p + n > end:
            raise TruncatedEvent("JSON opaque value cut short")
        return _opaque(field_type, buf[p : p + n])
    raise InvalidValue(f"JSON value type 0x{type_:02x}")


def _opaque(field_type: int, data: bytes) -> Any:
    if field_type == 246:  # NEWDECIMAL: precision, scale, binary decimal
        if len(data) < 2:
            raise TruncatedEvent("JSON DECIMAL opaque value cut short")
        return decode_decimal(data[2:], data[0], data[1])
    if field_type in (10, 12, 7, 11) and len(data) == 8:
        packed = int.from_bytes(data, "little", signed=True)
        if field_type == 10:
            return date_from_packed(packed)
        if field_type == 11:
            return time_from_packed(packed)
        return datetime_from_packed(packed)  # DATETIME and TIMESTAMP
    return JsonOpaque(field_type, data)


def _container(buf: bytes, type_: int, start: int, end: int, depth: int) -> Any:
    large = type_ in (_LARGE_OBJ, _LARGE_ARR)
    w = 4 if large else 2
    count = _uint(buf, start, w, end)
    size = _uint(buf, start + w, w, end)
    if size > end - start:
        raise TruncatedEvent(f"JSON container of {size} bytes exceeds its {end - start}-byte value")
    cend = start + size
    is_obj = type_ in (_SMALL_OBJ, _LARGE_OBJ)
    header = 2 * w + count * ((w + 2) if is_obj else 0) + count * (1 + w)
    if header > size:
        raise TruncatedEvent(f"JSON container header of {header} bytes exceeds its size {size}")
    pos = start + 2 * w
    keys: list[str] = []
    if is_obj:
        for _ in range(count):
            koff = _uint(buf, pos, w, cend)
            klen = _uint(buf, pos + w, 2, cend)
            if start + koff + klen > cend:
                raise TruncatedEvent("JSON key outside its object")
            keys.append(buf[start + koff : start + koff + klen].decode("utf-8", "replace"))
            pos += w + 2
    values: list[Any] = []
    for _ in range(count):
        vtype = buf[pos]
        if vtype in (_LITERAL, _INT16, _UINT16) or (large and vtype in (_INT32, _UINT32)):
            values.append(_value(buf, vtype, pos + 1, cend, depth))
        else:
            off = _uint(buf, pos + 1, w, cend)
            if off >= size:
                raise TruncatedEvent("JSON value offset outside its container")
            values.append(_value(buf, vtype, start + off, cend, depth))
        pos += 1 + w
    if is_obj:
        return dict(zip(keys, values, strict=True))
    return values


def decode_json_diffs(raw: bytes) -> JsonPartial:
    """Json_diff_vector::read_binary: op(1) path(lenenc-str) [value(lenenc-str, binary JSON)]."""
    r = ByteReader(raw)
    diffs: list[JsonDiff] = []
    while not r.at_end():
        op_code = r.u8()
        if op_code > 2:
            raise InvalidValue(f"JSON diff operation {op_code}")
        path = r.lenenc_bytes().decode("utf-8", "replace")
        op = JsonDiffOp(op_code)
        if op == JsonDiffOp.REMOVE:
            diffs.append(JsonDiff(op, path))
            continue
        diffs.append(JsonDiff(op, path, decode_json(r.lenenc_bytes())))
    return JsonPartial(tuple(diffs))
