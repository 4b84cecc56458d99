"""MariaDB compression: of binlog events (log_bin_compress: QUERY_COMPRESSED and
*_ROWS_COMPRESSED) and of column values (the `COMPRESSED` column attribute).

Events (binlog_buf_compress): one header byte 0x80 | algorithm << 4 | lenlen, the
uncompressed length in `lenlen` big-endian bytes, then a zlib stream (algorithm 0).

Column values (sql/field.cc Field_longstr::compress / uncompress, sql/field_comp.cc
compress_zlib / uncompress_zlib): '' is stored as no bytes at all; otherwise a header byte whose
high nibble is the method. Method 0: the value follows as is (shorter than
column_compression_threshold, or compression did not make it shorter). Method 8, zlib: the low
3 bits are the width of the original length (1..4 bytes, big-endian, after the header), bit 0x08
says the data is raw deflate (column_compression_zlib_wrap=OFF, the default) rather than a zlib
stream with its header and Adler-32; the compressed data follows the length.
"""

from __future__ import annotations

import zlib

from service.errors import InvalidValue, TruncatedEvent

__all__ = ["MAX_UNCOMPRESSED", "mariadb_uncompress", "mariadb_uncompress_value"]

MAX_UNCOMPRESSED = 1 << 30  # the server's max_allowed_packet ceiling


def mariadb_uncompress(raw: bytes) -> bytes:
    if not raw:
        raise TruncatedEvent("empty compressed value")
    head = raw[0]
    if head & 0xE0 != 0x80:
        raise InvalidValue(f"bad compression header 0x{head:02x}")
    lenlen = head & 0x07
    if not 1 <= lenlen <= 4 or len(raw) < 1 + lenlen:
        raise InvalidValue(f"bad compressed length size {lenlen}")
    size = int.from_bytes(raw[1 : 1 + lenlen], "big")
    if size > MAX_UNCOMPRESSED:
        raise InvalidValue(f"compressed value declares {size} bytes")
    return _inflate(raw[1 + lenlen :], size, zlib.MAX_WBITS, "compressed event")


def mariadb_uncompress_value(raw: bytes, limit: int, column: str) -> bytes:
    """The stored bytes of a MariaDB COMPRESSED column value -> the value's bytes. `limit` is the
    column's capacity in bytes (the server refuses a larger original length too); `column` names
    the column in errors."""
    if not raw:
        return b""
    head = raw[0]
    method = head >> 4
    if method == 0:
        return raw[1:]
    if method != 8:
        raise InvalidValue(f"column {column}: unknown compression method {method} (header 0x{head:02x})")
    lenlen = head & 0x07
    if not 1 <= lenlen <= 4 or len(raw) < 1 + lenlen:
        raise InvalidValue(f"column {column}: bad compressed length size {lenlen} (header 0x{head:02x})")
    size = int.from_bytes(raw[1 : 1 + lenlen], "big")
    if size > limit or size > MAX_UNCOMPRESSED:
        raise InvalidValue(f"column {column}: compressed value declares {size} bytes, column holds {limit}")
    wbits = -zlib.MAX_WBITS if head & 0x08 else zlib.MAX_WBITS  # raw deflate, or a zlib stream
    return _inflate(raw[1 + lenlen :], size, wbits, f"column {column}: compressed value")


def _inflate(data: bytes, size: int, wbits: int, what: str) -> bytes:
    """`data` inflated to exactly `size` bytes (at most size + 1 are ever produced), else
    InvalidValue; `what` starts the message."""
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(data, size + 1)
    except zlib.error as exc:
        raise InvalidValue(f"{what}: corrupt zlib data: {exc}") from None
    if len(out) != size or not d.eof:
        raise InvalidValue(f"{what} inflates to {len(out)} bytes, header says {size}")
    return out
