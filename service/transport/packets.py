"""The dump connection's receive buffer: socket bytes in, binlog events out (no I/O here).

    packet  = length:3 (little-endian)  sequence_id:1  payload
    payload of 0xffffff bytes = "continued in the next packet"; the last part is shorter (maybe empty)
    dump payload = 0x00 (OK) event bytes | 0xfe EOF (a non-blocking dump's end) | 0xff ERR

The socket is read straight into one reusable buffer (`get_buffer` / `buffer_updated`, the
shape of asyncio.BufferedProtocol), and each event is copied out of it once, without its OK
byte. Reading into fresh megabyte-sized bytes objects instead cost a page fault per 4 KiB and
four copies of every byte (docs/BENCHMARKS.md). An event of many megabytes is received in place:
the buffer grows to the size its packet header announces, then shrinks back.
"""

from __future__ import annotations

from service.errors import SourceError

__all__ = ["BUFFER_SIZE", "MAX_PAYLOAD", "DumpBuffer"]

MAX_PAYLOAD = 0xFFFFFF
HEADER = 4
BUFFER_SIZE = 256 * 1024  # fits a core's L2 cache with room to spare for the decoder
MIN_READ = 64 * 1024  # compact (or grow) when less than this is free at the end
OK, EOF, ERR = 0x00, 0xFE, 0xFF


class DumpBuffer:
    """Receive into `get_buffer()`, report with `buffer_updated(n)`: returns the events completed.

    `next_seq` is the sequence id the next packet must carry: after a command sent with id 0,
    the server's replies start at 1 and wrap at 256. A mismatch means the stream is corrupt (or
    the server is answering something else): `SourceError`, the caller reconnects. After an EOF
    (`ended`) or an ERR (`error`, its payload) nothing more is parsed."""

    def __init__(self, next_seq: int = 1) -> None:
        self.next_seq = next_seq
        self.ended = False
        self.error: bytes | None = None
        self._buf = bytearray(BUFFER_SIZE)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet returned
        self._end = 0  # end of the bytes received
        self._parts: list[bytes] = []  # payload parts of a packet continued over 0xffffff

    @property
    def buffered(self) -> int:
        """Bytes received that are not part of a returned event yet."""
        return self._end - self._start + sum(map(len, self._parts))

    def get_buffer(self) -> memoryview:
        """Free space at the end of the buffer, at least MIN_READ bytes (or what the packet in
        progress still needs, when less)."""
        start, end = self._start, self._end
        if start == end and len(self._buf) > BUFFER_SIZE:
            self._compact(0)  # a large packet is through: back to the default size
        elif start == end:
            self._start = self._end = 0
        elif len(self._buf) - end < MIN_READ:
            self._compact(self._packet_size(start, end) + MIN_READ)
        return self._view[self._end :]

    def _packet_size(self, start: int, end: int) -> int:
        """Wire size of the packet that starts at `start` (HEADER until its header is in)."""
        if end - start < HEADER:
            return HEADER
        buf = self._buf
        return HEADER + (buf[start] | buf[start + 1] << 8 | buf[start + 2] << 16)

    def _compact(self, room: int) -> None:
        """Move the pending bytes to the front of a buffer of at least `room` bytes: the default
        one, or one sized for a packet that is larger."""
        pending = bytes(self._view[self._start : self._end])
        size = max(room, BUFFER_SIZE)
        if size != len(self._buf):  # (the transport may still hold a view of the old one)
            self._buf = bytearray(size)
            self._view = memoryview(self._buf)
        self._buf[: len(pending)] = pending
        self._start, self._end = 0, len(pending)

    def buffer_updated(self, nbytes: int) -> list[bytes]:
        self._end += nbytes
        buf, view = self._buf, self._view
        end = self._end
        at = self._start
        seq = self.next_seq
        out: list[bytes] = []
        while end - at >= HEADER and not self.ended and self.error is None:
            length = buf[at] | buf[at + 1] << 8 | buf[at + 2] << 16
            needed = HEADER + length
            if end - at < needed:
                break
            if buf[at + 3] != seq:
                raise SourceError(
                    f"packet sequence id {buf[at + 3]}, expected {seq}: the binlog stream is out of step"
                )
            seq = (seq + 1) & 0xFF
            body = at + HEADER
            at += needed
            if length == MAX_PAYLOAD or self._parts:
                self._parts.append(bytes(view[body:at]))
                if length == MAX_PAYLOAD:
                    continue
                payload = b"".join(self._parts)
                self._parts = []
                self._payload(payload, out)
            elif length and buf[body] == OK:
                out.append(bytes(view[body + 1 : at]))
            else:
                self._payload(bytes(view[body:at]), out)
        self.next_seq = seq
        self._start = at
        return out

    def _payload(self, payload: bytes, out: list[bytes]) -> None:
        kind = payload[0] if payload else -1
        if kind == OK:
            out.append(payload[1:])
        elif kind == EOF and len(payload) < 9:
            self.ended = True
        elif kind == ERR:
            self.error = payload
        else:
            raise SourceError(f"unexpected packet 0x{payload[:1].hex()} in the binlog stream")

    def feed(self, chunk: bytes) -> list[bytes]:
        """`buffer_updated` for bytes already read elsewhere (in pieces as large as the buffer)."""
        out: list[bytes] = []
        at = 0
        while at < len(chunk):
            space = self.get_buffer()
            n = min(len(space), len(chunk) - at)
            space[:n] = chunk[at : at + n]
            space.release()
            at += n
            out += self.buffer_updated(n)
        return out
