"""Temporal columns straight to their canonical text (canonical.py, docs/row-format.md), without
the date / datetime / timedelta that temporal.py builds: for callers that only print the values
(`binlog-mirror decode`; DecodeOptions.text_values).

Each converter returns exactly canonical.value_to_json(typed(raw)) for the typed converter of
the same column: valid values are formatted from their fields here; anything else (zero and
partial dates, out-of-range fields) goes through the typed converter, so the text (MySQL's own,
a str there) and the errors (InvalidValue) are the typed path's. tests/unit/binlog/
test_decode_lines.py compares the two on every fixture and on random bytes. (canonical.py is
not imported: it imports values.py, which imports this module.)
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from service.binlog.inplace import InPlace, InPlaceConverter
from service.binlog.temporal import (
    _FRAC_MUL,
    FRAC_BYTES,
    ZERO_DATETIME,
    _fraction_us,
    decode_date,
    make_datetime2_converter,
    time2_packed,
)
from service.binlog.utctext import UtcText
from service.errors import InvalidValue

__all__ = [
    "DateText",
    "Datetime2Text",
    "Time2Text",
    "Timestamp2Text",
    "make_date_text_converter",
    "make_datetime2_text_converter",
    "make_time2_text_converter",
    "make_timestamp2_text_converter",
]

_2D: Final = tuple(f"{i:02d}" for i in range(100))  # "00".."99": no format spec per field
_3D: Final = tuple(f"{i:03d}" for i in range(1000))  # a fraction's two halves, likewise
_DAYS: Final = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _valid_date(y: int, m: int, d: int) -> bool:
    """Whether date(y, m, d) exists (what the typed path builds; else it has its own text)."""
    if y < 1 or y > 9999 or m < 1 or m > 12 or d < 1:
        return False
    if d <= 28:
        return True
    if m == 2:
        return d == 29 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    return d <= _DAYS[m]


def _date_text(y: int, m: int, d: int) -> str:
    year = str(y) if y >= 1000 else f"{y:04d}"
    return f"{year}-{_2D[m]}-{_2D[d]}"


def _frac_text(us: int) -> str:
    if not us:
        return ""
    digits = str(us)
    return f".{'000000'[len(digits) :]}{digits}"


# The text up to the minute ("YYYY-MM-DD HH:MM:") is kept per converter, by the minute's bits:
# the rows of a statement or a load mostly share it, and the date is the costly part. At most
# _PREFIXES of them, then the cache starts again.
_PREFIXES: Final = 4096


def _datetime2_prefix(minute: int) -> str | None:
    """DATETIME2's "YYYY-MM-DD HH:MM:" of the integer part without its 6 bits of seconds, or None
    when that is no date and time of day datetime() accepts."""
    ymd, hm = minute >> 11, minute & 0x7FF
    ym = ymd >> 5
    y, m, d = ym // 13, ym % 13, ymd & 31
    h, mi = hm >> 6, hm & 63
    if h <= 23 and mi <= 59 and _valid_date(y, m, d):
        return f"{_date_text(y, m, d)} {_2D[h]}:{_2D[mi]}:"
    return None


def make_datetime2_text_converter(fsp: int) -> InPlaceConverter[str]:
    """DATETIME2(fsp) bytes -> "YYYY-MM-DD HH:MM:SS[.ffffff]" (temporal.make_datetime2_converter)."""
    return Datetime2Text(fsp)


class Datetime2Text(InPlace):
    """make_datetime2_text_converter's converter, a class the compiled row reader calls natively
    (inplace.py). The last minute's prefix is kept apart from the dict: consecutive rows mostly
    share it, and a dict lookup by int boxes the int first."""

    def __init__(self, fsp: int) -> None:
        self.frac_len, self.frac_mul = FRAC_BYTES[fsp], _FRAC_MUL[fsp]
        self.typed = make_datetime2_converter(fsp)
        self.prefixes: dict[int, str] = {}
        self.last_minute = -1
        self.last_prefix = ""

    def read(self, raw: bytes, at: int) -> str:
        intpart = (
            raw[at] << 32 | raw[at + 1] << 24 | raw[at + 2] << 16 | raw[at + 3] << 8 | raw[at + 4]
        ) - 0x8000000000
        us = _fraction_us(raw, at + 5, self.frac_len, self.frac_mul)
        s = intpart & 63
        if intpart > 0 and s <= 59:
            minute = intpart >> 6
            if minute == self.last_minute:
                if us:  # _frac_text's digits, without str() and padding
                    return f"{self.last_prefix}{_2D[s]}.{_3D[us // 1000]}{_3D[us % 1000]}"
                return f"{self.last_prefix}{_2D[s]}"
            prefixes = self.prefixes
            prefix = prefixes.get(minute)
            if prefix is None:
                prefix = _datetime2_prefix(minute)
                if prefix is not None:
                    if len(prefixes) >= _PREFIXES:
                        prefixes.clear()
                    prefixes[minute] = prefix
            if prefix is not None:
                self.last_minute, self.last_prefix = minute, prefix
                return f"{prefix}{_2D[s]}{_frac_text(us)}"
        value = self.typed(raw, at)  # MySQL's text of a zero/partial date, or InvalidValue
        if isinstance(value, str):
            return value
        return _datetime_text(value)  # not reached: the checks above are datetime()'s

    def __call__(self, raw: bytes, at: int = 0) -> str:
        return self.read(raw, at)


def _datetime_text(v: datetime) -> str:
    return (
        f"{_date_text(v.year, v.month, v.day)} {_2D[v.hour]}:{_2D[v.minute]}:{_2D[v.second]}"
        f"{_frac_text(v.microsecond)}"
    )


def _utc_prefix(minute: int) -> str:
    """ "YYYY-MM-DDTHH:MM:" of a minute since the epoch (>= 0), the civil date as in
    temporal.utc_datetime (4-byte seconds: years 1970-2106)."""
    days = minute // 1440
    rem = minute - days * 1440
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400 + (1 if m <= 2 else 0)
    return f"{_date_text(y, m, d)}T{_2D[rem // 60]}:{_2D[rem % 60]}:"


def make_timestamp2_text_converter(fsp: int, tagged: bool = False) -> InPlaceConverter[str]:
    """TIMESTAMP2(fsp) bytes -> "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" in UTC, or MySQL's zero
    "0000-00-00 00:00:00" (temporal.make_timestamp2_converter, temporal.utc_datetime).
    `tagged`: the UTC text as a UtcText (DecodeOptions.stored_text)."""
    return Timestamp2Text(fsp, tagged)


class Timestamp2Text(InPlace):
    """make_timestamp2_text_converter's converter (a class: see Datetime2Text)."""

    def __init__(self, fsp: int, tagged: bool) -> None:
        self.frac_len, self.frac_mul = FRAC_BYTES[fsp], _FRAC_MUL[fsp]
        self.tagged = tagged
        self.prefixes: dict[int, str] = {}
        self.last_minute = -1
        self.last_prefix = ""

    def read(self, raw: bytes, at: int) -> str:
        sec = raw[at] << 24 | raw[at + 1] << 16 | raw[at + 2] << 8 | raw[at + 3]
        us = _fraction_us(raw, at + 4, self.frac_len, self.frac_mul)
        if sec == 0 and us == 0:
            return ZERO_DATETIME
        minute = sec // 60
        if minute == self.last_minute:
            prefix = self.last_prefix
        else:
            prefixes = self.prefixes
            found = prefixes.get(minute)
            if found is None:
                if len(prefixes) >= _PREFIXES:
                    prefixes.clear()
                found = prefixes[minute] = _utc_prefix(minute)
            prefix = self.last_prefix = found
            self.last_minute = minute
        if us:  # _frac_text's digits, without str() and padding
            text = f"{prefix}{_2D[sec - minute * 60]}.{_3D[us // 1000]}{_3D[us % 1000]}Z"
        else:
            text = f"{prefix}{_2D[sec - minute * 60]}Z"
        return UtcText(text) if self.tagged else text

    def __call__(self, raw: bytes, at: int = 0) -> str:
        return self.read(raw, at)


