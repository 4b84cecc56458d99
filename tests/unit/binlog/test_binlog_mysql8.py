"""MySQL 8.x/9.x vectors: values from documented layouts and what the statements evidently hold.

Source of the vectors (tests/fixtures/binlog/vectors/mysql-8/, see the README there): binlog files
written by real MySQL 8.0.2-9.6.0 servers, from the test data of the open-source
rust_mysql_common project (https://github.com/blackbeam/rust_mysql_common, MIT/Apache-2.0),
directory test-data/binlogs/.
"""

from __future__ import annotations

import zlib
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from binlog_text import VECTORS

from service.binlog import (
    JSON_NULL,
    BinlogDecoder,
    ColumnType,
    Event,
    EventType,
    GtidEvent,
    JsonDiff,
    JsonDiffOp,
    JsonPartial,
    Op,
    PreviousGtidsEvent,
    RowChange,
    RowsEvent,
    TableMapEvent,
    TransactionPayloadEvent,
    canonical,
    read_binlog_file,
)
from service.binlog.jsonb import decode_json
from service.checkpoint import MysqlGtidSet
from service.transport.stream import encode_gtid_set

M8 = VECTORS / "mysql-8"


def events(name: str) -> list[Event]:
    decoder = BinlogDecoder(file=name)
    return [ev for raw in read_binlog_file(M8 / name) for ev in decoder.decode_events(raw)]


def changes(name: str) -> list[RowChange]:
    return [c for ev in events(name) if isinstance(ev, RowsEvent) for c in ev.changes]


def test_json_documents_and_partial_updates() -> None:
    rows = changes("json.binlog.000001")
    assert rows[0].after == {
        "@1": 1,
        "@2": {"age": 24, "data": "xxxxxxxxxx", "name": "Joe"},
        "@3": "Joe",
        "@4": 24,
    }
    assert [r.after["@1"] for r in rows[:6] if r.after] == [1, 2, 3, 4, 5, 6]
    updates = [r for r in rows if r.op == Op.UPDATE]
    assert updates[0].before and updates[0].before["@2"] == {"age": 24, "data": "xxxxxxxxxx", "name": "Joe"}
    assert updates[0].after and updates[0].after["@2"]["age"] == 25
    partial = [ev for ev in events("json.binlog.000001") if isinstance(ev, RowsEvent) and ev.partial]
    assert len(partial) == 1 and partial[0].header.type_code == 39
    first = partial[0].changes[0]
    assert first.before == {"@1": 1}  # minimal before image: the primary key only
    assert first.after is not None
    diff = first.after["@2"]
    assert isinstance(diff, JsonPartial)
    assert [(d.op, d.path, d.value) for d in diff.diffs] == [(JsonDiffOp.REPLACE, "$.age", 26)]
    assert canonical.value_to_json(diff) == {"json_diffs": [{"op": "replace", "path": "$.age", "value": 26}]}
    assert [c.after["@4"] for c in partial[0].changes if c.after] == [26, 34, 42, 26, 34, 42]


def test_json_opaque_values() -> None:
    docs = [c.after["a"] for c in changes("json-opaque.binlog") if c.after]
    assert docs[1] == {"b": __import__("datetime").date(2012, 3, 18)}
    assert canonical.value_to_json(docs[2]) == {"c": "2012-03-18 11:30:45"}
    assert docs[3] == {"c": timedelta(hours=87, minutes=31, seconds=46, microseconds=654321)}
    assert docs[4] == {"d": Decimal("123.456")}
    assert canonical.value_to_json(docs[4]) == {"d": 123.456}
    assert docs[6] == {"e": [0, 1, True, False]}
    assert docs[7] == {"e": None}
    assert canonical.value_to_json(docs[0]) == {"a": "base64:type15:VQ=="}


def _json_column_from_canonical(v: Any) -> Any:
    """The reader's rule of docs/row-format.md ("JSON null and SQL NULL"), as a consumer applies it."""
    if v is None:
        return None  # SQL NULL
    if isinstance(v, dict) and len(v) == 1 and "json" in v:
        return JSON_NULL if v["json"] is None else v["json"]
    return v


