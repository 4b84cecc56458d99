"""Read raw events from a binlog file on disk (the only I/O in service.binlog).

Compiled by the optional mypyc build: this loop runs once per event of a file."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import BinaryIO

from service.binlog.constants import BINLOG_MAGIC, HEADER_LEN
from service.binlog.rawevent import RawEvent
from service.errors import DecodeError, TruncatedEvent

__all__ = ["RawEvent", "read_binlog_file", "scan_binlog_file"]  # RawEvent: from rawevent.py

MAX_EVENT_SIZE = 1 << 30  # max_allowed_packet ceiling
_CHUNK = 1 << 20  # read the file in 1 MiB pieces: one read() per event costs ~0.5 µs
_SIZE = struct.Struct("<I")  # event_size, at byte 9 of the header


def read_binlog_file(
    path: str | os.PathLike[str], start: int = 4, stop: int | None = None
) -> Iterator[RawEvent]:
    """Each event of the file in order as a RawEvent (bytes that know their offset and file);
    see scan_binlog_file."""
    name = os.fspath(path)
    for offset, data in scan_binlog_file(name, start, stop):
        yield RawEvent(data, offset, name)


def scan_binlog_file(
    path: str | os.PathLike[str], start: int = 4, stop: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, event bytes) for each event of the file in order, framed by the header's
    event_size; feed them with `BinlogDecoder.feed(data, offset)`. The fastest way through a
    file: a RawEvent costs more to build than an XID event costs to decode.

    `start` must be an event boundary (4 = first event); events starting at or after
    `stop` are not read. A bad magic or a truncated/oversized event raises a DecodeError
    naming the file and offset."""
    name = os.fspath(path)
    unpack_size = _SIZE.unpack_from
    with open(name, "rb") as fh:
        if fh.read(4) != BINLOG_MAGIC:
            raise DecodeError(f"{name} at offset 0: not a binlog file (bad magic)")
        if start < 4:
            raise DecodeError(f"{name}: start position {start} < 4")
        fh.seek(start)
        offset = start
        buf = b""
        pos = 0  # where `offset` sits in buf
        while stop is None or offset < stop:
            if len(buf) - pos < HEADER_LEN:
                buf, pos = _refill(fh, buf, pos, HEADER_LEN)
                if pos == len(buf):
                    return
                if len(buf) < HEADER_LEN:
                    raise TruncatedEvent(f"{name} at offset {offset}: file ends inside an event header")
            (size,) = unpack_size(buf, pos + 9)
            if size < HEADER_LEN or size > MAX_EVENT_SIZE:
                raise TruncatedEvent(f"{name} at offset {offset}: impossible event size {size}")
            if len(buf) - pos < size:
                buf, pos = _refill(fh, buf, pos, size)
                if len(buf) < size:
                    raise TruncatedEvent(
                        f"{name} at offset {offset}: file ends inside an event of {size} bytes"
                    )
            yield offset, buf[pos : pos + size]
            pos += size
            offset += size


def _refill(fh: BinaryIO, buf: bytes, pos: int, need: int) -> tuple[bytes, int]:
    """Keep buf[pos:], append at least enough to hold `need` bytes (short at end of file)."""
    rest = buf[pos:]
    want = need - len(rest)
    if want > _CHUNK:
        # read(n) allocates n bytes before it reads: never ask for more than the file holds,
        # or a corrupt event_size in a small file would allocate up to MAX_EVENT_SIZE.
        want = min(want, os.fstat(fh.fileno()).st_size - fh.tell())
    more = fh.read(max(_CHUNK, want))
    buf = rest + more if rest else more
    return buf, 0
