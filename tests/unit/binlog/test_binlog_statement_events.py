"""07-statement-events: statement-context, LOAD DATA, XA and compressed-query events with real bytes.

The file was written by MariaDB 10.11 from the `statement-events` phase of
tests/fixtures/make_mariadb_binlogs.py (SQL in make_mariadb_binlogs.sql next to it). Every
event is checked twice: against what the SQL wrote, and against the text that
`mariadb-binlog -vv --base64-output=decode-rows` prints for the same event (matched by
end_log_pos). Rows events of this file are also compared value by value with mariadb-binlog in
test_binlog_vs_mariadb_binlog.py.
"""

from __future__ import annotations

import re
import struct
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import cache
from typing import TypeVar

from binlog_text import FIXTURES, mariadb_binlog_vv

from service.binlog import (
    AnnotateRowsEvent,
    AppendBlockEvent,
    BeginLoadQueryEvent,
    BinlogDecoder,
    DeleteFileEvent,
    Event,
    EventType,
    ExecuteLoadQueryEvent,
    GtidEvent,
    IntvarEvent,
    QueryEvent,
    RandEvent,
    RowsEvent,
    UserVarEvent,
    XaPrepareEvent,
    canonical,
    read_binlog_file,
)
from service.binlog.charsets import codec_for_collation
from service.binlog.decimal import decode_decimal

E = TypeVar("E", bound=Event)
PATH = FIXTURES / "mariadb-10.11" / "07-statement-events.000007"
LOAD_FILE = "".join(f"{i}\tline {i:05d} of the LOAD DATA file\n" for i in range(1, 401)).encode()
COLLATIONS = {45: "utf8mb4_general_ci", 8: "latin1_swedish_ci"}  # SHOW COLLATION
_HEADER = re.compile(
    r"^#\d{6} [ \d]\d:\d\d:\d\d server id \d+  end_log_pos (\d+) CRC32 0x[0-9a-f]{8} ?\t?(.*)$"
)


@cache
def events() -> tuple[Event, ...]:
    decoder = BinlogDecoder(file=PATH.name)
    out = tuple(ev for raw in read_binlog_file(PATH) for ev in decoder.decode_events(raw))
    assert decoder.stats.invalid_text_values == 0 and decoder.stats.unknown_status_vars == 0
    return out


def of(kind: type[E]) -> list[E]:
    return [ev for ev in events() if type(ev) is kind]


@cache
def mariadb_text() -> dict[int, tuple[str, list[str]]]:
    """end_log_pos -> (what follows the header on its line, the event's text lines)."""
    out = mariadb_binlog_vv(PATH).decode("utf-8")
    blocks: dict[int, tuple[str, list[str]]] = {}
    lines: list[str] = []
    for line in out.splitlines():
        if m := _HEADER.match(line):
            lines = []
            blocks[int(m.group(1))] = (m.group(2), lines)
        elif not line.startswith(("# at ", "/*!*/;", "SET TIMESTAMP=", "DELIMITER")):
            lines.append(line.removesuffix("/*!*/;"))
    return blocks


def text(ev: Event) -> tuple[str, list[str]]:
    return mariadb_text()[ev.header.log_pos]


def test_the_file_holds_every_event_type_of_the_phase() -> None:
    types = {raw[4] for raw in read_binlog_file(PATH)}
    wanted = {"INTVAR", "RAND", "USER_VAR", "BEGIN_LOAD_QUERY", "APPEND_BLOCK", "EXECUTE_LOAD_QUERY"}
    wanted |= {"DELETE_FILE", "XA_PREPARE", "MARIA_ANNOTATE_ROWS", "MARIA_QUERY_COMPRESSED"}
    assert {int(EventType[name]) for name in wanted} <= types
    assert len(mariadb_text()) == len(events())  # one text block per event, nothing unmatched


def test_intvar_insert_id_and_last_insert_id() -> None:
    got = [(ev.kind, ev.value) for ev in of(IntvarEvent)]
    # INSERT_ID (2) before each auto-increment insert of stmt_log; LAST_INSERT_ID (1) once
    assert got == [(2, 1), (1, 1), (2, 2), (2, 3), (2, 4), (2, 5)]
    for ev in of(IntvarEvent):
        name = {1: "LAST_INSERT_ID", 2: "INSERT_ID"}[ev.kind]
        assert text(ev) == ("Intvar", [f"SET {name}={ev.value}"])