def test_json_null_is_distinct_from_sql_null_in_the_canonical_form() -> None:
    # No vector holds a whole-column JSON null, so take the server's own encoding of the literal:
    # the last row of json-opaque.binlog is the document {"e": null}; its value entry (type 0x04
    # LITERAL, inlined value 0x0000) is exactly a binary JSON document holding null.
    raw = [r for r in read_binlog_file(M8 / "json-opaque.binlog") if r[4] == EventType.WRITE_ROWS][-1]
    doc = bytes(raw[-4 - 13 : -4])  # the 13-byte document before the CRC32 trailer
    assert decode_json(doc) == {"e": None}
    json_null = decode_json(doc[9:12])
    assert json_null is JSON_NULL
    assert canonical.value_to_json(json_null) == {"json": None}
    assert canonical.value_to_json(None) is None
    assert canonical.row_to_json({"a": json_null}) != canonical.row_to_json({"a": None})
    assert canonical.value_to_json({"e": None}) == {"e": None}  # a null inside a document stays null
    # Lossless: real documents, the reserved one-key shapes, JSON null and SQL NULL all come back.
    plain = [
        v for c in changes("json.binlog.000001") if c.after for v in c.after.values() if isinstance(v, dict)
    ]
    reserved = [{"json": None}, {"json": {"json": 1}}, {"json_diffs": []}, {"json": 1, "x": 2}, ["json"]]
    assert len(plain) > 5
    for value in [*plain, *reserved, json_null, None]:
        back = _json_column_from_canonical(orjson.loads(orjson.dumps(canonical.value_to_json(value))))
        assert back is value if value is None or value is JSON_NULL else back == value
    assert canonical.value_to_json({"json": 1}) == {"json": {"json": 1}}
    assert canonical.value_to_json({"json": 1, "x": 2}) == {"json": 1, "x": 2}
    # A partial update's diff value is a document: a JSON null there is plain null.
    diff = JsonPartial((JsonDiff(JsonDiffOp.REPLACE, "$.a", json_null),))
    assert canonical.value_to_json(diff) == {"json_diffs": [{"op": "replace", "path": "$.a", "value": None}]}


def test_vector_columns() -> None:
    maps = [ev.table for ev in events("vector.binlog") if isinstance(ev, TableMapEvent)]
    bar = maps[1]
    assert [c.type for c in bar.columns] == [
        ColumnType.LONGLONG,
        ColumnType.VECTOR,
        ColumnType.BLOB,
        ColumnType.VECTOR,
    ]
    assert [c.vector_dimension for c in bar.columns] == [None, 2, None, 4]
    assert bar.columns[2].charset == 255 and bar.primary_key == (0,)
    rows = changes("vector.binlog")
    assert rows[0].after == {"id": 1, "vector_column": (1.1, 2.2, 3.3)}
    assert rows[3].after == {
        "id": 2,
        "vector_column": (1.01, -1.01),
        "foo": "bar",
        "vector_column2": (42.0, 43.0, 44.0, 45.0),
    }
    assert canonical.row_change_to_dict(rows[0])["after"] == {"id": 1, "vector_column": [1.1, 2.2, 3.3]}
    assert rows[-2].op == Op.DELETE


def test_transaction_payload_is_decoded_as_if_in_stream() -> None:
    evs = events("transaction_compression.000001")
    payload = [e for e in evs if isinstance(e, TransactionPayloadEvent)]
    assert len(payload) == 1 and payload[0].compression == 0
    rows = changes("transaction_compression.000001")
    assert [(r.schema, r.table, r.after) for r in rows] == [("test", "tb1", {"@1": 1})]
    start = payload[0].header.offset
    assert rows[0].position.start == start and rows[0].position.end == start + payload[0].header.event_size


def test_tagged_gtid_and_previous_gtids() -> None:
    evs = events("binlog_transaction_with_GTID_TAG.000001")
    prev = next(e for e in evs if isinstance(e, PreviousGtidsEvent))
    assert prev.gtid_set == (
        "55778904-0299-11f1-b1b8-4ef0c4956feb:1-13,55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:1-2"
    )
    gtid = next(e for e in evs if isinstance(e, GtidEvent))
    assert gtid.gtid == "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3" and gtid.tag == "mytag"
    assert gtid.transaction_length == 296 and gtid.immediate_commit_ts == 1770368687207196
    rows = changes("binlog_transaction_with_GTID_TAG.000001")
    assert rows[0].after == {"@1": 3, "@2": 100, "@3": Decimal("250.00")}
    assert rows[0].gtid == gtid.gtid
    untagged = events("binlog_transaction_previous_GTID_no_tag.000001")
    assert any(isinstance(e, PreviousGtidsEvent) and e.gtid_set.endswith(":1-2") for e in untagged)


def test_enum_set_char_and_untagged_gtid() -> None:
    evs = events("mysql-enum-string-set.000001")
    table = next(e.table for e in evs if isinstance(e, TableMapEvent))
    assert [c.name for c in table.columns] == ["f1", "f2", "f3", "f4", "f5"]
    assert table.columns[2].enum_values == ("var1", "variant2", "foo")
    assert table.columns[3].type == ColumnType.SET
    rows = changes("mysql-enum-string-set.000001")
    upd = rows[1]
    assert upd.after is not None and upd.after["f3"] == "variant2" and upd.after["f4"] == "two,four"
    assert upd.gtid == "93e95066-a2f4-11ec-9b69-9657f0ae95e2:4"
    assert rows[2].op == Op.DELETE


