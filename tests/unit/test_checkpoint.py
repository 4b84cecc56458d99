"""Positions, GTID value types, start points; the tracker over real binlogs."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import pytest

from service.checkpoint import (
    BinlogPosition,
    Checkpoint,
    MariadbGtid,
    MariadbGtidPos,
    MysqlGtid,
    MysqlGtidSet,
    parse_gtid,
    parse_gtid_set,
    parse_start,
    statement_kind,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "896e7882-18fe-11ef-ab88-22222d34d411"


def test_positions_order_by_numeric_suffix() -> None:
    assert BinlogPosition("mysql-bin.000010", 4) > BinlogPosition("mysql-bin.000009", 999_999)
    assert BinlogPosition("mysql-bin.1000", 4) > BinlogPosition("mysql-bin.999", 4)
    assert BinlogPosition("b.000001", 120) < BinlogPosition("b.000001", 121)
    same = BinlogPosition("b.000001", 121)
    assert same <= BinlogPosition("b.000001", 121) <= same and not same < BinlogPosition("b.000001", 121)
    assert same >= BinlogPosition("b.000001", 120) and not same > BinlogPosition("b.000001", 122)
    assert sorted([BinlogPosition("m.10", 1), BinlogPosition("m.9", 5)])[0].file == "m.9"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("mysql-bin.000003:1234", BinlogPosition("mysql-bin.000003", 1234), id="plain"),
        pytest.param(" host:bin.000001:4 ", BinlogPosition("host:bin.000001", 4), id="colon-in-name"),
    ],
)
def test_position_parse(text: str, expected: BinlogPosition) -> None:
    assert BinlogPosition.parse(text) == expected
    assert str(expected) == text.strip()


@pytest.mark.parametrize("text", ["mysql-bin.000003", ":4", "f:x", ""])
def test_position_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="FILE:POS"):
        BinlogPosition.parse(text)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        pytest.param(f"{U1}:1-5:7", f"{U1}:1-5:7", id="intervals"),
        pytest.param(f"{U1.upper()}:7:1-5:6", f"{U1}:1-7", id="merge-and-lowercase"),
        pytest.param(U1.replace("-", "") + ":3", f"{U1}:3", id="uuid-without-dashes"),
        pytest.param(f"{U2}:1-3,\n{U1}:1-2", f"{U1}:1-2,{U2}:1-3", id="two-uuids-sorted"),
        pytest.param(f"{U1}:1-5:etl:1-3, {U1}:Etl:4:9", f"{U1}:1-5:etl:1-4:9", id="tags"),
        pytest.param(f"{U1}:etl:2", f"{U1}:etl:2", id="tag-only"),
        pytest.param("", "", id="empty"),
    ],
)
def test_mysql_gtid_set_round_trip(text: str, canonical: str) -> None:
    gset = MysqlGtidSet.parse(text)
    assert str(gset) == canonical
    assert MysqlGtidSet.parse(canonical) == gset


@pytest.mark.parametrize(
    "text", [f"{U1}", f"{U1}:0", f"{U1}:5-3", "nope:1", f"{U1}:1-2:bad-tag", f"{U1}:{'t' * 33}:1"]
)
def test_mysql_gtid_set_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        MysqlGtidSet.parse(text)


def test_mysql_gtid_set_contains_add_subset() -> None:
    gset = MysqlGtidSet.parse(f"{U1}:1-5:7,{U1}:etl:1-3")
    assert MysqlGtid(U1, 5) in gset
    assert MysqlGtid(U1, 6) not in gset
    assert MysqlGtid(U1, 2, "etl") in gset
    assert MysqlGtid(U1, 2, "other") not in gset
    assert MysqlGtid(U2, 1) not in gset
    grown = gset.add(MysqlGtid(U1, 6))
    assert str(grown) == f"{U1}:1-7:etl:1-3"
    assert gset <= grown and not grown <= gset
    assert str(grown.add(MysqlGtidSet.parse(f"{U2}:1"))) == f"{U1}:1-7:etl:1-3,{U2}:1"
    assert MysqlGtidSet.parse(f"{U1}:2-3") <= MysqlGtidSet.parse(f"{U1}:1-5")
    assert MysqlGtidSet.parse(f"{U1}:2-6") <= MysqlGtidSet.parse(f"{U1}:1-5:6-7:9")
    assert not MysqlGtidSet.parse(f"{U1}:2-9") <= MysqlGtidSet.parse(f"{U1}:1-5:6-7:9")


def test_adding_gtids_one_by_one_equals_parsing_the_whole_set() -> None:
    """`add` has a fast path for the next number of a uuid's last interval (every commit of a
    MySQL source); any order of adds must give the set that parsing all of them gives."""
    import random

    rng = random.Random(7)
    for _ in range(200):
        gtids = [
            MysqlGtid(rng.choice((U1, U2)), rng.randint(1, 30), rng.choice(("", "", "etl")))
            for _ in range(25)
        ]
        gset = MysqlGtidSet()
        for g in gtids:
            gset = gset.add(g)
        assert gset == MysqlGtidSet.parse(",".join(str(g) for g in gtids))
    one_domain = MariadbGtidPos.parse("0-1-5")
    assert one_domain.add(MariadbGtid(0, 2, 6)) == MariadbGtidPos.parse("0-2-6")
    assert one_domain.add(MariadbGtid(0, 2, 4)) is one_domain


def test_mariadb_gtid_pos() -> None:
    pos = MariadbGtidPos.parse("1-2-5, 0-1-100")
    assert str(pos) == "0-1-100,1-2-5"
    assert MariadbGtid(0, 1, 100) in pos and MariadbGtid(0, 9, 99) in pos
    assert MariadbGtid(0, 1, 101) not in pos and MariadbGtid(2, 1, 1) not in pos
    assert str(pos.add(MariadbGtid(0, 3, 101))) == "0-3-101,1-2-5"
    assert str(pos.add(MariadbGtid(0, 1, 50))) == "0-1-100,1-2-5"  # never goes back
    assert str(pos.add(MariadbGtid(7, 1, 1))) == "0-1-100,1-2-5,7-1-1"
    assert MariadbGtidPos.parse("0-1-50") <= pos and not pos <= MariadbGtidPos.parse("0-1-50")
    with pytest.raises(ValueError, match="twice"):
        MariadbGtidPos.parse("0-1-1,0-2-2")
    with pytest.raises(ValueError, match="domain-server-seq"):
        MariadbGtidPos.parse("0-1")


def test_parse_gtid_and_set_pick_the_form() -> None:
    assert parse_gtid("0-1-100") == MariadbGtid(0, 1, 100)
    assert parse_gtid(f"{U1}:42") == MysqlGtid(U1, 42)
    assert parse_gtid(f"{U1}:ETL:42") == MysqlGtid(U1, 42, "etl")
    assert str(parse_gtid(f"{U1}:etl:42")) == f"{U1}:etl:42"
    assert isinstance(parse_gtid_set("0-1-100,1-2-5"), MariadbGtidPos)
    assert isinstance(parse_gtid_set(f"{U1}:1-5"), MysqlGtidSet)
    with pytest.raises(ValueError):
        parse_gtid("42")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", "now"),
        ("start", "start"),
        ("mysql-bin.000002:4", BinlogPosition("mysql-bin.000002", 4)),
        ("0-1-100", MariadbGtidPos((MariadbGtid(0, 1, 100),))),
        (f"{U1}:1-5", MysqlGtidSet.parse(f"{U1}:1-5")),
    ],
)
def test_parse_start(text: str, expected: object) -> None:
    assert parse_start(text) == expected


def test_parse_start_rejects() -> None:
    with pytest.raises(ValueError, match="now, start, FILE:POS or a GTID set"):
        parse_start("yesterday")


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("BEGIN", "begin"),
        ("START TRANSACTION", "begin"),
        ("COMMIT", "commit"),
        ("commit /* implicit */", "commit"),
        ("ROLLBACK", "rollback"),
        ("ROLLBACK TO SAVEPOINT a", "savepoint"),
        ("SAVEPOINT a", "savepoint"),
        ("/* comment */ CREATE TABLE t (a int)", "ddl"),
        ("-- x\nDROP TABLE t", "ddl"),
        ("TRUNCATE t", "ddl"),
        ("GRANT SELECT ON *.* TO x", "other"),
        ("", "other"),
    ],
)
def test_statement_kind(sql: str, kind: str) -> None:
    assert statement_kind(sql) == kind


def test_value_types_compare_and_hash_by_value() -> None:
    """Native classes in the compiled build: equality and hashing must still be by value (mypyc
    gives a class that defines an ordering identity equality unless __eq__ is written out)."""
    pos = BinlogPosition("mysql-bin.000002", 120)
    pairs = [
        (BinlogPosition("mysql-bin.000002", 120), BinlogPosition("mysql-bin.000002", 121)),
        (MysqlGtid(U1, 5), MysqlGtid(U1, 5, "etl")),
        (MysqlGtidSet.parse(f"{U1}:1-5"), MysqlGtidSet.parse(f"{U1}:1-6")),
        (MariadbGtid(0, 1, 100), MariadbGtid(0, 1, 101)),
        (MariadbGtidPos.parse("0-1-100,1-2-5"), MariadbGtidPos.parse("0-1-100")),
        (Checkpoint(pos, "0-1-100", 7), Checkpoint(pos, "0-1-100", 8)),
    ]
    for value, other in pairs:
        twin = copy.deepcopy(value)
        assert twin is not value and twin == value and hash(twin) == hash(value), value
        assert value != other and {value: 1}.get(twin) == 1, value
        assert replace(value) == value
        assert pickle.loads(pickle.dumps(value)) == value
