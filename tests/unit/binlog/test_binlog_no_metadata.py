"""binlog_row_metadata=NO_LOG: the TABLE_MAP says nothing of charsets, so binary and latin1 bytes
cannot be told from UTF-8. Without a schema the decoder renders them losslessly (str when valid
UTF-8, else the bytes; never U+FFFD); with the charsets a schema supplies, exactly.

Vector: tests/fixtures/binlog/mariadb-10.11/11-no-log-metadata.000011, written by MariaDB 10.11.19
(tests/fixtures/make_mariadb_binlogs.py, phase no-log-metadata; its SQL is in
make_mariadb_binlogs.sql next to it)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from binlog_text import FIXTURES
from typer.testing import CliRunner

from service.binlog import BinlogDecoder, DecodeOptions, RowsEvent, read_binlog_file
from service.binlog.charsets import BINARY_COLLATION, collation_for_charset
from service.cli import app
from service.transport.columns import SCHEMA_FORMAT, ColumnNames, _members

NO_LOG = FIXTURES / "mariadb-10.11" / "11-no-log-metadata.000011"
PNG = b"\x89PNG\r\n\x1a\n\xff\xfe"
# what information_schema.COLUMNS says of nolog.bin (DATA_TYPE, CHARACTER_SET_NAME)
SCHEMA: dict[str, Any] = {
    "format": SCHEMA_FORMAT,
    "tables": [
        {
            "schema": "nolog",
            "table": "bin",
            "columns": [
                {"name": "k", "data_type": "varbinary", "charset": None},
                {"name": "b", "data_type": "blob", "charset": None},
                {"name": "b4", "data_type": "binary", "charset": None},
                {"name": "l", "data_type": "varchar", "charset": "latin1"},
                {"name": "u", "data_type": "varchar", "charset": "utf8mb4"},
                {"name": "n", "data_type": "int", "charset": None},
            ],
        }
    ],
}


def _changes(options: DecodeOptions) -> list[tuple[str, Any, Any]]:
    decoder = BinlogDecoder(options)
    out = []
    for raw in read_binlog_file(NO_LOG):
        event = decoder.feed(raw)
        if isinstance(event, RowsEvent):
            out += [(c.op.value, c.before, c.after) for c in event.changes]
    assert decoder.stats.invalid_text_values == 0
    return out


def test_the_vector_has_no_charsets() -> None:
    decoder = BinlogDecoder()
    for raw in read_binlog_file(NO_LOG):
        event = decoder.feed(raw)
        if isinstance(event, RowsEvent):
            assert all(c.charset is None for c in event.table.columns)
            return
    raise AssertionError("no rows event")


def test_without_a_schema_text_is_rendered_losslessly() -> None:
    changes = _changes(DecodeOptions())
    first = changes[0][2]
    # invalid UTF-8 stays bytes; valid UTF-8 is a str (its bytes are str.encode("utf-8"))
    assert first == {"@1": b"\xff", "@2": PNG, "@3": "ab", "@4": b"\xf1andu\xfa", "@5": "ñandú ☃", "@6": 1}
    values = [v for _, b, a in changes for row in (b, a) if row for v in row.values()]
    assert not any(isinstance(v, str) and "\ufffd" in v for v in values)


def test_charsets_from_a_schema_decode_exactly() -> None:
    schema = ColumnNames.from_export(SCHEMA)
    changes = _changes(DecodeOptions(column_names=schema, column_charsets=schema.charsets))
    ff = {"k": b"\xff", "b": PNG, "b4": b"ab\x00\x00", "l": "ñanduú", "u": "ñandú ☃", "n": 1}
    fe = {"k": b"\xfe", "b": b"\x00\xff", "b4": b"\xde\xad\xbe\xef", "l": "plain", "u": "plain", "n": 2}
    abc = {"k": b"abc", "b": b"abc", "b4": b"abc\x00", "l": "abc", "u": "abc", "n": 3}
    assert changes == [
        ("insert", None, ff),
        ("insert", None, fe),
        ("insert", None, abc),
        ("update", ff, {**ff, "b": b"\xc3(", "l": "éà", "n": 10}),
        ("delete", fe, None),
    ]


def test_a_schema_that_is_not_the_table_maps_is_not_applied() -> None:
    doc = orjson.loads(orjson.dumps(SCHEMA))
    doc["tables"][0]["columns"].pop()  # one column fewer: an older or newer definition
    schema = ColumnNames.from_export(doc)
    changes = _changes(DecodeOptions(column_names=schema, column_charsets=schema.charsets))
    assert changes[0][2]["@1"] == b"\xff"  # positional, lossless: never another column's charset
    doc = orjson.loads(orjson.dumps(SCHEMA))
    doc["tables"][0]["columns"][1]["data_type"] = "int"  # a text column that is not text now
    schema = ColumnNames.from_export(doc)
    first = _changes(DecodeOptions(column_names=schema, column_charsets=schema.charsets))[0][2]
    assert first["@3"] == "ab"  # neither names nor charsets applied (the mirror skips such rows)


def test_charset_names_map_to_decodable_collations() -> None:
    assert collation_for_charset("binary") == BINARY_COLLATION
    assert collation_for_charset("LATIN1") == 8
    assert collation_for_charset("utf8mb4") == 45
    assert collation_for_charset("armscii8") is None  # no codec: refused by the mirror
    assert collation_for_charset(None) is None


def test_decode_cli_with_and_without_schema(tmp_path: Any) -> None:
    path = tmp_path / "schema.json"
    path.write_bytes(orjson.dumps(SCHEMA))
    runner = CliRunner()
    plain = runner.invoke(app, ["decode", str(NO_LOG)])
    assert plain.exit_code == 0, plain.output
    first = orjson.loads(plain.stdout.splitlines()[0])["after"]
    assert first["@2"] == "iVBORw0KGgr//g==" and first["@5"] == "ñandú ☃"  # base64 of the bytes
    exact = runner.invoke(app, ["decode", "--schema", str(path), str(NO_LOG)])
    assert exact.exit_code == 0, exact.output
    first = orjson.loads(exact.stdout.splitlines()[0])["after"]
    assert first == {
        "k": "/w==", "b": "iVBORw0KGgr//g==", "b4": "YWIAAA==", "l": "ñanduú", "u": "ñandú ☃", "n": 1
    }  # fmt: skip
    path.write_text('{"format": "other"}')
    bad = runner.invoke(app, ["decode", "--schema", str(path), str(NO_LOG)])
    assert bad.exit_code == 1 and "not a schema file" in bad.output


@pytest.mark.parametrize("doc", [[], {"format": SCHEMA_FORMAT, "tables": [{"schema": "a"}]}])
def test_malformed_schema_files_are_value_errors(doc: Any) -> None:
    with pytest.raises(ValueError):
        ColumnNames.from_export(doc)


@pytest.mark.parametrize(
    ("column_type", "members"),
    [
        ("enum('x','it''s','back\\\\slash','ñ','')", ("x", "it's", "back\\slash", "ñ", "")),
        ("set('p','q r')", ("p", "q r")),
        ("enum('a,b')", ("a,b",)),
        ("int(11)", None),
        ("enum('open", None),
    ],
)
def test_enum_and_set_members_from_column_type(column_type: str, members: tuple[str, ...] | None) -> None:
    """information_schema.COLUMNS.COLUMN_TYPE as MariaDB 10.11 prints it (a quote and a backslash
    inside a value are doubled)."""
    assert _members(column_type) == members


def test_members_travel_in_the_schema_file() -> None:
    doc = orjson.loads(orjson.dumps(SCHEMA))
    doc["tables"][0]["columns"].append(
        {"name": "e", "data_type": "enum", "charset": "utf8mb4", "members": ["a"]}
    )
    assert ColumnNames.from_export(doc).export() == doc
