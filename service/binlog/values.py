"""Per-column value decoders, built once per TABLE_MAP column (see rows.py for the plan).

A column is either *fixed* (a struct code plus an optional converter, so runs of fixed
columns unpack with one struct call) or *variable* (a reader `(buf, pos) -> (value, pos)`).
Readers slice without bounds checks; rows.py verifies each row ends inside the event and
maps IndexError/struct.error to TruncatedEvent.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.binlog.charsets import codec_for_collation, decode_latin1
from service.binlog.compress import mariadb_uncompress_value
from service.binlog.constants import ColumnType as T
from service.binlog.decimal import decimal_size, make_decimal_converter, make_decimal_text_converter
from service.binlog.inplace import InPlaceConverter, IntConvert
from service.binlog.jsonb import decode_json, decode_json_diffs
from service.binlog.schema import Column
from service.binlog.stats import DecoderStats
from service.binlog.temporal import (
    FRAC_BYTES,
    decode_date,
    decode_datetime_old,
    decode_time2,
    decode_time_old,
    decode_timestamp_old,
    decode_year,
    make_datetime2_converter,
    make_timestamp2_converter,
)
from service.binlog.temporaltext import (
    make_date_text_converter,
    make_datetime2_text_converter,
    make_time2_text_converter,
    make_timestamp2_text_converter,
)
from service.errors import InvalidValue, UnknownColumnType

__all__ = [
    "EnumMembers",
    "FixedSpec",
    "Geometry",
    "Reader",
    "VarSpec",
    "column_spec",
    "float32_value",
    "text_decoder",
]

Reader = Callable[[bytes, int], tuple[Any, int]]
_F = struct.Struct("<f")


@dataclass(frozen=True, slots=True)
class Geometry:
    srid: int
    wkb: bytes


@dataclass(frozen=True, slots=True)
class FixedSpec:
    code: str  # struct code without byte order, e.g. "i" or "5s"
    size: int
    convert: Callable[[Any], Any] | None = None
    # the same converter when it can also read the value inside a row image: convert(buf, pos)
    in_place: InPlaceConverter[Any] | None = None


@dataclass(frozen=True, slots=True)
class VarSpec:
    read: Reader  # generic reader
    prefix: int = 0  # length-prefix bytes (1..4) of a length-prefixed value
    convert: Callable[[bytes], Any] | None = None  # raw bytes -> value; None keeps the bytes
    codec: str | None = None  # text codec for inline decoding; `convert` handles invalid bytes
    immutable: bool = True  # values may be shared (an UPDATE's unchanged value); not JSON's


def _var(
    nbytes: int, convert: Callable[[bytes], Any], codec: str | None = None, immutable: bool = True
) -> VarSpec:
    keep = convert is bytes
    return VarSpec(_prefixed(nbytes, convert), nbytes, None if keep else convert, codec, immutable)


def text_codec(collation: int | None) -> str | None:
    """The codec the fast path may use inline (strict decode, falling back to text_decoder)."""
    codec = codec_for_collation(collation)
    if codec is None:
        return "utf-8"
    return None if codec in ("binary", "latin1") else codec


def float32_value(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (what MySQL prints)."""
    if x != x or x in (float("inf"), float("-inf")):
        return x
    for digits in range(6, 10):
        candidate = float(f"{x:.{digits}g}")
        if _F.unpack(_F.pack(candidate))[0] == x:
            return candidate
    return x


def text_decoder(collation: int | None, stats: DecoderStats) -> Callable[[bytes], Any]:
    """bytes -> str for the collation; bytes for the binary collation.

    The decoder never guesses: a value it cannot read as text comes out as the raw bytes
    (lossless; docs/decoder.md, "Text without a known charset"), never with U+FFFD.
    Unknown or absent collation (binlog_row_metadata=NO_LOG, no schema supplied): a str when the
    bytes are valid UTF-8, else the bytes. Bytes invalid in a known charset: the bytes, counted
    in `invalid_text_values`. The layer above supplies the charset (DecodeOptions.column_charsets)
    so that a mirror never sees the unknown case.
    """
    codec = codec_for_collation(collation)
    if codec == "binary":
        return bytes
    if codec == "latin1":
        return decode_latin1
    name = codec or "utf-8"
    known = codec is not None

    def decode(raw: bytes) -> str | bytes:
        try:
            return raw.decode(name)
        except UnicodeDecodeError:
            if known:
                stats.invalid_text_values += 1
            return bytes(raw)

    return decode


