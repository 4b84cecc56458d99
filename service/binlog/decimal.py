"""MySQL binary DECIMAL (decimal2bin in strings/decimal.cc) -> decimal.Decimal.

Digits are grouped by nine into 4-byte big-endian words; leading/trailing partial groups
take dig2bytes[n] bytes. The sign is the inverted top bit of the first byte, and a negative
value has all its bytes inverted.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from service.errors import InvalidValue, TruncatedEvent

__all__ = ["decimal_size", "decode_decimal", "make_decimal_reader"]

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_MAX = (0, 9, 99, 999, 9999, 99999, 999999, 9999999, 99999999, 999999999)


def decimal_size(precision: int, scale: int) -> int:
    if not (0 < precision <= 65 and 0 <= scale <= 30 and scale <= precision):
        raise InvalidValue(f"DECIMAL({precision},{scale}) is out of range")
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]


def _groups(precision: int, scale: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(bytes, digits) of each integer group and each fractional group, in order."""
    intg = precision - scale
    ints: list[tuple[int, int]] = []
    if intg % 9:
        ints.append((_DIG2BYTES[intg % 9], intg % 9))
    ints.extend([(4, 9)] * (intg // 9))
    fracs: list[tuple[int, int]] = [(4, 9)] * (scale // 9)
    if scale % 9:
        fracs.append((_DIG2BYTES[scale % 9], scale % 9))
    return ints, fracs


def decode_decimal(raw: bytes, precision: int, scale: int) -> Decimal:
    size = decimal_size(precision, scale)
    if len(raw) != size:
        raise TruncatedEvent(f"DECIMAL({precision},{scale}) needs {size} bytes, got {len(raw)}")
    return _reader(precision, scale)(raw, 0)[0]


def _reader(precision: int, scale: int) -> Callable[[bytes, int], tuple[Decimal, int]]:
    size = decimal_size(precision, scale)
    ints, fracs = _groups(precision, scale)

    def read(buf: bytes, pos: int) -> tuple[Decimal, int]:
        end = pos + size
        raw = buf[pos:end]
        if len(raw) != size:
            raise TruncatedEvent(f"DECIMAL({precision},{scale}) value cut short at row offset {pos}")
        negative = not raw[0] & 0x80
        b = bytearray(raw)
        b[0] ^= 0x80
        if negative:
            b = bytearray(x ^ 0xFF for x in b)
        i = 0
        int_digits: list[str] = []
        for nbytes, ndig in ints:
            v = int.from_bytes(b[i : i + nbytes], "big")
            if v > _MAX[ndig]:
                raise InvalidValue(f"DECIMAL({precision},{scale}) group {v} exceeds {ndig} digits")
            int_digits.append(str(v).zfill(ndig))
            i += nbytes
        frac_digits: list[str] = []
        for nbytes, ndig in fracs:
            v = int.from_bytes(b[i : i + nbytes], "big")
            if v > _MAX[ndig]:
                raise InvalidValue(f"DECIMAL({precision},{scale}) group {v} exceeds {ndig} digits")
            frac_digits.append(str(v).zfill(ndig))
            i += nbytes
        text = ("-" if negative else "") + ("".join(int_digits).lstrip("0") or "0")
        if frac_digits:
            text += "." + "".join(frac_digits)
        return Decimal(text), end

    return read


make_decimal_reader = _reader
