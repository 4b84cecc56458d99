"""The change log's Arrow columns (service.batch.arrowlog): pure, no Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from service.batch.arrowlog import column_array, image_array, names_array

COLUMNS = [("id", "bigint"), ("at", "timestamp_utc"), ("amount", "decimal(10,2)"), ("added", "string")]
VERSION = ["id", "at", "amount"]


def test_full_images_transpose_like_a_lookup_per_value() -> None:
    utc2 = dt.timezone(dt.timedelta(hours=2))
    full = [
        {"id": 1, "at": dt.datetime(2024, 1, 1, 3, tzinfo=utc2), "amount": Decimal("1.5")},
        None,
        {"id": 2, "at": None, "amount": None},
    ]
    partial = [*full, {"id": 3}]  # a MINIMAL image: the lookup path
    fast, slow = image_array(full, COLUMNS, VERSION), image_array(partial, COLUMNS, VERSION)
    assert fast.to_pylist() == slow.to_pylist()[:3]
    assert fast.to_pylist()[0] == {
        "id": 1, "at": dt.datetime(2024, 1, 1, 1), "amount": Decimal("1.50"), "added": None,
    }  # fmt: skip
    assert slow.to_pylist()[3] == {"id": 3, "at": None, "amount": None, "added": None}
    assert names_array(full, VERSION).to_pylist() == [VERSION, None, VERSION]
    assert names_array(partial, VERSION).to_pylist() == [VERSION, None, VERSION, ["id"]]


def test_values_a_type_cannot_hold() -> None:
    assert column_array(["0000-00-00 00:00:00", dt.datetime(2024, 1, 1)], "timestamp_ntz").to_pylist() == [
        None,
        dt.datetime(2024, 1, 1),
    ]  # fmt: skip  (a zero date: NULL, as the JVM cast gave)
    assert column_array([2**64 - 1, None], "decimal(20,0)").to_pylist() == [Decimal(2**64 - 1), None]
    assert column_array([Decimal("123456789.5"), Decimal("1")], "decimal(10,2)").to_pylist() == [
        None, Decimal("1.00"),
    ]  # fmt: skip
    text = column_array([{"a": [1, "x"]}, dt.timedelta(hours=-1, seconds=1), {"x", "a"}, b"\x01"], "text")
    assert text.to_pylist() == ['{"a":[1,"x"]}', "-00:59:59", "a,x", "0x01"]
    assert column_array([1, 2.5], "double").to_pylist() == [1.0, 2.5]


def test_the_batch_conversion_equals_the_column_at_a_time_one() -> None:
    """image_array converts a batch in one pyarrow call when it can; what it gives is what the
    column-at-a-time path gives (with or without images, narrow images, values to coerce)."""
    from service.batch.arrowlog import _image_by_column

    columns = [*COLUMNS, ("state", "text"), ("raw", "binary"), ("on", "date")]
    version = [n for n, _ in columns]
    utc2 = dt.timezone(dt.timedelta(hours=2))
    full = {
        "id": 1, "at": dt.datetime(2024, 1, 1, 3, tzinfo=utc2), "amount": Decimal("1.5"), "added": "x",
        "state": "paid", "raw": b"\x00\x01", "on": dt.date(2024, 2, 3),
    }  # fmt: skip
    batches: list[list[dict[str, object] | None]] = [
        [full, None, dict.fromkeys(version)],
        [None, None],
        [full, {"id": 3}],  # a MINIMAL image
        [full, {**full, "state": {"a": 1}}],  # a text column's value to convert
        [full, {**full, "on": "0000-00-00"}],  # a zero date: NULL
        [full, {**full, "amount": Decimal("123456789.5")}],  # out of the decimal's range: NULL
    ]
    for images in batches:
        got, want = image_array(images, columns, version), _image_by_column(images, columns, version)
        assert got.type == want.type
        assert got.to_pylist() == want.to_pylist()
        assert names_array(images, version, got.is_valid()).equals(names_array(images, version))


def test_values_the_decoder_gave_as_text_are_parsed_as_the_typed_ones_convert() -> None:
    """The replay's decoder gives DECIMAL and temporal values as their stored text
    (DecodeOptions.stored_text); Arrow parses them to what the typed values become, the values
    a type cannot hold (MySQL's zero dates, a decimal too wide) to NULL."""
    from service.binlog.utctext import UtcText

    ts = [UtcText("2024-05-06T07:08:09.123Z"), None, "0000-00-00 00:00:00"]
    assert column_array(ts, "timestamp_utc").to_pylist() == [
        dt.datetime(2024, 5, 6, 7, 8, 9, 123000),
        None,
        None,
    ]
    naive = ["2024-01-02 03:04:05.000006", "2024-01-02 03:04:05", None, "0000-00-00 00:00:00"]
    assert column_array(naive, "timestamp_ntz").to_pylist() == [
        dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(2024, 1, 2, 3, 4, 5), None, None,
    ]  # fmt: skip
    assert column_array(["0999-12-31", "0000-00-00", None], "date").to_pylist() == [
        dt.date(999, 12, 31),
        None,
        None,
    ]
    assert column_array(["-1.50", "123456789.5", "0.00"], "decimal(10,2)").to_pylist() == [
        Decimal("-1.50"), None, Decimal("0.00"),
    ]  # fmt: skip
    # a column of texts and typed values (an old-format DATETIME beside a DATETIME2): each its way
    mixed = [dt.datetime(2024, 1, 1), "2024-01-02 00:00:00.5", None]
    assert column_array(mixed, "timestamp_ntz").to_pylist() == [
        dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 0, 0, 0, 500000), None,
    ]  # fmt: skip
    assert column_array([Decimal("1.5"), "2.25"], "decimal(10,2)").to_pylist() == [
        Decimal("1.50"),
        Decimal("2.25"),
    ]
