"""service/sqltext.py: the literal of each type the queries bind (their round trip through a real
server is tests/integration/test_sql_literals.py)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from service.sqltext import bind, keyset_page, literal, rows_by_key


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "NULL"),
        (b"\x00\xa3'\\", "X'00a3275c'"),
        (bytearray(b"\xff"), "X'ff'"),
        (memoryview(b"ab"), "X'6162'"),
        (b"", "X''"),
        ("it's é", "_utf8mb4 X'6974277320c3a9'"),
        ("", "_utf8mb4 X''"),
        (True, "1"),
        (-42, "-42"),
        (18446744073709551615, "18446744073709551615"),
        (Decimal("1E+2"), "100"),
        (Decimal("-0.000001"), "-0.000001"),
        (0.1, "0.1"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 6), "'2024-01-02 03:04:05.000006'"),
        (
            dt.datetime(2024, 1, 2, 5, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "'2024-01-02 03:04:05.000000'",
        ),
        (dt.date(2024, 1, 2), "'2024-01-02'"),
        (dt.time(23, 59, 1, 5), "'23:59:01.000005'"),
        (dt.timedelta(hours=-838, minutes=-59, seconds=-59), "'-838:59:59.000000'"),
        (dt.timedelta(days=1, microseconds=1), "'24:00:00.000001'"),
        (frozenset({"b", "a"}), "_utf8mb4 X'612c62'"),
    ],
)
def test_literals(value: object, text: str) -> None:
    assert literal(value) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), Decimal("NaN"), object()])
def test_a_value_without_a_literal_is_an_error(value: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        literal(value)


def test_bind_as_the_driver_formats() -> None:
    assert bind("SELECT %s, '%%', %s", (b"\x01", "x")) == "SELECT X'01', '%', _utf8mb4 X'78'"
    assert bind("SELECT '%'", None) == "SELECT '%'"  # no args: not formatted
    assert bind("SELECT '%%'", ()) == "SELECT '%'"  # args, even none: formatted


def test_keyset_page_and_rows_by_key() -> None:
    assert (
        keyset_page("d", "t`x", ("a", "b"), None, 10) == "SELECT * FROM `d`.`t``x` ORDER BY `a`, `b` LIMIT 10"
    )
    assert keyset_page("d", "t", ("a", "b"), (b"\xa3", "s"), 5, "`a` >= 1") == (
        "SELECT * FROM `d`.`t` WHERE `a` >= 1 AND (`a`, `b`) > (X'a3', _utf8mb4 X'73') "
        "ORDER BY `a`, `b` LIMIT 5"
    )
    assert rows_by_key("d", "t", ("a",), [(b"\x00",), (b"\x01",)]) == (
        "SELECT * FROM `d`.`t` WHERE (`a`) IN ((X'00'), (X'01'))"
    )
