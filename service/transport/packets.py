"""MySQL protocol packets out of a byte stream read in chunks of any size (no I/O here).

    packet  = length:3 (little-endian)  sequence_id:1  payload
    payload of 0xffffff bytes = "continued in the next packet"; the last part is shorter (maybe empty)

Reading the dump socket in large chunks and splitting them here costs one await per chunk
instead of two per packet (aiomysql's `_read_packet`). Bytes stay where they arrived until a
packet is complete, so an event of many megabytes arriving in thousands of chunks is joined once.
"""

from __future__ import annotations

from service.errors import SourceError

__all__ = ["MAX_PAYLOAD", "PacketSplitter"]

MAX_PAYLOAD = 0xFFFFFF
HEADER = 4


class PacketSplitter:
    """Feed chunks in stream order; get each complete payload (continuations joined) once.

    `next_seq` is the sequence id the next packet must carry: after a command sent with id 0,
    the server's replies start at 1 and wrap at 256. A mismatch means the stream is corrupt
    (or the server is answering something else): `SourceError`, the caller reconnects."""

    def __init__(self, next_seq: int = 1) -> None:
        self.next_seq = next_seq
        self._chunks: list[bytes] = []  # bytes received but not yet split
        self._buffered = 0
        self._needed = HEADER  # bytes it takes to complete the next packet
        self._parts: list[bytes] = []  # payload parts of a packet continued over 0xffffff

    @property
    def buffered(self) -> int:
        """Bytes received that are not part of a returned payload yet."""
        return self._buffered + sum(map(len, self._parts))

    def feed(self, chunk: bytes) -> list[bytes]:
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered < self._needed:
            return []
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        out: list[bytes] = []
        end = len(data)
        at = 0
        seq = self.next_seq
        needed = HEADER
        while end - at >= HEADER:
            length = data[at] | data[at + 1] << 8 | data[at + 2] << 16
            needed = HEADER + length
            if end - at < needed:
                break
            if data[at + 3] != seq:
                raise SourceError(
                    f"packet sequence id {data[at + 3]}, expected {seq}: the binlog stream is out of step"
                )
            seq = (seq + 1) & 0xFF
            payload = data[at + HEADER : at + needed]
            at += needed
            needed = HEADER
            if length == MAX_PAYLOAD:
                self._parts.append(payload)
            elif self._parts:
                self._parts.append(payload)
                out.append(b"".join(self._parts))
                self._parts = []
            else:
                out.append(payload)
        self.next_seq = seq
        rest = data[at:] if at else data
        self._chunks = [rest] if rest else []
        self._buffered = len(rest)
        self._needed = needed
        return out