def test_rand_seeds() -> None:
    (ev,) = of(RandEvent)
    assert 0 <= ev.seed1 < 2**30 and 0 <= ev.seed2 < 2**30  # my_rnd's modulus 0x3FFFFFFF
    assert text(ev) == ("Rand", [f"SET @@RAND_SEED1={ev.seed1}, @@RAND_SEED2={ev.seed2}"])
    following = events()[events().index(ev) + 1]
    assert isinstance(following, QueryEvent) and "RAND()" in following.sql


def _user_var_sql(ev: UserVarEvent) -> str:
    """What mariadb-binlog prints for the value (log_event_client.cc User_var_log_event::print)."""
    if ev.value is None:
        return "NULL"
    if ev.value_type == 0:  # STRING_RESULT
        charset = COLLATIONS[ev.charset].split("_", 1)[0]
        return f"_{charset} X'{ev.value.hex().upper()}' COLLATE `{COLLATIONS[ev.charset]}`"
    if ev.value_type == 1:  # REAL_RESULT
        return f"{struct.unpack('<d', ev.value)[0]:.14g}"
    if ev.value_type == 2:  # INT_RESULT
        return str(int.from_bytes(ev.value, "little", signed=not ev.unsigned))
    assert ev.value_type == 4  # DECIMAL_RESULT: precision, scale, binary decimal
    return str(decode_decimal(ev.value[2:], ev.value[0], ev.value[1]))


def test_user_vars_against_the_sql() -> None:
    got = {ev.name: ev for ev in of(UserVarEvent)}
    assert list(got) == ["s", "i", "u", "r", "d", "l", "nul"]  # in the order the INSERT reads them
    s, i, u, r, d, latin, nul = got.values()
    assert (s.value_type, s.charset, s.unsigned) == (0, 45, False)
    assert s.value is not None and s.value.decode(codec_for_collation(s.charset) or "") == "héllo wörld"
    assert (i.value_type, i.unsigned, i.value) == (2, False, (-42).to_bytes(8, "little", signed=True))
    assert (u.value_type, u.unsigned, u.value) == (2, True, b"\xff" * 8)
    assert (r.value_type, r.value) == (1, struct.pack("<d", 2.5))
    assert d.value_type == 4 and d.value is not None
    assert decode_decimal(d.value[2:], d.value[0], d.value[1]) == Decimal("12.345")
    assert (latin.value_type, latin.charset, latin.value) == (0, 8, "déjà".encode("latin1"))
    assert (nul.value, nul.value_type) == (None, 0)


def test_user_vars_against_mariadb_binlog() -> None:
    for ev in of(UserVarEvent):
        assert text(ev) == ("User_var", [f"SET @`{ev.name}`:={_user_var_sql(ev)}"]), ev.name


def test_load_data_blocks_rebuild_the_file() -> None:
    begin, _ = of(BeginLoadQueryEvent)
    appends = of(AppendBlockEvent)
    assert begin.file_id == 1 and len(appends) >= 2 and {a.file_id for a in appends} == {1}
    assert begin.data + b"".join(a.data for a in appends) == LOAD_FILE
    assert text(begin) == ("", [f"#Begin_load_query: file_id: 1  block_len: {len(begin.data)}"])
    for ev in appends:
        assert text(ev) == ("", [f"#Append_block: file_id: 1  block_len: {len(ev.data)}"])