def _prefixed(nbytes: int, convert: Callable[[bytes], Any]) -> Reader:
    if nbytes == 1:

        def read1(buf: bytes, pos: int) -> tuple[Any, int]:
            end = pos + 1 + buf[pos]
            return convert(buf[pos + 1 : end]), end

        return read1
    if nbytes == 2:

        def read2(buf: bytes, pos: int) -> tuple[Any, int]:
            end = pos + 2 + (buf[pos] | buf[pos + 1] << 8)
            return convert(buf[pos + 2 : end]), end

        return read2
    if nbytes in (3, 4):

        def readn(buf: bytes, pos: int) -> tuple[Any, int]:
            start = pos + nbytes
            if start > len(buf):
                raise IndexError
            end = start + int.from_bytes(buf[pos:start], "little")
            return convert(buf[start:end]), end

        return readn
    raise InvalidValue(f"length prefix of {nbytes} bytes")


def _enum(values: tuple[str, ...] | None) -> Callable[[int], Any]:
    if values is None:
        return lambda i: i
    return EnumMembers(values)


class EnumMembers(IntConvert):
    """An ENUM's index -> its member's name ("" for 0, the index itself when out of range)."""

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values
        self.count = len(values)

    def apply(self, value: int) -> Any:
        if 1 <= value <= self.count:
            return self.values[value - 1]
        return "" if value == 0 else value


def _set(values: tuple[str, ...] | None) -> Callable[[bytes], Any]:
    if values is None:
        return lambda raw: int.from_bytes(raw, "little")
    limit = 1 << len(values)

    def conv(raw: bytes) -> Any:
        mask = int.from_bytes(raw, "little")
        if mask >= limit:
            return mask
        return ",".join(v for i, v in enumerate(values) if mask >> i & 1)

    return conv


def _geometry(raw: bytes) -> Geometry:
    if len(raw) < 4:
        raise InvalidValue("GEOMETRY value shorter than its SRID")
    return Geometry(int.from_bytes(raw[:4], "little"), raw[4:])


def _vector(raw: bytes) -> tuple[float, ...]:
    if len(raw) % 4:
        raise InvalidValue(f"VECTOR value of {len(raw)} bytes")
    return tuple(float32_value(x) for x in struct.unpack(f"<{len(raw) // 4}f", raw))


def _binary_padder(length: int) -> Callable[[bytes], bytes]:
    def pad(raw: bytes) -> bytes:
        return raw + b"\x00" * (length - len(raw)) if len(raw) < length else raw

    return pad


def _uncompressing(col: Column, limit: int, stats: DecoderStats) -> Callable[[bytes], Any]:
    """A MariaDB COMPRESSED column's converter: the stored bytes are uncompressed
    (compress.mariadb_uncompress_value), then decoded as the uncompressed type's are."""
    decode = text_decoder(col.charset, stats)
    name = col.name
    if decode is bytes:

        def binary(raw: bytes) -> Any:
            return mariadb_uncompress_value(raw, limit, name)

        return binary

    def text(raw: bytes) -> Any:
        return decode(mariadb_uncompress_value(raw, limit, name))

    return text


