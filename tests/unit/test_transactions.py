"""TransactionAssembler + CheckpointTracker over real binlogs (decoded, never hand-built bytes);
the DDL parser and TableFilter."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from service.binlog import BinlogDecoder, read_binlog_file
from service.binlog.events import Event, QueryEvent, RotateEvent, XidEvent
from service.checkpoint import BinlogPosition, CheckpointTracker, MariadbGtidPos, parse_gtid_set
from service.transactions import (
    Ddl,
    TableFilter,
    Transaction,
    TransactionAssembler,
    is_rename_only,
    op_counts,
    parse_ddl,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "binlog" / "mariadb-10.11"
SETUP = FIXTURES / "01-setup.000001"
FULL = FIXTURES / "02-full.000002"


def events(path: Path, start: int = 4) -> list[Event]:
    """Decoded events of `path` from offset `start`, after the file's FDE (as a dump sends them),
    through a fresh decoder."""
    decoder = BinlogDecoder(file=path.name)
    raws = [raw for i, raw in enumerate(read_binlog_file(path)) if i == 0 or raw.offset >= start]
    return [ev for raw in raws if (ev := decoder.feed(raw)) is not None]


def assemble(
    evs: list[Event], path: Path, flt: TableFilter | None = None, gtids: str = ""
) -> list[Transaction]:
    """Transactions of `evs`; `gtids`: the executed set at the start (a resumed stream knows it)."""
    tracker = CheckpointTracker(BinlogPosition(path.name, 4), parse_gtid_set(gtids) if gtids else None)
    asm = TransactionAssembler(tracker, flt or TableFilter())
    return [t for ev in evs if (t := asm.feed(ev)) is not None]


@pytest.mark.parametrize(
    ("name", "n_txns", "n_changes", "n_ddl"),
    [
        ("01-setup.000001", 5, 0, 5),
        ("02-full.000002", 9, 16, 0),
        ("03-minimal-noblob.000003", 5, 5, 0),
        ("04-compressed.000004", 4, 4, 0),
        ("06-minimal-metadata.000006", 2, 2, 0),
    ],
)
def test_units_and_boundaries(name: str, n_txns: int, n_changes: int, n_ddl: int) -> None:
    path = FIXTURES / name
    evs = events(path)
    *txns, rotation = assemble(evs, path)
    # the file ends with a ROTATE: the next file's start is a boundary of its own, with no changes
    rotate = next(ev for ev in evs if isinstance(ev, RotateEvent))
    assert rotation.end.position == BinlogPosition(rotate.next_file, rotate.position)
    assert (rotation.changes, rotation.ddl, rotation.gtid) == ((), (), None)
    assert rotation.end.gtid_set == txns[-1].end.gtid_set
    assert (len(txns), sum(len(t.changes) for t in txns), sum(len(t.ddl) for t in txns)) == (
        n_txns,
        n_changes,
        n_ddl,
    )
    commit_ends = [
        ev.header.log_pos
        for ev in evs
        if isinstance(ev, XidEvent) or (isinstance(ev, QueryEvent) and ev.sql not in ("BEGIN",))
    ]
    assert [t.end.position.pos for t in txns] == commit_ends  # only commit boundaries
    gtids = [parse_gtid_set(t.end.gtid_set) for t in txns]
    assert all(isinstance(g, MariadbGtidPos) for g in gtids)
    assert all(a <= b and a != b for a, b in zip(gtids, gtids[1:], strict=False))
    for t in txns:
        assert t.gtid is not None and t.end.gtid_set.endswith(t.gtid)
        assert all(c.gtid == t.gtid for c in t.changes)
        assert t.ts == t.end.ts > 0


def test_op_counts_count_each_tables_changes_as_a_loop_over_rows_would() -> None:
    changes = tuple(c for t in assemble(events(FULL), FULL) for c in t.changes)
    changes += changes[::-1]  # runs of one table, broken and resumed
    expected: dict[tuple[str, str], list[int]] = {}
    for c in changes:
        counts = expected.setdefault((c.schema, c.table), [0, 0, 0, 0])
        counts[["insert", "update", "delete"].index(c.op.value)] += 1
        counts[3] = c.ts
    assert op_counts(changes) == expected
    assert len(expected) > 1 and all(sum(v[:3]) for v in expected.values())


def test_resume_from_a_checkpoint_gives_exactly_the_rest() -> None:
    all_txns = assemble(events(FULL), FULL)
    for k in (0, 3, len(all_txns) - 2):
        cut = all_txns[k].end.position.pos
        rest = assemble(events(FULL, start=cut), FULL, gtids=all_txns[k].end.gtid_set)
        assert [t.changes for t in rest] == [t.changes for t in all_txns[k + 1 :]]
        assert [t.end for t in rest] == [t.end for t in all_txns[k + 1 :]]


def test_ddl_units_from_the_setup_binlog() -> None:
    *txns, _rotation = assemble(events(SETUP), SETUP)
    assert all(len(t.ddl) == 1 and not t.changes for t in txns)
    assert txns[0].ddl[0].kind == "create" and txns[0].ddl[0].tables == (("mt", ""),)
    assert [t.ddl[0].tables[0][1] for t in txns[1:]] == ["all_types", "big_enum", "wide", "blobs"]


def test_filter_keeps_the_unit_but_drops_unwanted_rows() -> None:
    evs = events(FULL)
    everything = assemble(evs, FULL)
    only_blobs = assemble(evs, FULL, TableFilter(("mt.blob*",)))
    assert [t.end for t in only_blobs] == [t.end for t in everything]
    assert {c.table for t in only_blobs for c in t.changes} <= {"blobs"}
    nothing = assemble(evs, FULL, TableFilter(exclude=("mt.*",)))
    assert not any(t.changes for t in nothing)


def test_rollback_terminated_group_yields_nothing() -> None:
    evs = events(FULL)
    first_xid = next(i for i, ev in enumerate(evs) if isinstance(ev, XidEvent))
    ddl_query = next(ev for ev in events(SETUP) if isinstance(ev, QueryEvent))
    # a real QUERY event, re-labelled: the group that ended in XID now ends in ROLLBACK
    rollback = dataclasses.replace(ddl_query, header=evs[first_xid].header, sql="ROLLBACK", schema="mt")
    patched = evs[:first_xid] + [rollback] + evs[first_xid + 1 :]
    normal, rolled = assemble(evs, FULL), assemble(patched, FULL)
    assert rolled == normal[1:]


@pytest.mark.parametrize(
    ("sql", "kind", "tables"),
    [
        ("CREATE TABLE t (a INT)", "create", (("db", "t"),)),
        ("CREATE TABLE IF NOT EXISTS `o``dd`.`t 1` (a INT)", "create", (("o`dd", "t 1"),)),
        ("create or replace temporary table x.y like z", "create", (("x", "y"),)),
        ("ALTER TABLE t ADD COLUMN b INT", "alter", (("db", "t"),)),
        ("ALTER TABLE a.t RENAME TO a.u", "alter", (("a", "t"), ("a", "u"))),
        ("DROP TABLE IF EXISTS `t1`,`x`.`t2` /* generated by server */", "drop", (("db", "t1"), ("x", "t2"))),
        ("RENAME TABLE a TO b, x.c TO x.d", "rename", (("db", "a"), ("db", "b"), ("x", "c"), ("x", "d"))),
        ("TRUNCATE TABLE t", "truncate", (("db", "t"),)),
        ("truncate q.t", "truncate", (("q", "t"),)),
        ("CREATE DATABASE IF NOT EXISTS shop", "create", (("shop", ""),)),
        ("DROP SCHEMA shop", "drop", (("shop", ""),)),
        ("/* lead */ ALTER DATABASE shop CHARACTER SET utf8mb4", "alter", (("shop", ""),)),
        ("CREATE INDEX i ON t (a)", "other", ()),
        ("GRANT SELECT ON *.* TO u", "other", ()),
    ],
)
def test_parse_ddl(sql: str, kind: str, tables: tuple[tuple[str, str], ...]) -> None:
    assert parse_ddl("db", sql) == Ddl("db", sql, kind, tables)


def test_table_filter() -> None:
    flt = TableFilter(("shop.*", "crm.users", "log_?.events"), ("shop.tmp_*",))
    assert flt.wants("shop", "orders") and flt.wants("crm", "users") and flt.wants("log_1", "events")
    assert (
        not flt.wants("shop", "tmp_x") and not flt.wants("crm", "leads") and not flt.wants("Shop", "orders")
    )
    assert TableFilter().wants("any", "thing")
    assert TableFilter(exclude=("a.*",)).wants("b", "t") and not TableFilter(exclude=("a.*",)).wants("a", "t")
    assert flt.wants_schema("shop") and flt.wants_schema("crm") and not flt.wants_schema("other")
    assert TableFilter.from_lists(["a.b"], None) == TableFilter(("a.b",), ())


def test_table_filter_answers_are_remembered_per_table() -> None:
    flt = TableFilter(("shop.*",), ("shop.tmp_*",))
    asked = [("shop", "orders"), ("shop", "tmp_1"), ("crm", "users"), ("shop", "orders")]
    assert [flt.wants(s, t) for s, t in asked] == [True, False, False, True]
    assert [flt.wants(s, t) for s, t in asked] == [True, False, False, True]  # from the cache now
    fresh = TableFilter(("shop.*",), ("shop.tmp_*",))
    assert flt == fresh and hash(flt) == hash(fresh) and repr(flt) == repr(fresh)


@pytest.mark.parametrize(
    ("sql", "kind", "tables"),
    [
        pytest.param(
            "ALTER TABLE t RENAME TO u, ADD COLUMN c INT",
            "alter",
            (("db", "t"), ("db", "u")),
            id="alter-rename-not-last",
        ),
        pytest.param(
            "ALTER TABLE s.t ADD COLUMN c INT DEFAULT 1, RENAME AS `x.y`.`u,v`, ALGORITHM=COPY",
            "alter",
            (("s", "t"), ("x.y", "u,v")),
            id="alter-rename-middle-quoted",
        ),
        pytest.param(
            "ALTER TABLE t RENAME COLUMN a TO b, RENAME INDEX i TO j",
            "alter",
            (("db", "t"),),
            id="alter-rename-column-is-not-a-table-rename",
        ),
        pytest.param(
            "RENAME TABLE a TO b, c TO d",
            "rename",
            (("db", "a"), ("db", "b"), ("db", "c"), ("db", "d")),
            id="rename-two-pairs",
        ),
        pytest.param(
            "RENAME TABLE `my.db`.`t.1` TO `other`.`t,2`, `x` NOWAIT TO y.z",
            "rename",
            (("my.db", "t.1"), ("other", "t,2"), ("db", "x"), ("y", "z")),
            id="rename-quoted-dots-commas-nowait",
        ),
        pytest.param(
            "/* leading */ -- a line comment\n# another\nDROP TABLE IF EXISTS a, s.b",
            "drop",
            (("db", "a"), ("s", "b")),
            id="comments-before-drop",
        ),
        pytest.param(
            "DROP TABLE IF EXISTS `a`,`b` /* generated by server */",
            "drop",
            (("db", "a"), ("db", "b")),
            id="drop-server-comment",
        ),
        pytest.param("drop temporary tables q.a CASCADE", "drop", (("q", "a"),), id="drop-temporary-cascade"),
        pytest.param(
            "CREATE TABLE `s.1`.`n` LIKE other.src", "create", (("s.1", "n"),), id="create-like-schema-quoted"
        ),
        pytest.param("CREATE TABLE n (LIKE src)", "create", (("db", "n"),), id="create-paren-like"),
        pytest.param(
            "CREATE TABLE n (a INT COMMENT 'has -- and /* in it', b INT) COMMENT='x'",
            "create",
            (("db", "n"),),
            id="comment-markers-inside-strings",
        ),
        pytest.param(
            "CREATE TABLE /*!32312 IF NOT EXISTS*/ t (a INT)", "create", (("db", "t"),), id="exec-comment"
        ),
        pytest.param(
            "ALTER TABLE t COMMENT 'x, RENAME TO z'", "alter", (("db", "t"),), id="rename-inside-a-string"
        ),
        pytest.param("TRUNCATE TABLE x", "truncate", (("db", "x"),), id="truncate"),
        pytest.param("TRUNCATE `s`.`x`;", "truncate", (("s", "x"),), id="truncate-qualified"),
        pytest.param("ALTER DATABASE CHARACTER SET utf8mb4", "alter", (("db", ""),), id="alter-default-db"),
        pytest.param("ALTER VIEW v AS SELECT 1", "other", (), id="alter-view"),
    ],
)
def test_parse_ddl_harder(sql: str, kind: str, tables: tuple[tuple[str, str], ...]) -> None:
    assert parse_ddl("db", sql) == Ddl("db", sql, kind, tables)


@pytest.mark.parametrize(
    ("sql", "rename_only"),
    [
        ("ALTER TABLE t RENAME TO u", True),
        ("alter table `a b` rename `c d`;", True),
        ("ALTER TABLE t RENAME TO u, ADD COLUMN c INT", False),
        ("ALTER TABLE t ADD COLUMN c INT, RENAME TO u", False),
        ("ALTER TABLE t RENAME COLUMN a TO b", False),
        ("RENAME TABLE a TO b", True),
    ],
)
def test_is_rename_only(sql: str, rename_only: bool) -> None:
    assert is_rename_only(sql) is rename_only


COMPRESSED = (
    Path(__file__).resolve().parents[1] / "fixtures/binlog/vectors/mysql-8/transaction_compression.000001"
)


def test_compressed_transaction_payload_is_one_transaction() -> None:
    """MySQL 8 binlog_transaction_compression=ON: GTID, TRANSACTION_PAYLOAD(BEGIN, TABLE_MAP,
    WRITE_ROWS, XID). decode_events flattens the payload; the transaction ends after the payload
    event (offset 431), not at offsets computed from the inner events' sizes."""
    decoder = BinlogDecoder(file=COMPRESSED.name)
    asm = TransactionAssembler(CheckpointTracker(BinlogPosition(COMPRESSED.name, 4)))
    txns = [
        t for raw in read_binlog_file(COMPRESSED) for ev in decoder.decode_events(raw) if (t := asm.feed(ev))
    ]
    assert len(txns) == 2  # the transaction, then the ROTATE's boundary (binlog.000043:4)
    txn, rotation = txns
    assert rotation.end.position == BinlogPosition("binlog.000043", 4) and not rotation.changes
    assert txn.end.position == BinlogPosition(COMPRESSED.name, 431)
    assert txn.gtid is None and txn.ddl == () and txn.ts == 1695159109
    (change,) = txn.changes
    assert (change.op.value, change.schema, change.table) == ("insert", "test", "tb1")
    assert change.before is None and change.after == {"@1": 1}  # the vector has no column names
    assert change.position.start == 274  # the payload event's span
    # the ROTATE that follows the payload moves the position as usual
    assert not asm.in_transaction and asm.tracker.position == BinlogPosition("binlog.000043", 4)


def test_compressed_payload_through_a_filter() -> None:
    decoder = BinlogDecoder(file=COMPRESSED.name)
    asm = TransactionAssembler(
        CheckpointTracker(BinlogPosition(COMPRESSED.name, 4)), TableFilter.from_lists(["other.*"])
    )
    txns = [
        t for raw in read_binlog_file(COMPRESSED) for ev in decoder.decode_events(raw) if (t := asm.feed(ev))
    ]
    assert [(t.changes, t.end.position.pos) for t in txns] == [((), 431), ((), 4)]


def test_mysql_checkpoint_carries_the_previous_gtids() -> None:
    """A MySQL stream read from a file's start checkpoints the whole executed set: PREVIOUS_GTIDS
    plus the transactions after it (real MySQL 8.4 binlog with a tagged GTID)."""
    path = Path(__file__).parents[1] / "fixtures" / "binlog" / "vectors" / "mysql-8"
    path = path / "binlog_transaction_with_GTID_TAG.000001"
    txns = assemble(events(path), path)
    assert txns[-1].end.gtid_set == ("55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-3")
