"""Foreign keys in the planner (service/sink/fks.py, cascades.py): the values of the sets, their
upkeep ops, the cascade ops and what is copied again instead. The script's side runs against a
real Redis in tests/integration/test_mirror_cascades.py."""

from __future__ import annotations

from decimal import Decimal

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.catalog import _FK_CLAUSE, _FK_RULE, _logs_cascades
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink.codec import Arg, CallEncoder
from service.sink.fks import ForeignKey, ForeignKeys, fk_value, set_name, set_prefix
from service.sink.keys import KeyLayout
from service.sink.plan import IrOp, Planner
from service.transactions import Transaction

LAY = KeyLayout("m")
CHILD = ForeignKey("c_pid", "db", "child", ("pid",), "db", "parent", ("id",), "CASCADE", "CASCADE")
NULLS = ForeignKey("s_tag", "db", "side", ("ptag",), "db", "parent", ("tag",), "CASCADE", "SET NULL")
GRAND = ForeignKey("g_cid", "db", "grand", ("cid",), "db", "child", ("id",), "CASCADE", "CASCADE")
KEYS = {"parent": ("id",), "child": ("id",), "side": ("id",), "grand": ("id",), "kid": ("pid", "seq")}


def _planner(fks: ForeignKeys, json_mode: bool = False) -> Planner:
    return Planner(LAY, lambda s, t: KEYS.get(t, ("id",)), json_mode=json_mode, foreign_keys=lambda: fks)


def _change(
    table: str, op: Op, before: dict[str, object] | None, after: dict[str, object] | None
) -> RowChange:
    return RowChange(op, "db", table, before, after, EventSpan("mysql-bin.000001", 4, 90), 1, 1)


def _txn(*changes: RowChange) -> Transaction:
    end = Checkpoint(BinlogPosition("mysql-bin.000001", 100))
    return Transaction(changes=changes, ddl=(), gtid="0-1-1", ts=1, end=end)


def _ops(p: Planner, *changes: RowChange) -> list[Arg]:
    p.begin_call()
    out: list[IrOp] = []
    p.transaction(out, _txn(*changes), [])
    return CallEncoder(LAY).body(out)


def test_values_are_the_stored_text_of_each_column() -> None:
    assert fk_value({"a": 12, "b": "x:y"}, ("a", "b"), False) == b"2:123:x:y"
    assert fk_value({"a": Decimal("1.50"), "b": b"\x00"}, ("a", "b"), False) == b"4:1.501:\x00"
    assert fk_value({"a": "é"}, ("a",), True) == '4:"é"'.encode()  # the raw JSON text
    assert fk_value({"a": 1, "b": None}, ("a", "b"), False) is None  # references nothing
    assert fk_value({"a": 1}, ("a", "b"), False) is None  # not in a partial image
    assert set_prefix(LAY, CHILD) == "m:db:child:__fkx:c_pid:"
    assert set_name("p:", b"1:\xa3") == "p:313aa3"  # binary: the name stays text


def test_a_child_row_joins_and_leaves_its_sets() -> None:
    p = _planner(ForeignKeys((CHILD,)))
    s5, s6 = "m:db:child:__fkx:c_pid:" + b"1:5".hex(), "m:db:child:__fkx:c_pid:" + b"1:6".hex()
    ins = _ops(p, _change("child", Op.INSERT, None, {"id": 1, "pid": 5}))
    assert ins[-3:] == ["FA", s5, "1"]
    upd = _ops(p, _change("child", Op.UPDATE, {"id": 1, "pid": 5}, {"id": 1, "pid": 6}))
    assert upd[-6:] == ["FR", s5, "1", "FA", s6, "1"]
    same = _ops(p, _change("child", Op.UPDATE, {"id": 1, "pid": 6, "n": 1}, {"id": 1, "pid": 6, "n": 2}))
    assert "FA" not in same and "FR" not in same
    moved = _ops(p, _change("child", Op.UPDATE, {"id": 1, "pid": 6}, {"id": 2, "pid": 6}))
    assert moved[-6:] == ["FR", s6, "1", "FA", s6, "2"]  # the row key changed
    nulled = _ops(p, _change("child", Op.UPDATE, {"id": 2, "pid": 6}, {"id": 2, "pid": None}))
    assert nulled[-3:] == ["FR", s6, "2"]
    gone = _ops(p, _change("child", Op.DELETE, {"id": 2, "pid": 6}, None))
    assert gone[-3:] == ["FR", s6, "2"]