def make_time2_text_converter(fsp: int) -> InPlaceConverter[str]:
    """TIME2(fsp) bytes -> "[-]HH:MM:SS[.ffffff]" (temporal.decode_time2, canonical's TIME)."""
    return Time2Text(fsp)


class Time2Text(InPlace):
    """make_time2_text_converter's converter (a class: see Datetime2Text)."""

    def __init__(self, fsp: int) -> None:
        self.fsp = fsp
        self.size = 3 + FRAC_BYTES[fsp]

    def read(self, raw: bytes, at: int) -> str:
        packed = time2_packed(raw[at : at + self.size], self.fsp)
        negative = packed < 0
        if negative:
            packed = -packed
        hms, us = packed >> 24, packed & 0xFFFFFF
        h, mi, s = (hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63
        if mi > 59 or s > 59 or us > 999999:  # temporal.time_from_packed's error
            raise InvalidValue(f"invalid TIME {h}:{mi}:{s}.{us}")
        sign = "-" if negative and (h or mi or s or us) else ""
        hours = _2D[h] if h < 100 else str(h)
        return f"{sign}{hours}:{_2D[mi]}:{_2D[s]}{_frac_text(us)}"

    def __call__(self, raw: bytes, at: int = 0) -> str:
        return self.read(raw, at)


def make_date_text_converter() -> InPlaceConverter[str]:
    """DATE (3 bytes) -> "YYYY-MM-DD" (temporal.decode_date; zero and partial dates as they are)."""
    return DateText()


class DateText(InPlace):
    """make_date_text_converter's converter (a class: see Datetime2Text)."""

    def read(self, raw: bytes, at: int) -> str:
        v = raw[at] | raw[at + 1] << 8 | raw[at + 2] << 16
        y, m, d = v >> 9, (v >> 5) & 15, v & 31
        if _valid_date(y, m, d):
            return _date_text(y, m, d)
        value = decode_date(raw[at : at + 3])  # MySQL's text of a zero/partial date, or InvalidValue
        if isinstance(value, str):
            return value
        return _date_text(value.year, value.month, value.day)  # not reached: as date() checks

    def __call__(self, raw: bytes, at: int = 0) -> str:
        return self.read(raw, at)
