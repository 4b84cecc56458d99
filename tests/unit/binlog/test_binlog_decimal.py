"""The DECIMAL converter against the value's text, for any precision, scale, sign and digits.

The real-server vectors (test_binlog_mariadb_values.py, test_binlog_vs_mariadb_binlog.py) prove
the byte layout; this property test covers the (precision, scale) space they cannot: the bytes
are made by `_decimal2bin`, a transcription of decimal2bin() in MySQL's strings/decimal.cc, and
the converter must give the Decimal of the same text, exponent included ("1.20", not "1.2")."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from service.binlog.decimal import decimal_size, make_decimal_converter

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal2bin(int_digits: str, frac_digits: str, negative: bool) -> bytes:
    """Digits (already padded to precision - scale and scale) -> MySQL's binary DECIMAL."""
    groups: list[str] = []
    lead = len(int_digits) % 9
    if lead:
        groups.append(int_digits[:lead])
    groups += [int_digits[i : i + 9] for i in range(lead, len(int_digits), 9)]
    groups += [frac_digits[i : i + 9] for i in range(0, len(frac_digits), 9)]
    out = bytearray()
    for group in groups:
        out += int(group).to_bytes(_DIG2BYTES[len(group)], "big")
    out[0] ^= 0x80
    return bytes(b ^ 0xFF for b in out) if negative else bytes(out)


@st.composite
def decimals(draw: st.DrawFn) -> tuple[int, int, str, bytes]:
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(30, precision)))
    digits = draw(st.text("0123456789", min_size=precision, max_size=precision))
    negative = draw(st.booleans())
    int_digits, frac_digits = digits[: precision - scale], digits[precision - scale :]
    text = ("-" if negative else "") + (int_digits.lstrip("0") or "0") + ("." + frac_digits if scale else "")
    return precision, scale, text, _decimal2bin(int_digits, frac_digits, negative)


@given(decimals())
def test_decimal_converter_equals_the_text_form(case: tuple[int, int, str, bytes]) -> None:
    precision, scale, text, raw = case
    assert len(raw) == decimal_size(precision, scale)
    value = make_decimal_converter(precision, scale)(raw)
    assert str(value) == str(Decimal(text)), (precision, scale, text)
    # read in place, inside a row image, as the compiled row reader does
    assert str(make_decimal_converter(precision, scale)(b"\xff\x00" + raw + b"\x7f", 2)) == str(value)
