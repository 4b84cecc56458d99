"""Helpers for comparing the decoder with `mariadb-binlog -vv --base64-output=decode-rows`.

`mariadb_rows(path)` parses the `###` lines into (op, schema, table, before, after) with
"@N" keys and raw byte values; `render(column, value)` turns one of our decoded values
into the exact bytes mariadb-binlog prints for it. mariadb-binlog prints a MariaDB `COMPRESSED`
column's stored bytes (header and zlib data): `mariadb_rows` uncompresses them here, with this
file's own reading of the format (`uncompress_stored`), and gives what it would print for the
value itself; `compressed_stored_values(path)` gives the stored bytes.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import zlib
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from service.binlog import Column, ColumnType, Geometry
from service.binlog.charsets import codec_for_collation

VECTORS = Path(__file__).resolve().parents[2] / "fixtures" / "binlog" / "vectors"  # real MySQL binlogs
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "binlog"
MARIADB_BINLOG = "/usr/bin/mariadb-binlog"

Image = dict[str, bytes]
_STMT = re.compile(rb"^### (INSERT INTO|UPDATE|DELETE FROM) `(.*)`\.`(.*)`$")
_VALUE = re.compile(rb"^###   @(\d+)=(.*) /\* ([^*]*) meta=\d+ nullable=\d is_null=\d \*/$")
_ESCAPED = re.compile(rb"\\x([01][0-9a-f])")  # my_b_write_quoted: bytes < 0x20 as \xNN, others raw


def mariadb_binlog_vv(path: Path) -> bytes:
    """`mariadb-binlog -vv --base64-output=decode-rows` of `path` (LOAD DATA files it writes go
    to a temp dir, not /tmp)."""
    with tempfile.TemporaryDirectory() as load_dir:
        args = ["--no-defaults", "-vv", "--base64-output=decode-rows", f"--local-load={load_dir}"]
        return subprocess.run([MARIADB_BINLOG, *args, str(path)], check=True, capture_output=True).stdout


def mariadb_rows(path: Path) -> list[tuple[str, str, str, Image | None, Image | None]]:
    out = mariadb_binlog_vv(path)
    rows: list[tuple[str, str, str, Image | None, Image | None]] = []
    current: list[Any] | None = None
    image: Image | None = None
    for line in out.split(b"\n"):
        if not line.startswith(b"###"):
            continue
        m = _STMT.match(line)
        if m:
            if current is not None:
                rows.append(tuple(current))  # type: ignore[arg-type]
            op = {b"INSERT INTO": "insert", b"UPDATE": "update", b"DELETE FROM": "delete"}[m.group(1)]
            current = [op, m.group(2).decode(), m.group(3).decode(), None, None]
            continue
        if line in (b"### WHERE", b"### SET"):
            assert current is not None
            image = {}
            current[3 if line == b"### WHERE" else 4] = image
            continue
        v = _VALUE.match(line)
        assert v is not None, line
        assert image is not None
        value = v.group(2).rstrip(b" ")
        if v.group(3).endswith(b" COMPRESSED") and value != b"NULL":
            value = _quote(uncompress_stored(_unquote(value)))
        image[f"@{int(v.group(1))}"] = value
    if current is not None:
        rows.append(tuple(current))  # type: ignore[arg-type]
    return rows


def _quote(raw: bytes) -> bytes:
    return b"'" + b"".join(b"\\x%02x" % c if c < 0x20 else bytes([c]) for c in raw) + b"'"


def _unquote(printed: bytes) -> bytes:
    assert printed[:1] == b"'" and printed[-1:] == b"'", printed
    return _ESCAPED.sub(lambda m: bytes([int(m.group(1), 16)]), printed[1:-1])


def uncompress_stored(stored: bytes) -> bytes:
    """A MariaDB COMPRESSED column's stored bytes -> the value (sql/field.cc
    Field_longstr::uncompress, sql/field_comp.cc uncompress_zlib): no bytes for ''; a header byte,
    method in the high nibble: 0 = the value follows as is; 8 = zlib: the low 3 bits give the
    width of the big-endian original length that follows, bit 0x08 = raw deflate (no zlib wrapper)."""
    if not stored:
        return b""
    head = stored[0]
    if head >> 4 == 0:
        return stored[1:]
    assert head >> 4 == 8, f"header 0x{head:02x}"
    width = head & 0x07
    value = zlib.decompress(stored[1 + width :], -15 if head & 0x08 else 15)
    assert len(value) == int.from_bytes(stored[1 : 1 + width], "big")
    return value


def compressed_stored_values(path: Path) -> list[bytes]:
    """The stored bytes of every non-NULL COMPRESSED column value mariadb-binlog prints for `path`."""
    out: list[bytes] = []
    for line in mariadb_binlog_vv(path).split(b"\n"):
        v = _VALUE.match(line)
        if v is not None and v.group(3).endswith(b" COMPRESSED") and v.group(2) != b"NULL":
            out.append(_unquote(v.group(2)))
    return out


def _bits(value: int, width: int) -> bytes:
    return b"b'" + format(value, f"0{width}b").encode() + b"'"


_INT_BITS = {
    ColumnType.TINY: 8,
    ColumnType.SHORT: 16,
    ColumnType.INT24: 24,
    ColumnType.LONG: 32,
    ColumnType.LONGLONG: 64,
}


def _fraction(us: int, fsp: int) -> str:
    return f".{us:06d}"[: fsp + 1] if fsp else ""


def render(col: Column, value: Any) -> bytes:  # noqa: C901 - one branch per type
    t = col.type
    if value is None:
        return b"NULL"
    if t in _INT_BITS:
        bits = _INT_BITS[t]
        u = value % (1 << bits)
        s = u - (1 << bits) if u >> (bits - 1) else u
        return f"{s} ({u})".encode() if s < 0 else str(s).encode()
    if t == ColumnType.FLOAT:
        return f"{value:g}".encode()
    if t == ColumnType.DOUBLE:
        return f"{value:.20g}".encode()
    if t == ColumnType.NEWDECIMAL:
        assert isinstance(value, Decimal)
        return format(value, "f").encode()
    if t == ColumnType.YEAR:
        return str(value or 1900).encode()
    if t in (ColumnType.DATE, ColumnType.NEWDATE):
        text = value.isoformat() if isinstance(value, date) else value
        return b"'" + text.replace("-", ":").encode() + b"'"
    if t in (ColumnType.TIME2, ColumnType.TIME):  # TIME: the pre-5.6.4 format, meta 0
        assert isinstance(value, timedelta)
        us = value // timedelta(microseconds=1)
        sign, us = ("-" if us < 0 else ""), abs(us)
        secs, frac = divmod(us, 1_000_000)
        text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}{_fraction(frac, col.meta)}"
        return f"'{text}'".encode()
    if t in (ColumnType.DATETIME2, ColumnType.DATETIME):
        if isinstance(value, datetime):
            text = value.strftime("%Y-%m-%d %H:%M:%S") + _fraction(value.microsecond, col.meta)
        else:
            text = value if "." in value or not col.meta else value + _fraction(0, col.meta)
        return f"'{text}'".encode()
    if t in (ColumnType.TIMESTAMP2, ColumnType.TIMESTAMP):
        if isinstance(value, str):
            return b"0" + _fraction(0, col.meta).encode()
        return f"{int(value.timestamp())}{_fraction(value.microsecond, col.meta)}".encode()
    if t == ColumnType.ENUM:
        if isinstance(value, int):
            return str(value).encode()
        return str(0 if value == "" else list(col.enum_values or ()).index(value) + 1).encode()
    if t == ColumnType.SET:
        if isinstance(value, str):
            names = list(col.set_values or ())
            value = sum(1 << names.index(n) for n in value.split(",") if n)
        raw = value.to_bytes(col.max_length, "little")
        return b"b'" + b"".join(format(c, "08b").encode() for c in raw) + b"'"
    if t == ColumnType.BIT:
        return _bits(value, (col.meta >> 8) * 8 + (col.meta & 0xFF))
    if t == ColumnType.GEOMETRY:
        assert isinstance(value, Geometry)
        return _quote(value.srid.to_bytes(4, "little") + value.wkb)
    if isinstance(value, bytes):
        if t == ColumnType.STRING:
            value = value.rstrip(b"\x00")
        return _quote(value)
    if isinstance(value, str):
        codec = codec_for_collation(col.charset) or "utf-8"
        if codec == "latin1":
            return _quote(value.encode("cp1252", errors="surrogateescape"))
        return _quote(value.encode(codec))
    raise AssertionError(f"cannot render {type(value).__name__} for {t.name}")
