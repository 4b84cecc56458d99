"""TRANSACTION_PAYLOAD_EVENT: header fields and a streaming reader of the inner events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from service.binlog.constants import HEADER_LEN
from service.binlog.reader import ByteReader
from service.errors import InvalidValue, TruncatedEvent, UnsupportedBinlog

__all__ = [
    "COMPRESSION_NONE",
    "COMPRESSION_ZSTD",
    "PayloadHeader",
    "iter_inner_events",
    "parse_payload_header",
]

COMPRESSION_ZSTD = 0
COMPRESSION_NONE = 255
MAX_INNER_EVENT = 1 << 30
_CHUNK = 1 << 20


class PayloadHeader:
    __slots__ = ("compression", "payload_size", "uncompressed_size", "data_start")

    def __init__(self, compression: int, payload_size: int, uncompressed_size: int, data_start: int) -> None:
        self.compression = compression
        self.payload_size = payload_size
        self.uncompressed_size = uncompressed_size
        self.data_start = data_start


def parse_payload_header(body: bytes) -> PayloadHeader:
    """Fields are (type, length, value) with net_field_length type/length/value, ended by type 0."""
    r = ByteReader(body, base=HEADER_LEN)
    compression, payload_size, uncompressed = COMPRESSION_NONE, -1, 0
    while True:
        kind = r.lenenc()
        if kind == 0:
            break
        value = ByteReader(r.take(r.lenenc()), base=HEADER_LEN)
        if kind == 1:
            payload_size = value.lenenc()
        elif kind == 2:
            compression = value.lenenc()
        elif kind == 3:
            uncompressed = value.lenenc()
    if payload_size < 0:
        payload_size = r.remaining()
    if payload_size != r.remaining():
        raise TruncatedEvent(f"payload declares {payload_size} bytes, event holds {r.remaining()}")
    if compression not in (COMPRESSION_ZSTD, COMPRESSION_NONE):
        raise UnsupportedBinlog(f"transaction payload compression type {compression}")
    return PayloadHeader(compression, payload_size, uncompressed, r.pos)


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < n:
        chunk = stream.read(min(_CHUNK, n - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def iter_inner_events(body: bytes, head: PayloadHeader) -> Iterator[bytes]:
    """Yield each inner event (header + body, no checksum) without inflating the whole payload."""
    data = body[head.data_start :]
    stream: Any
    if head.compression == COMPRESSION_ZSTD:
        import zstandard  # lazily: only binlogs with transaction compression need it

        try:
            stream = zstandard.ZstdDecompressor().stream_reader(data)
        except zstandard.ZstdError as exc:
            raise InvalidValue(f"corrupt zstd payload: {exc}") from exc
        errors: tuple[type[BaseException], ...] = (zstandard.ZstdError,)
    else:
        import io

        stream = io.BytesIO(data)
        errors = ()
    limit = head.uncompressed_size or MAX_INNER_EVENT
    total = 0
    try:
        while True:
            header = _read_exact(stream, HEADER_LEN)
            if not header:
                return
            if len(header) < HEADER_LEN:
                raise TruncatedEvent("transaction payload ends inside an event header")
            size = int.from_bytes(header[9:13], "little")
            if size < HEADER_LEN or size > MAX_INNER_EVENT or total + size > limit:
                raise InvalidValue(f"inner event of {size} bytes in a {limit}-byte payload")
            rest = _read_exact(stream, size - HEADER_LEN)
            if len(rest) != size - HEADER_LEN:
                raise TruncatedEvent("transaction payload ends inside an event")
            total += size
            yield header + rest
    except errors as exc:
        raise InvalidValue(f"corrupt zstd payload: {exc}") from exc
