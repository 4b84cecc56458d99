"""MySQL binary DECIMAL (decimal2bin in strings/decimal.cc) -> decimal.Decimal.

Digits are grouped by nine into 4-byte big-endian words; leading/trailing partial groups
take dig2bytes[n] bytes. The sign is the inverted top bit of the first byte, and a negative
value has all its bytes inverted.

Speed: a column's converter is built once per (precision, scale). It reads the whole value
as one big-endian int, undoes the sign encoding with one XOR, and cuts the digit groups out
with precomputed shifts and masks: no per-byte work, no string joins.
"""

from __future__ import annotations

from decimal import Context, Decimal

from service.binlog.inplace import InPlace, InPlaceConverter
from service.errors import InvalidValue, TruncatedEvent

__all__ = [
    "DecimalText",
    "decimal_size",
    "decode_decimal",
    "make_decimal_converter",
    "make_decimal_text_converter",
]

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_MAX = (0, 9, 99, 999, 9999, 99999, 999999, 9999999, 99999999, 999999999)
_EXACT = Context(prec=65)  # DECIMAL's 65 digits at most: nothing is ever rounded


def decimal_size(precision: int, scale: int) -> int:
    if not (0 < precision <= 65 and 0 <= scale <= 30 and scale <= precision):
        raise InvalidValue(f"DECIMAL({precision},{scale}) is out of range")
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]


