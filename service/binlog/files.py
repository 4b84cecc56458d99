"""Read raw events from a binlog file on disk (the only I/O in service.binlog)."""

from __future__ import annotations

import os
from collections.abc import Iterator

from service.binlog.constants import BINLOG_MAGIC, HEADER_LEN
from service.errors import DecodeError, TruncatedEvent

__all__ = ["RawEvent", "read_binlog_file"]

MAX_EVENT_SIZE = 1 << 30  # max_allowed_packet ceiling


class RawEvent(bytes):
    """One whole event's bytes, plus `offset`: where it starts in its file.

    A bytes subclass, so it can be passed straight to BinlogDecoder.feed(), which
    picks the offset up."""

    offset: int
    file: str

    def __new__(cls, data: bytes, offset: int, file: str = "") -> RawEvent:
        obj = super().__new__(cls, data)
        obj.offset = offset
        obj.file = file
        return obj


def read_binlog_file(
    path: str | os.PathLike[str], start: int = 4, stop: int | None = None
) -> Iterator[RawEvent]:
    """Yield each event of the file in order, framed by the header's event_size.

    `start` must be an event boundary (4 = first event); events starting at or after
    `stop` are not read. A bad magic or a truncated/oversized event raises a DecodeError
    naming the file and offset."""
    name = os.fspath(path)
    with open(name, "rb") as fh:
        if fh.read(4) != BINLOG_MAGIC:
            raise DecodeError(f"{name} at offset 0: not a binlog file (bad magic)")
        if start < 4:
            raise DecodeError(f"{name}: start position {start} < 4")
        fh.seek(start)
        offset = start
        while stop is None or offset < stop:
            header = fh.read(HEADER_LEN)
            if not header:
                return
            if len(header) < HEADER_LEN:
                raise TruncatedEvent(f"{name} at offset {offset}: file ends inside an event header")
            size = int.from_bytes(header[9:13], "little")
            if size < HEADER_LEN or size > MAX_EVENT_SIZE:
                raise TruncatedEvent(f"{name} at offset {offset}: impossible event size {size}")
            rest = fh.read(size - HEADER_LEN)
            if len(rest) != size - HEADER_LEN:
                raise TruncatedEvent(f"{name} at offset {offset}: file ends inside an event of {size} bytes")
            yield RawEvent(header + rest, offset, name)
            offset += size
