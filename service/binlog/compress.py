"""MariaDB binlog compression (log_bin_compress): QUERY_COMPRESSED and *_ROWS_COMPRESSED.

Layout (binlog_buf_compress): one header byte 0x80 | algorithm << 4 | lenlen, the
uncompressed length in `lenlen` big-endian bytes, then a zlib stream (algorithm 0).
"""

from __future__ import annotations

import zlib

from service.errors import InvalidValue, TruncatedEvent

__all__ = ["MAX_UNCOMPRESSED", "mariadb_uncompress"]

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
    d = zlib.decompressobj()
    try:
        out = d.decompress(raw[1 + lenlen :], size + 1)
    except zlib.error as exc:
        raise InvalidValue(f"corrupt zlib stream: {exc}") from exc
    if len(out) != size or not d.eof:
        raise InvalidValue(f"compressed value inflates to {len(out)} bytes, header says {size}")
    return out