def _groups(precision: int, scale: int) -> list[tuple[int, int]]:
    """(bytes, digits) of each digit group, most significant first (integer part, then fraction)."""
    intg = precision - scale
    groups: list[tuple[int, int]] = []
    if intg % 9:
        groups.append((_DIG2BYTES[intg % 9], intg % 9))
    groups.extend([(4, 9)] * (intg // 9))
    groups.extend([(4, 9)] * (scale // 9))
    if scale % 9:
        groups.append((_DIG2BYTES[scale % 9], scale % 9))
    return groups


def _layout(precision: int, scale: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """(shift, mask, max value, digits, weight) per group: group = value >> shift & mask, and the
    unscaled integer is the sum of group * weight (weight = 10 ** digits of the later groups)."""
    groups = _groups(precision, scale)
    out: list[tuple[int, int, int, int, int]] = []
    shift = decimal_size(precision, scale) * 8
    digits_after = precision
    for nbytes, ndig in groups:
        shift -= nbytes * 8
        digits_after -= ndig
        out.append((shift, (1 << nbytes * 8) - 1, _MAX[ndig], ndig, 10**digits_after))
    return tuple(out)


def make_decimal_converter(precision: int, scale: int) -> InPlaceConverter[Decimal]:
    """bytes (decimal_size(precision, scale) of them, at offset `at`; the caller checks that
    they are there) -> Decimal."""
    size = decimal_size(precision, scale)
    layout = _layout(precision, scale)
    sign_bit = 1 << (size * 8 - 1)
    negative_flip = sign_bit ^ ((1 << size * 8) - 1)  # clear the sign bit and invert the rest
    exponent = f"E-{scale}" if scale else ""  # "123E-2" parses to Decimal("1.23"), exponent kept
    unit = Decimal(f"1{exponent}")
    from_bytes = int.from_bytes
    # Bound once: Context has its own attribute lookup, so a `_EXACT.multiply(...)` call would
    # build a bound method for every value.
    multiply = _EXACT.multiply

    def convert(raw: bytes, at: int = 0) -> Decimal:
        if size <= 7:  # up to DECIMAL(16,x): a machine word, assembled without a call
            value = 0
            for i in range(at, at + size):
                value = value << 8 | raw[i]
        else:
            value = from_bytes(raw[at : at + size], "big")
        negative = value < sign_bit
        value ^= negative_flip if negative else sign_bit
        unscaled = 0
        for shift, mask, limit, ndig, weight in layout:
            group = value >> shift & mask
            if group > limit:
                raise InvalidValue(f"DECIMAL({precision},{scale}) group {group} exceeds {ndig} digits")
            unscaled += group * weight
        if negative:
            if not unscaled:  # keep the sign of a negative zero, as the text form would
                return Decimal(f"-0{exponent}")
            unscaled = -unscaled
        # unscaled * 1E-scale: exact (65 digits fit the context) and the exponent is kept
        # (Decimal("1.20"), not Decimal("1.2")); one Decimal built, half the cost of parsing
        # "120E-2" or of Decimal(120).scaleb(-2).
        return multiply(unscaled, unit)

    return convert


def make_decimal_text_converter(precision: int, scale: int) -> InPlaceConverter[str]:
    """The same bytes -> the canonical text of make_decimal_converter's Decimal, format(v, "f")
    (canonical.py): the integer part, and the fraction zero-padded to `scale` digits, cut from the
    digit groups without building the Decimal (`binlog-mirror decode`; DecodeOptions.text_values).
    The same checks and errors as make_decimal_converter."""
    return DecimalText(precision, scale)


class DecimalText(InPlace):
    """make_decimal_text_converter's converter: a class, so the compiled row reader calls it
    natively (inplace.py)."""

    def __init__(self, precision: int, scale: int) -> None:
        size = decimal_size(precision, scale)
        layout = _layout(precision, scale)
        intg = precision - scale
        n_int = intg // 9 + (1 if intg % 9 else 0)  # the integer part's groups come first
        unit = 10**scale
        self.precision, self.scale, self.size = precision, scale, size
        self.int_layout = tuple(
            (sh, mask, lim, nd, weight // unit) for sh, mask, lim, nd, weight in layout[:n_int]
        )
        self.frac_layout = layout[n_int:]
        self.zeros = "0" * scale
        # Up to 4 fraction digits, every fraction's text made once: no str() and no padding a value
        self.fractions = [f"{i:0{scale}d}" for i in range(10**scale)] if 0 < scale <= 4 else []
        self.sign_bit = 1 << (size * 8 - 1)
        self.negative_flip = self.sign_bit ^ ((1 << size * 8) - 1)

    def read(self, raw: bytes, at: int) -> str:
        size = self.size
        if size <= 7:
            value = 0
            for i in range(at, at + size):
                value = value << 8 | raw[i]
        else:
            value = int.from_bytes(raw[at : at + size], "big")
        sign_bit = self.sign_bit
        negative = value < sign_bit
        value ^= self.negative_flip if negative else sign_bit
        whole = 0
        for shift, mask, limit, ndig, weight in self.int_layout:
            group = value >> shift & mask
            if group > limit:
                self._bad(group, ndig)
            whole += group * weight
        text = str(whole)
        if self.scale:
            frac = 0
            for shift, mask, limit, ndig, weight in self.frac_layout:
                group = value >> shift & mask
                if group > limit:
                    self._bad(group, ndig)
                frac += group * weight
            fractions = self.fractions
            if fractions:
                text = f"{text}.{fractions[frac]}"
            else:
                digits = str(frac)
                text = f"{text}.{self.zeros[len(digits) :]}{digits}"
        # a negative zero keeps its sign, as format(Decimal("-0.00"), "f") does
        return "-" + text if negative else text

    def __call__(self, raw: bytes, at: int = 0) -> str:
        return self.read(raw, at)

    def _bad(self, group: int, ndig: int) -> None:
        raise InvalidValue(f"DECIMAL({self.precision},{self.scale}) group {group} exceeds {ndig} digits")


def decode_decimal(raw: bytes, precision: int, scale: int) -> Decimal:
    size = decimal_size(precision, scale)
    if len(raw) != size:
        raise TruncatedEvent(f"DECIMAL({precision},{scale}) needs {size} bytes, got {len(raw)}")
    return make_decimal_converter(precision, scale)(raw)
