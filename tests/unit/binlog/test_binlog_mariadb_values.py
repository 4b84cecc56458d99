"""MariaDB 10.11 fixtures against the values make_mariadb_binlogs.py inserted."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from binlog_text import FIXTURES

from service.binlog import (
    BinlogCheckpointEvent,
    BinlogDecoder,
    ColumnType,
    DecodeOptions,
    Event,
    Geometry,
    GtidEvent,
    GtidListEvent,
    Op,
    RowChange,
    RowsEvent,
    TableSchema,
    canonical,
    read_binlog_file,
)

DIR = FIXTURES / "mariadb-10.11"


def events(prefix: str, options: DecodeOptions = DecodeOptions()) -> list[Event]:
    path = next(DIR.glob(f"{prefix}*"))
    decoder = BinlogDecoder(options, file=path.name)
    return [ev for raw in read_binlog_file(path) for ev in decoder.decode_events(raw)]


def changes(prefix: str, options: DecodeOptions = DecodeOptions()) -> list[RowChange]:
    return [c for ev in events(prefix, options) if isinstance(ev, RowsEvent) for c in ev.changes]


def test_extremes_row() -> None:
    row1 = changes("02")[0].after
    assert row1 is not None
    assert (row1["t"], row1["tu"], row1["s"], row1["su"]) == (-128, 255, -32768, 65535)
    assert (row1["m"], row1["mu"], row1["i"], row1["iu"]) == (-8388608, 16777215, -(2**31), 2**32 - 1)
    assert (row1["b"], row1["bu"]) == (-(2**63), 2**64 - 1)
    assert row1["f"] == -3.40282e38 and row1["d"] == -1.7976931348623157e308
    assert row1["dec1"] == Decimal("-99999999.99")
    assert row1["dec2"] == Decimal("-99999999999999999999999999999999999.999999999999999999999999999999")
    assert row1["dec3"] == Decimal("-99999999999999999999") and row1["dec4"] == Decimal("-0.99999")
    assert row1["y"] == 1901 and row1["dt"] == date(1000, 1, 1)
    assert row1["tm"] == -timedelta(hours=838, minutes=59, seconds=59)
    assert row1["tm3"] == -timedelta(hours=838, minutes=59, seconds=58, milliseconds=999)
    assert row1["tm6"] == -timedelta(seconds=1, microseconds=1)
    assert canonical.value_to_json(row1["tm6"]) == "-00:00:01.000001"
    assert row1["dtm2"] == datetime(1000, 1, 1, 0, 0, 0, 10000)
    assert row1["ts"] == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert canonical.value_to_json(row1["ts6"]) == "1970-01-01T00:00:01.000001Z"
    assert row1["ch255"] == "é" * 255 and row1["bin"] == b"ab\x00\x00\x00\x00\x00\x00"
    assert row1["latin"] == "café ?"  # U+0080 is not latin1: the server stored '?'
    assert row1["e"] == "a" and row1["st"] == "" and row1["b64"] == 0
    assert row1["g"] == Geometry(4326, bytes.fromhex("0101000000") + bytes(16))
    assert canonical.value_to_json(row1["g"])["srid"] == 4326


def test_second_row_and_nulls() -> None:
    rows = changes("02")
    row2, row3 = rows[1].after, rows[2].after
    assert row2 is not None and row3 is not None
    assert row2["tm6"] == timedelta(hours=838, minutes=59, seconds=59)
    assert row2["dtm6"] == datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert row2["ts6"] == datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)
    assert row2["vbin"] == b"\x00\xff\x00" and row2["latin"] == "Zürich"
    assert row2["txt"] == "text \n with 'quotes' and \\ backslash" and row2["mtxt"] == "medium 🐬 emoji"
    assert row2["bl"] == b"\xde\xad\xbe\xef\x00"
    assert (row2["e"], row2["st"], row2["b1"], row2["b13"], row2["b64"]) == ("c", "x,y,z", 1, 8191, 2**64 - 1)
    assert row2["j"] == '{"a": [1, 2.5, "x", null, true], "b": {"c": "d"}}'  # MariaDB JSON is LONGTEXT
    # UUID / INET6 are 16-byte binary strings; the trailing zero byte the binlog drops is restored
    assert row2["u"] == bytes.fromhex("123e4567e89b12d3a456426614174000")
    assert row2["ip"] == bytes.fromhex("20010db8000000000000ff0000428329")
    assert all(v is None for k, v in row3.items() if k != "id")


def test_zero_and_partial_dates() -> None:
    rows = [
        c.after for c in changes("02") if c.table == "all_types" and c.after and c.after["id"] in (4, 5, 6)
    ]
    r4, r5, r6 = rows
    assert (r4["dt"], r4["dtm"], r4["y"]) == ("0000-00-00", "0000-00-00 00:00:00", 0)
    assert r4["dtm6"] == "2020-00-15 10:11:12.000500"
    assert r5["dt"] == "2020-02-00" and r5["f"] == 1.1 and r5["d"] == 0.1
    assert r6["dt"] == date(2024, 2, 29) and r6["tm"] == -timedelta(hours=12, minutes=34, seconds=56)
    assert canonical.row_change_to_dict(changes("02")[3])["after"]["dt"] == "0000-00-00"


def test_updates_deletes_big_enum_and_wide_table() -> None:
    rows = changes("02")
    updates = [r for r in rows if r.op == Op.UPDATE and r.table == "all_types"]
    assert [u.after["vc"] for u in updates if u.after] == ["updated-2", "updated-3"]
    assert updates[0].gtid == updates[1].gtid and updates[0].gtid is not None
    assert [r.before["id"] for r in rows if r.op == Op.DELETE and r.before] == [6]
    big = [r.after for r in rows if r.table == "big_enum"]
    assert big == [
        {"id": 1, "e": "e1", "s": "s1"},
        {"id": 2, "e": "e300", "s": "s1,s64"},
        {"id": 3, "e": "e256", "s": ""},
        {"id": 4, "e": None, "s": None},
    ]
    wide = [r for r in rows if r.table == "wide"]
    assert len(wide[0].after or {}) == 300 and (wide[1].after or {})["c300"] == 300
    assert wide[2].before and wide[2].after and wide[2].after["c2"] == 2 and wide[2].before["c2"] is None


def test_minimal_and_noblob_images_omit_absent_columns() -> None:
    rows = changes("03")
    assert rows[0].before == {"id": 1} and rows[0].after == {"i": 42, "vc": "minimal"}
    assert rows[1].op == Op.DELETE and rows[1].before == {"id": 5}
    assert rows[2].after == {"id": 7, "i": 7}
    noblob = rows[3].after
    assert noblob is not None and "txt" not in noblob and "bl" not in noblob and noblob["i"] == 43


def test_compressed_rows_events() -> None:
    evs = [e for e in events("04") if isinstance(e, RowsEvent)]
    assert all(e.compressed for e in evs)
    rows = [c for e in evs for c in e.changes]
    assert rows[0].after == {"id": 1, "payload": b"compress me " * 100, "note": "compressed"}
    assert rows[1].after and rows[1].after["payload"] == b"and again " * 100
    assert rows[2].after and rows[2].after["vc"] == "c" * 290 and rows[2].after["txt"] == "t" * 1000
    assert rows[3].op == Op.DELETE


def test_big_row() -> None:
    (row,) = changes("05")
    assert row.after is not None and row.after["payload"] == bytes.fromhex("0123456789ABCDEF") * (
        2 * 1024 * 1024 // 8
    )


def test_minimal_metadata_names_and_callback() -> None:
    rows = changes("06")
    assert rows[0].after == {"@1": 3, "@2": b"minimal-metadata", "@3": "no names"}
    seen: list[TableSchema] = []

    def names(table: TableSchema) -> list[str] | None:
        seen.append(table)
        return ["id", "payload", "note"] if table.table == "blobs" else None

    rows = changes("06", DecodeOptions(column_names=names))
    assert rows[0].after == {"id": 3, "payload": b"minimal-metadata", "note": "no names"}
    assert "@1" in (rows[1].after or {})  # callback returned None: positional names
    assert {t.table for t in seen} == {"blobs", "all_types"}


def test_mariadb_control_events() -> None:
    evs = events("02")
    gtids = [e for e in evs if isinstance(e, GtidEvent)]
    assert gtids[0].gtid == "0-1-6" and gtids[0].domain_id == 0 and gtids[0].seq_no == 6
    assert any(isinstance(e, GtidListEvent) for e in evs)
    assert any(isinstance(e, BinlogCheckpointEvent) and e.file.startswith("mariadb-bin") for e in evs)


def test_charset_metadata_present() -> None:
    table = next(e.table for e in events("02") if isinstance(e, RowsEvent) and e.table.table == "all_types")
    cols = {c.name: c for c in table.columns}
    assert cols["latin"].charset == 8 and cols["bl"].charset == 63 and cols["vc"].charset == 45
    assert cols["e"].type == ColumnType.ENUM and cols["e"].enum_values == ("a", "b", "c")
    assert cols["tu"].unsigned and not cols["t"].unsigned and table.primary_key == (0,)


def test_pre_5_6_4_temporal_formats() -> None:
    """mysql56_temporal_format=OFF: DATETIME (12), TIME (11) and TIMESTAMP (7) as MySQL 5.5 logs
    them, with the values make_mariadb_binlogs.py inserted (zero and partial dates kept as text)."""
    evs = events("08")
    table = next(ev.table for ev in evs if isinstance(ev, RowsEvent))
    assert [c.type for c in table.columns][1:4] == [
        ColumnType.DATETIME,
        ColumnType.TIME,
        ColumnType.TIMESTAMP,
    ]
    rows = {c.after["id"]: c.after for c in changes("08") if c.op is Op.INSERT and c.after}
    assert rows[1] == {
        "id": 1,
        "d": datetime(2024, 2, 29, 23, 59, 58),
        "t": -timedelta(hours=838, minutes=59, seconds=59),
        "ts": datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC),
        "dt": date(2024, 2, 29),
    }
    assert (rows[2]["d"], rows[2]["t"], rows[2]["dt"]) == (
        "0000-00-00 00:00:00",
        timedelta(hours=838, minutes=59, seconds=59),
        "0000-00-00",
    )
    assert rows[2]["ts"] == datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)
    assert (rows[5]["d"], rows[5]["t"], rows[5]["dt"]) == (
        "2024-00-00 00:00:00",
        -timedelta(seconds=1),
        "2024-05-00",
    )
    assert rows[6]["t"] == -timedelta(hours=1, minutes=2, seconds=3) and rows[4]["ts"] is None
    assert canonical.value_to_json(rows[1]["t"]) == "-838:59:59"


def test_utc_datetime_equals_fromtimestamp_over_the_timestamp_range() -> None:
    """TIMESTAMP's integer-only conversion agrees with datetime.fromtimestamp(sec, UTC) on
    every day from 1970 to 2106 (the 4-byte range), leap days and the last second included."""
    from service.binlog.temporal import utc_datetime

    seconds = [*range(0, 2**32, 86_400 - 1), 951_782_399, 951_782_400, 951_868_800, 2**31 - 1, 2**32 - 1]
    for sec in seconds:
        assert utc_datetime(sec, 7) == datetime.fromtimestamp(sec, UTC).replace(microsecond=7), sec