def test_execute_load_query() -> None:
    (ev,) = of(ExecuteLoadQueryEvent)
    assert (ev.header.type_code, ev.file_id, ev.schema, ev.error_code) == (18, 1, "mt", 0)
    assert ev.dup_handling == 1  # LOAD_DUP_IGNORE: LOCAL implies IGNORE
    # start_pos/end_pos bracket the part a replica rewrites: " LOCAL INFILE '<file>' IGNORE INTO"
    fname = ev.sql_bytes[ev.start_pos : ev.end_pos]
    assert re.fullmatch(rb" LOCAL INFILE '/tmp/mariadb-fixtures-[^']+/files/load\.tsv' IGNORE INTO", fname)
    assert ev.sql.startswith("LOAD DATA LOCAL INFILE ") and " INTO TABLE `loaded` FIELDS " in ev.sql
    header, lines = text(ev)
    assert header.startswith("Execute_load_query\tthread_id=") and lines[-1] == "# file_id: 1 "
    # mariadb-binlog prints the text around the bracket with its own local file name
    printed = re.sub(r"'[^']*SQL_LOAD_MB-[^']+'", "'<f>'", "\n".join(lines[:-1]))
    q = ev.sql_bytes
    assert printed == (q[: ev.start_pos] + b" LOCAL INFILE '<f>' INTO" + q[ev.end_pos :]).decode()


def test_failed_load_data_writes_delete_file() -> None:
    _, begin = of(BeginLoadQueryEvent)
    (ev,) = of(DeleteFileEvent)
    assert (begin.file_id, begin.data, ev.file_id) == (2, b"1\tduplicate key\n", 2)
    assert events().index(ev) == events().index(begin) + 1
    assert text(ev) == ("", ["#Delete_file: file_id=2"])


def test_query_compressed() -> None:
    (ev,) = [e for e in of(QueryEvent) if e.compressed]
    assert ev.header.type_code == EventType.MARIA_QUERY_COMPRESSED
    assert ev.sql.startswith("INSERT INTO stmt_log (note) VALUES ('compressed query: this statement")
    assert ev.sql.endswith("compressed query, compressed query, compressed query.')")
    assert ev.header.event_size < len(ev.sql_bytes)  # the text was stored compressed
    assert (ev.schema, ev.error_code, ev.status["charset"]) == ("mt", 0, (45, 45, 8))
    header, lines = text(ev)
    assert header.startswith("Query_compressed\tthread_id=") and "\n".join(lines) == ev.sql
    assert not any(e.compressed for e in of(QueryEvent) if e is not ev)


def test_xa_prepare_and_its_gtids() -> None:
    (ev,) = of(XaPrepareEvent)
    assert (ev.one_phase, ev.format_id, ev.gtrid, ev.bqual) == (False, 7, b"xa-gtrid", b"xa-bqual")
    xid = f"X'{ev.gtrid.hex()}',X'{ev.bqual.hex()}',{ev.format_id}"
    assert text(ev) == (f"XID = {xid}", [f"XA PREPARE {xid}"])
    xa_gtids = [g for g in of(GtidEvent) if g.xid is not None]
    assert [(g.gtid, g.flags & 0xC0, g.xid) for g in xa_gtids] == [
        ("0-1-38", 0x40, b"\x07\x00\x00\x00xa-gtridxa-bqual"),  # FL_PREPARED_XA
        ("0-1-39", 0x80, b"\x07\x00\x00\x00xa-gtridxa-bqual"),  # FL_COMPLETED_XA
    ]
    commit = events()[events().index(xa_gtids[1]) + 1]
    assert isinstance(commit, QueryEvent) and commit.sql == f"XA COMMIT {xid}"
    # XA COMMIT ... ONE PHASE is written as an ordinary transaction: no second XA_PREPARE


def test_annotate_rows_precede_their_rows() -> None:
    annotations = of(AnnotateRowsEvent)
    assert len(annotations) == 6
    for ev in annotations:
        header, lines = text(ev)
        assert header == "Annotate_rows:"
        assert "\n".join(line.removeprefix("#Q> ") for line in lines if line.startswith("#Q> ")) == ev.query
        after = events()[events().index(ev) + 2]  # ANNOTATE_ROWS, TABLE_MAP, rows event
        assert isinstance(after, RowsEvent) and after.table.table in ev.query
    assert annotations[0].query == "INSERT INTO stmt_log (note) VALUES ('xa two-phase')"
    assert annotations[-1].query == "UPDATE frac SET u3 = 'ärger', tm2 = '-00:00:59.99' WHERE id = 1"


