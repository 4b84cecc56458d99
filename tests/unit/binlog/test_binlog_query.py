"""QUERY_EVENT status variables and SQL text, from real QUERY events of the fixture binlogs.

No fixture server writes MariaDB's codes 130 (Q_GTID_FLAGS3, 10.8+ two-phase ALTER) or 131
(Q_CHARACTER_SET_COLLATIONS, 11.2+), nor an unknown code or non-UTF-8 SQL. Those cases take a
real event and change ONE byte of it (a status-variable code, or one byte of the SQL text), said
at each place; the checksum trailer is then stale, so such events are fed with
verify_checksum=False. Layouts: MariaDB sql/log_event.cc (Query_log_event::Query_log_event,
case Q_GTID_FLAGS3: flags(1), plus seq_no(8) when FL_COMMIT_ALTER_E1 | FL_ROLLBACK_ALTER_E1)
and sql/charset_collations.h (Charset_collation_map_st::to_binary: count(1), then per entry
charset id(2), collation id(2)).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from binlog_text import FIXTURES, VECTORS

from service.binlog import BinlogDecoder, DecodeOptions, QueryEvent, read_binlog_file
from service.binlog.query import parse_status_vars
from service.errors import TruncatedEvent

MARIADB_SETUP = FIXTURES / "mariadb-10.11" / "01-setup.000001"  # MariaDB 10.11, CRC32
VECTOR = VECTORS / "mysql-8" / "vector.binlog"  # MySQL 9.0.1, client charset latin1
JSON8 = VECTORS / "mysql-8" / "json.binlog.000001"  # MySQL 8.0.22, client charset utf8mb4


def query_raws(path: Path) -> list[tuple[int, bytes]]:
    return [(r.offset, bytes(r)) for r in read_binlog_file(path) if r[4] == 2]  # QUERY_EVENT


def raw_at(path: Path, offset: int) -> bytes:
    return dict(query_raws(path))[offset]


def status_block(raw: bytes) -> bytes:
    """The status variables of a QUERY event (13-byte post-header: ...status_vars_len(2))."""
    size = int.from_bytes(raw[19 + 11 : 19 + 13], "little")
    return raw[19 + 13 : 19 + 13 + size]


def flip(data: bytes, old: bytes, new: int) -> bytes:
    """Replace the single byte that starts the unique sequence `old` by `new`."""
    assert data.count(old) == 1, old
    at = data.index(old)
    return data[:at] + bytes([new]) + data[at + 1 :]


def decode_file_with(path: Path, offset: int, replacement: bytes) -> tuple[BinlogDecoder, list[QueryEvent]]:
    """Decode the whole file with the event at `offset` replaced (same length), checksums off."""
    decoder = BinlogDecoder(DecodeOptions(verify_checksum=False), file=path.name)
    queries: list[QueryEvent] = []
    for raw in read_binlog_file(path):
        data = replacement if raw.offset == offset else bytes(raw)
        assert len(data) == len(raw)
        for event in decoder.decode_events(data, raw.offset):
            if isinstance(event, QueryEvent):
                queries.append(event)
    return decoder, queries


def test_real_status_blocks_parse_completely() -> None:
    for path in (MARIADB_SETUP, VECTOR, JSON8):
        decoder = BinlogDecoder(file=path.name)
        for raw in read_binlog_file(path):
            for event in decoder.decode_events(raw):
                if isinstance(event, QueryEvent):
                    assert "unknown_code" not in event.status, (path.name, event.header.offset)
        assert decoder.stats.unknown_status_vars == 0


def test_unknown_code_keeps_the_rest_unparsed_and_is_counted() -> None:
    real = raw_at(MARIADB_SETUP, 519)  # CREATE TABLE all_types; status ends with Q_XID (129) = 11
    assert status_block(real).endswith(b"\x81\x0b" + bytes(7))
    mutated = flip(real, b"\x81\x0b" + bytes(7), 200)  # ONE byte: the Q_XID code 129 -> unknown 200
    decoder, queries = decode_file_with(MARIADB_SETUP, 519, mutated)
    event = next(q for q in queries if q.header.offset == 519)
    assert event.status["unknown_code"] == 200
    assert event.status["unparsed"] == b"\x0b" + bytes(7)  # the 8 bytes of the xid value
    assert event.status["charset"] == (45, 45, 8) and event.status["catalog"] == "std"  # before it
    assert "xid" not in event.status
    assert event.schema == "mt" and event.sql.startswith("CREATE TABLE all_types (")
    assert decoder.stats.unknown_status_vars == 1
    assert len(queries) == 5 and all("unknown_code" not in q.status for q in queries if q is not event)


def test_mariadb_character_set_collations_count_and_pairs() -> None:
    # MySQL 9.0.1 CREATE DATABASE: ... Q_UPDATED_DB_NAMES(12) = 01 "dtb\0", Q_DDL_XID(17) = 8, ...
    block = status_block(raw_at(VECTOR, 235))
    assert parse_status_vars(block)["updated_db_names"] == ("dtb",)
    # ONE byte: code 12 -> 131. Its count byte is then 1, and one (charset, collation) pair of
    # 2 + 2 bytes ("dt", "b\0") takes the rest of the old value, so parsing resumes at code 17.
    status = parse_status_vars(flip(block, b"\x0c\x01dtb\x00", 131))
    assert status["character_set_collations"] == ((int.from_bytes(b"dt", "little"), ord("b")),)
    assert status["ddl_xid"] == 8 and status["default_table_encryption"] == 0
    assert "unknown_code" not in status
    # MySQL 9.0.1 CREATE TABLE: ... Q_SQL_REQUIRE_PRIMARY_KEY(19) = 0 ends the block.
    block = status_block(raw_at(VECTOR, 433))
    assert block.endswith(b"\x13\x00")
    status = parse_status_vars(block[:-2] + b"\x83\x00")  # ONE byte: code 19 -> 131, count 0
    assert status["character_set_collations"] == () and "unknown_code" not in status


def test_mariadb_gtid_flags3_reads_a_seq_no_only_for_commit_or_rollback_alter() -> None:
    block = status_block(raw_at(VECTOR, 433))  # ... Q_DDL_XID(17) = 11, ..., 19 = 0
    status = parse_status_vars(block[:-2] + b"\x82\x00")  # ONE byte: code 19 -> 130, flags 0
    assert status["gtid_flags3"] == 0 and "start_alter_seq_no" not in status
    assert "unknown_code" not in status
    # ONE byte: code 17 -> 130. Its flags byte is then 0x0b (FL_ROLLBACK_ALTER_E1 set), so the
    # next 8 bytes are the START ALTER seq_no; the code after them (0xff) is unknown.
    status = parse_status_vars(flip(block, b"\x11\x0b", 130))
    assert status["gtid_flags3"] == 0x0B
    assert status["start_alter_seq_no"] == 0x12 << 56  # 7 zero bytes of the xid, then code 18
    assert status["unknown_code"] == 0xFF and status["unparsed"] == b"\x00\x13\x00"
    # MariaDB 10.11: Q_XID = 11 is the last variable; as code 130 its 0x0b flags ask for a seq_no
    # of 8 bytes where only 7 remain.
    maria = status_block(raw_at(MARIADB_SETUP, 519))
    with pytest.raises(TruncatedEvent):
        parse_status_vars(maria[:-9] + b"\x82" + maria[-8:])  # ONE byte: code 129 -> 130


@pytest.mark.parametrize(
    ("path", "offset", "old", "new", "expected"),
    [
        # client charset latin1 (8): the byte 0xE9 is "é"
        (VECTOR, 235, b"CREATE DATABASE dtb", b"CREATE DATABASE \xe9tb", "CREATE DATABASE \xe9tb CHARSET"),
        # client charset utf8mb4 (255): a lone 0xE9 is invalid UTF-8 and becomes U+FFFD
        (JSON8, 924, b"BEGIN", b"\xe9EGIN", "\ufffdEGIN"),
    ],
)
def test_sql_text_is_decoded_with_the_client_charset(
    path: Path, offset: int, old: bytes, new: bytes, expected: str
) -> None:
    real = raw_at(path, offset)
    assert real.count(old) == 1 and len(old) == len(new)
    mutated = real.replace(old, new)  # ONE byte of the SQL text -> 0xE9
    decoder, queries = decode_file_with(path, offset, mutated)
    event = next(q for q in queries if q.header.offset == offset)
    assert event.sql.startswith(expected)
    assert event.sql_bytes.startswith(new)  # the exact bytes are kept
    assert len(queries) == len(query_raws(path))  # the stream goes on past it