def test_a_parent_delete_or_key_update_sends_its_cascade_once_per_call_with_the_graph() -> None:
    p = _planner(ForeignKeys((CHILD, NULLS)))
    ops = _ops(
        p,
        _change("parent", Op.DELETE, {"id": 5, "tag": "a"}, None),
        _change("parent", Op.UPDATE, {"id": 6, "tag": "b"}, {"id": 7, "tag": None}),
        _change("parent", Op.UPDATE, {"id": 8, "tag": "c", "n": 1}, {"id": 8, "tag": "c", "n": 2}),
    )
    f = ops.index("F")
    assert ops[f : f + 4] == ["F", "m:__resync", 0, 2]
    assert ops[f + 4 : f + 8] == ["1", "db:parent", "db:child", "m:db:child"]
    assert ops.count("F") == 1
    fd = [ops[i : i + 3] for i, a in enumerate(ops) if a == "FD"]
    assert fd == [["FD", "1", b"1:5"], ["FD", "2", b"1:a"]]  # CASCADE; SET NULL on delete
    fu = [ops[i : i + 5] for i, a in enumerate(ops) if a == "FU"]
    assert fu == [["FU", "1", b"1:6", "1", b"7"], ["FU", "2", b"1:b", "0", b""]]  # new id; tag NULL
    json_ops = _ops(
        _planner(ForeignKeys((CHILD,)), json_mode=True), _change("parent", Op.DELETE, {"id": 5}, None)
    )
    assert json_ops[json_ops.index("F") + 2] == 1  # json mode: the script reads documents
    assert b'"pid"' in json_ops  # fields by their raw JSON key


def test_tables_without_foreign_keys_plan_as_before() -> None:
    change = _change("other", Op.INSERT, None, {"id": 1, "pid": 5})
    plain = Planner(LAY, lambda s, t: ("id",))
    assert _ops(_planner(ForeignKeys((CHILD,))), change) == _ops(plain, change)
    assert _ops(_planner(ForeignKeys(logged=True)), change) == _ops(plain, change)


def test_what_the_script_cannot_apply_is_copied_again_with_what_it_reaches() -> None:
    kid = ForeignKey("k_pid", "db", "kid", ("pid",), "db", "parent", ("id",), "CASCADE", "CASCADE")
    loose = ForeignKey("c_pid", "db", "child", ("pid",), "db", "parent", ("id",), "CASCADE", "CASCADE", False)
    p = _planner(ForeignKeys((kid, GRAND, loose)))
    update = _change("parent", Op.UPDATE, {"id": 1}, {"id": 2})
    # kid: ON UPDATE CASCADE rewrites its key; child: the parent's id is not unique; grand: reached
    assert p.cascades.resyncs(_txn(update)) == [("db", "kid"), ("db", "child"), ("db", "grand")]
    ops = _ops(p, update)
    assert "FU" not in ops and "FD" not in ops
    assert p.cascades.resyncs(_txn(_change("parent", Op.UPDATE, {"id": 1, "n": 1}, {"id": 1, "n": 2}))) == []
    ok = _planner(ForeignKeys((CHILD, GRAND)))
    assert ok.cascades.resyncs(_txn(_change("parent", Op.DELETE, {"id": 1}, None))) == []
    # a partial parent image without the referenced column: unknown value, copied again
    partial = Transaction(
        (_change("parent", Op.DELETE, {"code": 1}, None),), (), "0-1-1", 1, _txn().end, frozenset({0})
    )
    assert ok.cascades.resyncs(partial) == [("db", "child"), ("db", "grand")]


def test_rules_from_show_create_table_and_the_versions_that_log_cascades() -> None:
    ddl = (  # SHOW CREATE TABLE as MariaDB 10.11 prints it
        "CREATE TABLE `side` (\n  `id` int(11) NOT NULL,\n  `pid` int(11) DEFAULT NULL,\n"
        "  `ptag` varchar(10) DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  KEY `s_pid` (`pid`),\n"
        "  CONSTRAINT `s_pid` FOREIGN KEY (`pid`) REFERENCES `parent` (`id`) "
        "ON DELETE SET NULL ON UPDATE SET NULL,\n"
        "  CONSTRAINT `s``tag` FOREIGN KEY (`ptag`) REFERENCES `parent` (`tag`) ON UPDATE CASCADE,\n"
        "  CONSTRAINT `plain` FOREIGN KEY (`pid`) REFERENCES `parent` (`id`)\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )
    found = {m[1]: dict(_FK_RULE.findall(m[2])) for m in _FK_CLAUSE.finditer(ddl)}
    assert found == {
        "s_pid": {"DELETE": "SET NULL", "UPDATE": "SET NULL"},
        "s``tag": {"UPDATE": "CASCADE"},
        "plain": {},
    }
    assert not _logs_cascades("10.11.19-MariaDB-0+deb12u1-log")
    assert not _logs_cascades("12.0.2-MariaDB")
    assert not _logs_cascades("8.4.3")
    assert _logs_cascades("9.6.0") and _logs_cascades("10.0.1-commercial")
