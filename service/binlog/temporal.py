"""Temporal column values (field.cc / my_time.cc layouts).

Valid values become date / datetime / timedelta; TIMESTAMP becomes an aware UTC datetime.
Zero and partial dates ('0000-00-00', '2020-00-15') are kept as their MySQL text, since
Python's date cannot hold them.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from service.binlog.inplace import InPlaceConverter
from service.errors import InvalidValue

__all__ = [
    "FRAC_BYTES",
    "date_from_packed",
    "datetime_from_packed",
    "decode_date",
    "decode_datetime_old",
    "decode_time2",
    "decode_time_old",
    "decode_timestamp_old",
    "decode_year",
    "make_datetime2_converter",
    "make_timestamp2_converter",
    "time2_packed",
    "time_from_packed",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FRAC_BYTES = (0, 1, 1, 2, 2, 3, 3)  # by fsp
_FRAC_MUL = (1, 10000, 10000, 100, 100, 1, 1)
ZERO_DATETIME = "0000-00-00 00:00:00"


def _fmt_date(y: int, m: int, d: int) -> str:
    return f"{y:04d}-{m:02d}-{d:02d}"


def _frac_text(us: int) -> str:
    return f".{us:06d}" if us else ""


def make_date(y: int, m: int, d: int) -> date | str:
    if m == 0 or d == 0 or y == 0:
        if m > 12 or d > 31:
            raise InvalidValue(f"invalid date {_fmt_date(y, m, d)}")
        return _fmt_date(y, m, d)
    try:
        return date(y, m, d)
    except ValueError as exc:
        raise InvalidValue(f"invalid date {_fmt_date(y, m, d)}") from exc


def make_datetime(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int) -> datetime | str:
    if h > 23 or mi > 59 or s > 59 or us > 999999:
        raise InvalidValue(f"invalid time of day {h:02d}:{mi:02d}:{s:02d}.{us:06d}")
    if mo == 0 or d == 0 or y == 0:
        if mo > 12 or d > 31:
            raise InvalidValue(f"invalid date {_fmt_date(y, mo, d)}")
        return f"{_fmt_date(y, mo, d)} {h:02d}:{mi:02d}:{s:02d}{_frac_text(us)}"
    try:
        return datetime(y, mo, d, h, mi, s, us)
    except ValueError as exc:
        raise InvalidValue(f"invalid datetime {_fmt_date(y, mo, d)}") from exc


def decode_year(v: int) -> int:
    return 0 if v == 0 else 1900 + v


def decode_date(raw: bytes) -> date | str:
    v = int.from_bytes(raw, "little")
    return make_date(v >> 9, (v >> 5) & 15, v & 31)


def datetime_from_packed(packed: int) -> datetime | str:
    """my_time.cc TIME_from_longlong_datetime_packed (DATETIME2 and JSON opaque DATETIME)."""
    if packed < 0:
        raise InvalidValue("negative DATETIME")
    ymdhms, us = packed >> 24, packed & 0xFFFFFF
    ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
    ym = ymd >> 5
    return make_datetime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, us)


def date_from_packed(packed: int) -> date | str:
    value = datetime_from_packed(packed)
    if isinstance(value, datetime):
        return value.date()
    return value.split(" ", 1)[0]


def time_from_packed(packed: int) -> timedelta:
    """my_time.cc TIME_from_longlong_time_packed (TIME2 and JSON opaque TIME)."""
    neg = packed < 0
    if neg:
        packed = -packed
    hms, us = packed >> 24, packed & 0xFFFFFF
    h, mi, s = (hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63
    if mi > 59 or s > 59 or us > 999999:
        raise InvalidValue(f"invalid TIME {h}:{mi}:{s}.{us}")
    td = timedelta(hours=h, minutes=mi, seconds=s, microseconds=us)
    return -td if neg else td


def utc_datetime(sec: int, us: int = 0) -> datetime:
    """Seconds since the epoch (>= 0) -> aware UTC datetime; as datetime.fromtimestamp(sec, UTC)
    but without the C library's time conversion, which costs about twice as much (days to the
    civil date by Howard Hinnant's days_from_civil inverse, on integers; // and % rather than
    divmod, which a compiled build would call as a generic function)."""
    days = sec // 86400
    rem = sec - days * 86400
    z = days + 719468  # days since 0000-03-01
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return datetime(year, month, day, rem // 3600, rem // 60 % 60, rem % 60, us, UTC)


# The converters below read their bytes one by one: a DATETIME2(6) is 8 bytes, one int of
# 64 bits, which a compiled build shifts and masks as a heap integer; the 5-byte integer part
# and the 3-byte fraction each stay a machine word. They read in place (`at`: the value's
# offset in a row image), so the row reader passes its buffer instead of a slice.


def _fraction_us(raw: bytes, at: int, nbytes: int, scale: int) -> int:
    """The big-endian fraction of `nbytes` (0-3) at `at`, in microseconds."""
    if nbytes == 0:
        return 0
    if nbytes == 1:
        us = raw[at] * scale
    elif nbytes == 2:
        us = (raw[at] << 8 | raw[at + 1]) * scale
    else:
        us = raw[at] << 16 | raw[at + 1] << 8 | raw[at + 2]
    if us > 999999:
        raise InvalidValue(f"fractional seconds {us} out of range")
    return us


def make_datetime2_converter(fsp: int) -> InPlaceConverter[datetime | str]:
    """DATETIME2(fsp) bytes (at offset `at`) -> value: a 5-byte big-endian integer part offset by
    0x8000000000, then the fraction (my_datetime_packed_from_binary)."""
    frac_len, frac_mul = FRAC_BYTES[fsp], _FRAC_MUL[fsp]

    def convert(raw: bytes, at: int = 0) -> datetime | str:
        intpart = (
            raw[at] << 32 | raw[at + 1] << 24 | raw[at + 2] << 16 | raw[at + 3] << 8 | raw[at + 4]
        ) - 0x8000000000
        us = _fraction_us(raw, at + 5, frac_len, frac_mul)
        if intpart > 0:  # fast path for ordinary values; zero/partial dates fall through
            ymd, hms = intpart >> 17, intpart & 0x1FFFF
            ym = ymd >> 5
            try:
                return datetime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, us)
            except ValueError:
                pass
        return datetime_from_packed((intpart << 24) + us)

    return convert


def make_timestamp2_converter(fsp: int) -> InPlaceConverter[datetime | str]:
    """TIMESTAMP2(fsp) bytes (at offset `at`) -> value (see make_datetime2_converter)."""
    frac_len, frac_mul = FRAC_BYTES[fsp], _FRAC_MUL[fsp]

    def convert(raw: bytes, at: int = 0) -> datetime | str:
        sec = raw[at] << 24 | raw[at + 1] << 16 | raw[at + 2] << 8 | raw[at + 3]
        us = _fraction_us(raw, at + 4, frac_len, frac_mul)
        if sec == 0 and us == 0:
            return ZERO_DATETIME
        return utc_datetime(sec, us)

    return convert


def decode_time2(raw: bytes, fsp: int) -> timedelta:
    """TIME2: 3-byte big-endian offset integer part plus fsp-dependent fraction
    (my_time_packed_from_binary)."""
    return time_from_packed(time2_packed(raw, fsp))


def time2_packed(raw: bytes, fsp: int) -> int:
    """TIME2's bytes as my_time.cc's packed integer (my_time_packed_from_binary)."""
    if fsp >= 5:
        return int.from_bytes(raw[:6], "big") - 0x800000000000
    intpart = int.from_bytes(raw[:3], "big") - 0x800000
    if fsp == 0:
        return intpart << 24
    if fsp <= 2:
        frac = raw[3]
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x100
        return (intpart << 24) + frac * 10000
    frac = int.from_bytes(raw[3:5], "big")
    if intpart < 0 and frac:
        intpart += 1
        frac -= 0x10000
    return (intpart << 24) + frac * 100


def decode_time_old(raw: bytes) -> timedelta:
    v = int.from_bytes(raw, "little", signed=True)
    neg = v < 0
    v = abs(v)
    h, mi, s = v // 10000, (v // 100) % 100, v % 100
    if mi > 59 or s > 59:
        raise InvalidValue(f"invalid TIME {v}")
    td = timedelta(hours=h, minutes=mi, seconds=s)
    return -td if neg else td


def decode_datetime_old(v: int) -> datetime | str:
    d, t = divmod(v, 1000000)
    return make_datetime(d // 10000, (d // 100) % 100, d % 100, t // 10000, (t // 100) % 100, t % 100, 0)


def decode_timestamp_old(v: int) -> datetime | str:
    return ZERO_DATETIME if v == 0 else EPOCH + timedelta(seconds=v)
