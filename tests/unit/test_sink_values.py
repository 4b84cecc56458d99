"""How values are stored (service/sink/values.py): hash field text and key text."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.binlog.canonical import value_to_json
from service.sink.values import field_value, json_document, key_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (5, "5"),
        (-(2**63), "-9223372036854775808"),
        (2**64 - 1, "18446744073709551615"),
        (0.1, "0.1"),
        (Decimal("12.50"), "12.50"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 600), "2024-01-02 03:04:05.000600"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 600, tzinfo=dt.UTC), "2024-01-02 03:04:05.000600"),  # TIMESTAMP
        (dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))), "2024-01-02 01:04:05"),
        (dt.date(2024, 1, 2), "2024-01-02"),
        (dt.timedelta(hours=-838, minutes=-59, seconds=-59), "-838:59:59"),
        (dt.timedelta(seconds=1, microseconds=5), "00:00:01.000005"),
        ({"b": 1, "a": [1, 2]}, '{"a":[1,2],"b":1}'),
        ("héllo", "héllo"),
    ],
)
def test_field_values(value: object, text: str) -> None:
    assert field_value(value) == text


@given(st.datetimes(timezones=st.just(dt.UTC)))
def test_timestamp_text_is_the_naive_isoformat(value: dt.datetime) -> None:
    """A TIMESTAMP's hash field and JSON text (built field by field, not by isoformat()) agree
    with isoformat() for every datetime, years below 1000 and whole seconds included."""
    naive = value.replace(tzinfo=None)
    assert field_value(value) == field_value(naive) == naive.isoformat(" ")
    assert value_to_json(value) == naive.isoformat("T") + "Z"


def test_binary_values() -> None:
    assert field_value(b"\x00\xff") == b"\x00\xff"
    assert key_text(b"\x00\xff") == "0x00ff"


def test_json_documents_are_the_canonical_json_of_every_fixture_row() -> None:
    """json_document (json-mode rows, change-log images) is byte for byte
    orjson.dumps(row_to_json(row)) on every row image of the real binlogs the tests hold."""
    import contextlib
    from pathlib import Path

    import orjson

    from service.binlog import BinlogDecoder, RowsEvent, read_binlog_file
    from service.binlog.canonical import row_to_json
    from service.errors import DecodeError

    root = Path(__file__).resolve().parents[1] / "fixtures" / "binlog"
    rows = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".py")):
        decoder = BinlogDecoder(file=path.name)
        with contextlib.suppress(DecodeError):  # a fixture that ends in bad bytes: what comes before
            for raw in read_binlog_file(path):
                for ev in decoder.decode_events(raw):
                    if not isinstance(ev, RowsEvent):
                        continue
                    for c in ev.changes:
                        for row in (c.before, c.after):
                            assert json_document(row) == orjson.dumps(row_to_json(row)), (path, row)
                            rows += 1
    assert rows > 100
    aware = {"t": dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=-3)))}
    old = {"t": dt.datetime(999, 1, 2, 3, 4, 5), "u": dt.datetime(999, 1, 2, tzinfo=dt.UTC)}
    for row in (aware, old, {"b": True, "n": None}):
        assert json_document(row) == orjson.dumps(row_to_json(row))
