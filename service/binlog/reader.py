"""Bounds-checked little-endian cursor over one event body.

Every out-of-range read raises `TruncatedEvent` naming the offset inside the event,
so no IndexError/struct.error can escape from header and metadata parsing.
"""

from __future__ import annotations

from service.errors import TruncatedEvent

__all__ = ["ByteReader"]


class ByteReader:
    __slots__ = ("_buf", "_end", "pos", "base")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None, base: int = 0) -> None:
        self._buf = buf
        self.pos = pos
        self._end = len(buf) if end is None else min(end, len(buf))
        self.base = base  # added to positions in error messages (offset of buf in the event)

    @property
    def buf(self) -> bytes:
        return self._buf

    @property
    def end(self) -> int:
        return self._end

    def remaining(self) -> int:
        return self._end - self.pos

    def at_end(self) -> bool:
        return self.pos >= self._end

    def _need(self, n: int) -> int:
        start = self.pos
        end = start + n
        if n < 0 or end > self._end:
            raise TruncatedEvent(
                f"need {n} bytes at event offset {self.base + start}, have {self._end - start}"
            )
        self.pos = end
        return start

    def take(self, n: int) -> bytes:
        start = self._need(n)
        return self._buf[start : start + n]

    def skip(self, n: int) -> None:
        self._need(n)

    def rest(self) -> bytes:
        start = self.pos
        self.pos = self._end
        return self._buf[start : self._end]

    def u8(self) -> int:
        start = self._need(1)
        return self._buf[start]

    def uint(self, n: int) -> int:
        start = self._need(n)
        b = self._buf
        # The common widths by byte arithmetic: int.from_bytes costs a slice and a method call,
        # ~10 times per small transaction (table ids, flags, GTID, XID).
        if n == 2:
            return b[start] | b[start + 1] << 8
        if n == 4:
            return b[start] | b[start + 1] << 8 | b[start + 2] << 16 | b[start + 3] << 24
        if n == 8:
            low = b[start] | b[start + 1] << 8 | b[start + 2] << 16 | b[start + 3] << 24
            high = b[start + 4] | b[start + 5] << 8 | b[start + 6] << 16 | b[start + 7] << 24
            return low | high << 32
        return int.from_bytes(b[start : start + n], "little")

    def sint(self, n: int) -> int:
        start = self._need(n)
        return int.from_bytes(self._buf[start : start + n], "little", signed=True)

    def uint_be(self, n: int) -> int:
        start = self._need(n)
        return int.from_bytes(self._buf[start : start + n], "big")

    def lenenc(self) -> int:
        """net_field_length: <251 one byte; 252: 2 bytes; 253: 3 bytes; 254: 8 bytes."""
        first = self.u8()
        if first < 251:
            return first
        if first == 252:
            return self.uint(2)
        if first == 253:
            return self.uint(3)
        if first == 254:
            return self.uint(8)
        raise TruncatedEvent(
            f"invalid length-encoded integer 0x{first:02x} at event offset {self.base + self.pos - 1}"
        )

    def lenenc_bytes(self) -> bytes:
        return self.take(self.lenenc())

    def varlen(self) -> int:
        """Unsigned integer of the MySQL serialization library (libs/mysql/serialization).

        The number of trailing one bits of the first byte, plus one, is the byte count.
        """
        first = self.u8()
        n = 1
        while n < 9 and first & (1 << (n - 1)):
            n += 1
        if n == 1:
            return first >> 1
        rest = self.uint(n - 1)
        if n == 9:
            return rest
        return (first >> n) | (rest << (8 - n))

    def varlen_signed(self) -> int:
        v = self.varlen()
        return -(v >> 1) - 1 if v & 1 else v >> 1

    def cstring(self) -> bytes:
        """NUL-terminated byte string (the NUL is consumed, not returned)."""
        idx = self._buf.find(b"\x00", self.pos, self._end)
        if idx < 0:
            raise TruncatedEvent(f"unterminated string at event offset {self.base + self.pos}")
        out = self._buf[self.pos : idx]
        self.pos = idx + 1
        return out

    def bitmap(self, nbits: int) -> int:
        """A little-endian bitmap (bit i of byte i//8 is column i) as an int."""
        return self.uint((nbits + 7) // 8)