def _frac_rows() -> list[dict[str, object]]:
    return [c.after for ev in of(RowsEvent) if ev.table.table == "frac" for c in ev.changes if c.after]


def _td(text: str) -> timedelta:
    sign = -1 if text.startswith("-") else 1
    h, m, s = text.lstrip("-").split(":")
    return sign * timedelta(hours=int(h), minutes=int(m), seconds=float(s))


def test_frac_columns_metadata() -> None:
    (table,) = {ev.table for ev in of(RowsEvent) if ev.table.table == "frac"}
    cols = {c.name: c for c in table.columns}
    assert cols["u3"].charset == cols["c3"].charset == 33  # utf8mb3_general_ci
    assert cols["c3"].max_length == 12  # CHAR(4) CHARACTER SET utf8mb3: 3 bytes a character
    for fsp in range(1, 6):
        assert cols[f"dt{fsp}"].meta == cols[f"tm{fsp}"].meta == cols[f"ts{fsp}"].meta == fsp


def test_utf8mb3_and_fsp_1_to_5_values() -> None:
    row1, row2, *_ = _frac_rows()
    assert (row1["u3"], row1["c3"], row2["u3"], row2["c3"]) == ("ça va ☃ ü", "äöü€", "", "a")
    for fsp in range(1, 6):
        us = int("12345"[:fsp].ljust(6, "0"))
        assert row1[f"dt{fsp}"] == datetime(2024, 1, 2, 3, 4, 5, us)
        assert row1[f"tm{fsp}"] == timedelta(hours=12, minutes=34, seconds=56, microseconds=us)
        assert row1[f"ts{fsp}"] == datetime(2001, 2, 3, 4, 5, 6, us, tzinfo=UTC)
    assert [row2[f"dt{f}"] for f in range(1, 6)] == [
        datetime(1000, 1, 1, 0, 0, 0, 900000),
        datetime(9999, 12, 31, 23, 59, 59, 990000),
        datetime(1000, 1, 1, 0, 0, 0, 1000),
        datetime(9999, 12, 31, 23, 59, 59, 999900),
        datetime(1000, 1, 1, 0, 0, 0, 10),
    ]
    assert [canonical.value_to_json(row2[f"ts{f}"]) for f in range(1, 6)] == [
        "1970-01-01T00:00:01.900000Z",  # row-format.md: always 6 digits when not 0
        "2038-01-19T03:14:07.990000Z",
        "1970-01-01T00:00:01.001000Z",
        "2038-01-19T03:14:07.999900Z",
        "1970-01-01T00:00:01.000010Z",
    ]


def test_negative_time_every_fsp() -> None:
    """TIME2 with fsp 1-2 stores the fraction in one byte that borrows from the integer part
    when negative; fsp 3-4 in two bytes, fsp 5-6 in three."""
    rows = {row["id"]: row for row in _frac_rows()}
    wrote = {  # the SQL's values, per id, tm1..tm5
        2: ["-00:00:00.1", "-00:00:00.01", "-00:00:00.001", "-00:00:00.0001", "-00:00:00.00001"],
        3: ["-838:59:58.9", "-838:59:58.99", "-838:59:58.999", "-838:59:58.9999", "-838:59:58.99999"],
        4: ["-12:34:56.5", "-12:34:56.05", "-00:00:01.5", "-00:00:01.0001", "-01:00:00.50001"],
        5: ["-00:00:01.0", "-00:00:01.00", "838:59:58.999", "838:59:58.9999", "838:59:58.99999"],
    }
    for row_id, values in wrote.items():
        assert [rows[row_id][f"tm{f}"] for f in range(1, 6)] == [_td(v) for v in values], row_id
    assert canonical.value_to_json(rows[4]["tm2"]) == "-12:34:56.050000"
    update = [c for ev in of(RowsEvent) if ev.table.table == "frac" for c in ev.changes if c.before]
    (change,) = update
    assert change.before is not None and change.after is not None
    assert change.after["tm2"] == _td("-00:00:59.99") and change.after["u3"] == "ärger"
    assert change.before["tm2"] == _td("12:34:56.12")