def column_spec(
    col: Column,
    stats: DecoderStats,
    partial_json: bool = False,
    text: bool = False,
    stored_text: bool = False,
) -> FixedSpec | VarSpec:
    """`text`: DECIMAL, DATE and the fractional-second temporal types (DATETIME2, TIMESTAMP2,
    TIME2) as their canonical text (decimal.py, temporaltext.py) instead of Decimal, date,
    datetime and timedelta (DecodeOptions.text_values). `stored_text`: the same for the values
    whose Redis text is that text too, TIMESTAMP2 as a UtcText (utctext.py), but not a DECIMAL of
    scale > 6 (DecodeOptions.stored_text)."""
    t, meta, u = col.type, col.meta, col.unsigned
    if t == T.TINY:
        return FixedSpec("B" if u else "b", 1)
    if t == T.SHORT:
        return FixedSpec("H" if u else "h", 2)
    if t == T.INT24:
        return FixedSpec("3s", 3, lambda raw: int.from_bytes(raw, "little", signed=not u))
    if t == T.LONG:
        return FixedSpec("I" if u else "i", 4)
    if t == T.LONGLONG:
        return FixedSpec("Q" if u else "q", 8)
    if t == T.FLOAT:
        return FixedSpec("f", 4, float32_value)
    if t == T.DOUBLE:
        return FixedSpec("d", 8)
    if t == T.YEAR:
        return FixedSpec("B", 1, decode_year)
    if t in (T.DATE, T.NEWDATE):
        if text or stored_text:
            date_text = make_date_text_converter()
            return FixedSpec("3s", 3, date_text, date_text)
        return FixedSpec("3s", 3, decode_date)
    if t == T.TIME:
        return FixedSpec("3s", 3, decode_time_old)
    if t == T.DATETIME:
        return FixedSpec("Q", 8, decode_datetime_old)
    if t == T.TIMESTAMP:
        return FixedSpec("I", 4, decode_timestamp_old)
    if t in (T.TIMESTAMP2, T.DATETIME2, T.TIME2):
        fsp = meta
        if fsp > 6:
            raise InvalidValue(f"fractional-second precision {fsp} > 6 in {col.name}")
        if t == T.TIMESTAMP2:
            n = 4 + FRAC_BYTES[fsp]
            if text or stored_text:
                ts_text = make_timestamp2_text_converter(fsp, tagged=not text)
                return FixedSpec(f"{n}s", n, ts_text, ts_text)
            ts = make_timestamp2_converter(fsp)
            return FixedSpec(f"{n}s", n, ts, ts)
        if t == T.DATETIME2:
            n = 5 + FRAC_BYTES[fsp]
            dt = make_datetime2_text_converter(fsp) if text or stored_text else make_datetime2_converter(fsp)
            return FixedSpec(f"{n}s", n, dt, dt)
        n = 3 + FRAC_BYTES[fsp]
        if text or stored_text:
            time_text = make_time2_text_converter(fsp)
            return FixedSpec(f"{n}s", n, time_text, time_text)
        return FixedSpec(f"{n}s", n, lambda raw: decode_time2(raw, fsp))
    if t == T.NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        n = decimal_size(precision, scale)
        if text or (stored_text and scale <= 6):  # no exponent in str(Decimal) up to scale 6
            dec_text = make_decimal_text_converter(precision, scale)
            return FixedSpec(f"{n}s", n, dec_text, dec_text)
        dec = make_decimal_converter(precision, scale)
        return FixedSpec(f"{n}s", n, dec, dec)
    if t == T.BIT:
        n = (meta >> 8) + (1 if meta & 0xFF else 0)
        if n == 0:
            raise InvalidValue(f"BIT column {col.name} of width 0")
        return FixedSpec(f"{n}s", n, lambda raw: int.from_bytes(raw, "big"))
    if t == T.ENUM:
        if col.max_length == 1:
            return FixedSpec("B", 1, _enum(col.enum_values))
        if col.max_length == 2:
            return FixedSpec("H", 2, _enum(col.enum_values))
        raise InvalidValue(f"ENUM column {col.name} with pack length {col.max_length}")
    if t == T.SET:
        n = col.max_length
        if not 1 <= n <= 8:
            raise InvalidValue(f"SET column {col.name} with pack length {n}")
        return FixedSpec(f"{n}s", n, _set(col.set_values))
    if t == T.NULL:
        return FixedSpec("0s", 0, lambda raw: None)
    if t in (T.VARCHAR, T.VAR_STRING):
        return _var(1 if meta < 256 else 2, text_decoder(col.charset, stats), text_codec(col.charset))
    if t == T.STRING:
        decode = text_decoder(col.charset, stats)
        n = 1 if col.max_length < 256 else 2
        if decode is bytes:  # BINARY(n): the binlog drops trailing zero bytes; restore them
            return _var(n, _binary_padder(col.max_length) if col.max_length else bytes)
        return _var(n, decode, text_codec(col.charset))
    if t in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB):
        return _var(meta, text_decoder(col.charset, stats), text_codec(col.charset))
    if t == T.VARCHAR_COMPRESSED:  # meta: the byte capacity, header byte included
        return _var(1 if meta < 256 else 2, _uncompressing(col, meta, stats))
    if t == T.BLOB_COMPRESSED:  # meta: the length prefix's size
        if not 1 <= meta <= 4:
            raise InvalidValue(f"COMPRESSED BLOB column {col.name} with pack length {meta}")
        return _var(meta, _uncompressing(col, (1 << 8 * meta) - 1, stats))
    if t == T.JSON:
        return _var(meta, decode_json_diffs if partial_json else decode_json, immutable=False)
    if t == T.GEOMETRY:
        return _var(meta, _geometry)
    if t == T.VECTOR:
        return _var(meta, _vector)
    if t == T.DECIMAL:
        raise UnknownColumnType(
            f"column {col.name}: pre-5.0 DECIMAL carries no length in TABLE_MAP and cannot be decoded"
        )
    raise UnknownColumnType(f"column {col.name}: column type {int(t)} cannot be decoded")