def test_bit_invisible_minimal_metadata_and_time() -> None:
    assert changes("mysql_type_bit.000001")[0].after == {"a": 4, "b": "foo", "c": 32}
    inv = changes("binlog-invisible-columns.000001")
    assert inv[0].after == {"f1": 1, "f2": 2, "f3": -3, "f4": "4", "f5": b"\x05", "f6": 6000000000}
    table = next(e.table for e in events("binlog-invisible-columns.000001") if isinstance(e, TableMapEvent))
    assert [c.visible for c in table.columns] == [False, False, True, True, True, False]  # f6 INVISIBLE
    assert changes("minimal_row_metadata.000001")[0].after == {"@1": 1, "@3": "a", "@5": 3230202323}
    assert changes("time_issue.000001")[0].after == {"@1": -timedelta(hours=507, minutes=48, seconds=27)}
    assert canonical.value_to_json(changes("time_issue.000001")[0].after["@1"]) == "-507:48:27"
    hidden = changes("rpl_unfiltered_hidden_gcol.000001")
    assert hidden[0].after == {"@1": 1, "@3": "1"}  # the hidden functional-index column is absent


def test_fde_only_file(tmp_path: Path) -> None:
    evs = events("master-bin.000001")
    assert [e.header.type_name for e in evs] == ["FORMAT_DESCRIPTION", "PREVIOUS_GTIDS", "STOP"]


@pytest.mark.parametrize(
    "name", ["binlog_transaction_with_GTID_TAG.000001", "binlog_transaction_previous_GTID_no_tag.000001"]
)
def test_dump_gtid_encoding_matches_the_servers(name: str) -> None:
    """COM_BINLOG_DUMP_GTID carries a GTID set in Gtid_set::encode's form, the same bytes as a
    PREVIOUS_GTIDS body: re-encoding the set a real MySQL 8.4 server wrote gives its bytes back
    (tagged and untagged formats). Vectors: rust_mysql_common (see the vectors' README)."""
    raw = next(r for r in read_binlog_file(M8 / name) if r[4] == EventType.PREVIOUS_GTIDS)
    prev = next(e for e in events(name) if isinstance(e, PreviousGtidsEvent))
    body = bytes(raw[19 : len(raw) - 4])  # header, CRC32
    assert encode_gtid_set(MysqlGtidSet.parse(prev.gtid_set)) == body


def _with_extra(raw: bytes, extra: bytes) -> bytes:
    """A real v2 rows event with `extra` as its extra row info (MySQL writes it for partitioned
    and NDB tables; no vector here has one): the 2-byte extra_len after table_id:6 + flags:2 grows,
    then event_size and the CRC32 follow."""
    at = 19 + 8
    assert int.from_bytes(raw[at : at + 2], "little") == 2  # written without extra info
    body = raw[:at] + (2 + len(extra)).to_bytes(2, "little") + extra + raw[at + 2 : -4]
    body = body[:9] + len(body + b"1234").to_bytes(4, "little") + body[13:]
    return body + zlib.crc32(body).to_bytes(4, "little")


def test_v2_extra_row_info_partition_and_ndb() -> None:
    """Layout from libbinlogevents/src/rows_event.cpp (Rows_event::Rows_event): typecode 1 (PART)
    carries partition_id:2, plus source_partition_id:2 for updates; typecode 0 (NDB) a block
    length:1 format:1 data; an unknown typecode ends the parse."""
    raws = [bytes(r) for r in read_binlog_file(M8 / "mysql-enum-string-set.000001")]
    first = BinlogDecoder()
    plain = [ev for raw in raws for ev in first.decode_events(raw)]
    patched: list[bytes] = []
    for raw in raws:
        if raw[4] in (EventType.WRITE_ROWS, EventType.DELETE_ROWS):
            raw = _with_extra(raw, b"\x01\x07\x00")
        elif raw[4] == EventType.UPDATE_ROWS:
            raw = _with_extra(raw, b"\x00\x04\x01\xaa\xbb\x01\x05\x00\x03\x00\x09")  # NDB, PART, unknown
        patched.append(raw)
    decoder = BinlogDecoder()
    got = [ev for raw in patched for ev in decoder.decode_events(raw)]
    rows = [(a, b) for a, b in zip(plain, got, strict=True) if isinstance(b, RowsEvent)]
    assert [b.op for _, b in rows] == [Op.INSERT, Op.UPDATE, Op.DELETE]
    for before, after in rows:
        assert [(c.before, c.after) for c in after.changes] == [(c.before, c.after) for c in before.changes]
        assert before.partition_id is None
    (_, w), (_, u), (_, d) = rows
    assert (w.partition_id, w.source_partition_id, w.ndb_info) == (7, None, None)
    assert (u.partition_id, u.source_partition_id, u.ndb_info) == (5, 3, b"\x04\x01\xaa\xbb")
    assert (d.partition_id, d.source_partition_id) == (7, None)
