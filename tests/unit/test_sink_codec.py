"""The apply IR's wire codec (service/sink/codec.py): typed ops in, the apply script's ARGV out."""

from __future__ import annotations

from service.binlog.rowchange import EventSpan, Op, Row, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink import ir
from service.sink.codec import HEADER_FIELDS, CallEncoder, len_values
from service.sink.keys import KeyLayout
from service.sink.plan import Arg, Planner
from service.transactions import Transaction

LAYOUT = KeyLayout("m")
T = ir.TableKeys("db", "t", "m:db:t", "m:db:t:__keys", "db:t", "m:db:t:__touched")
HEADER = ir.ApplyHeader(
    "m:__lease", "tok", "m:__checkpoint", "", "m:__progress", "f.1:9", 0, True, "m:__seq", 3, "m:__resync", 0
)  # fmt: skip


def _txn(*changes: RowChange) -> Transaction:
    end = Checkpoint(BinlogPosition("mysql-bin.000001", 100))
    return Transaction(changes=changes, ddl=(), gtid="0-1-1", ts=1, end=end)


def _change(op: Op, before: Row | None, after: Row | None) -> RowChange:
    return RowChange(op, "db", "t", before, after, EventSpan("mysql-bin.000001", 4, 90), 1, 1)


def test_header_in_the_script_s_order() -> None:
    args = CallEncoder(LAYOUT).encode(ir.ApplyCall(HEADER, []))
    assert args == [
        "m:__lease", "tok", "m:__checkpoint", "", "m:__progress", "f.1:9", 0, "1",
        "m:__seq", 3, "m:__resync", 0,
    ]  # fmt: skip
    assert len(args) == HEADER_FIELDS


def test_inserts_register_their_table_once_and_send_each_shape_once() -> None:
    rows: list[Row] = [{"id": 1, "v": "a"}, {"id": 2, "v": None}, {"id": 3, "v": "c"}]
    planner = Planner(LAYOUT, lambda s, t: ("id",))
    planner.begin_call()
    today: list[Arg] = []
    planner.transaction(today, _txn(*(_change(Op.INSERT, None, r) for r in rows)), [])
    ops = [ir.WriteRow(T, str(r["id"]), r) for r in rows]
    assert CallEncoder(LAYOUT).body(ops) == today
    assert today[:8] == [
        "A",
        "m:__tables",
        "db:t",
        "C",
        "m:db:t",
        "m:db:t:__keys",
        "db:t",
        "m:db:t:__touched",
    ]


def test_json_rows_go_in_runs() -> None:
    rows: list[Row] = [{"id": 1, "v": "a"}, {"id": 2, "v": None}]
    planner = Planner(LAYOUT, lambda s, t: ("id",), json_mode=True)
    planner.begin_call()
    today: list[Arg] = []
    planner.transaction(today, _txn(*(_change(Op.INSERT, None, r) for r in rows)), [])
    ops = [ir.WriteRow(T, str(r["id"]), r) for r in rows]
    assert CallEncoder(LAYOUT, json_mode=True).body(ops) == today
    assert today[8:10] == ["WJN", 2]


def test_updates_checked_by_op_q_and_whole_updates() -> None:
    before: Row = {"id": 7, "v": "ké:pt", "n": 1, "z": None, "gone": "x"}
    after: Row = {"id": 7, "v": "ké:pt", "n": True, "z": "new", "gone": None}
    planner = Planner(LAYOUT, lambda s, t: ("id",))
    planner.begin_call()
    upd = _change(Op.UPDATE, before, after)
    lean = planner.change(upd)
    assert lean is not None
    planner.resyncing.add("db:t")
    whole = planner.change(upd)
    assert whole is not None
    today = planner.checks() + planner.context("db", "t") + lean + whole
    ops = [ir.UpdateChanged(T, "7", before, after), ir.UpdateRow(T, "7", before, after)]
    got = CallEncoder(LAYOUT).body(ops)
    assert got[:5] == ["Q", 1, "db:t", 1, "m:db:t:7"]
    assert got[5:8] == ["A", "m:__tables", "db:t"] and got[8:] == today[5:]


def test_deletes_merges_moves_and_the_change_log() -> None:
    planner = Planner(LAYOUT, lambda s, t: ("id",), full_images=False, changelog_maxlen=100)
    ch = _change(Op.UPDATE, {"id": 1}, {"id": 2, "v": None})
    today = planner.change(ch, partial=True)
    assert today is not None
    xa = today.index("XA")
    fields = today[xa + 4 :]
    log = ir.AppendChange("m:__changes", 100, tuple(zip(fields[::2], fields[1::2], strict=True)))  # type: ignore[arg-type]
    ops: list[ir.Op] = [ir.MoveRow(T, "1", "2"), ir.MergeRow(T, "2", {"id": 2, "v": None}), log]
    assert CallEncoder(LAYOUT).body(ops)[8:] == today
    assert CallEncoder(LAYOUT).body([ir.DeleteRow(T, "1"), ir.RereadRow(T, "1"), ir.SkipSequence()])[8:] == [
        "E", "1", "N", "1", "S",
    ]  # fmt: skip


def test_table_actions_and_work() -> None:
    from service.sink.plan import ActionKind, TableAction

    planner = Planner(LAYOUT, lambda s, t: ("id",))
    rename = TableAction(ActionKind.RENAME, "db", "t", "db", "u")
    today = planner.action(rename)
    ops: list[ir.Op] = [
        ir.RemoveMember("m:__tables", "db:t"),
        ir.AddMember("m:__tables", "db:u"),
        ir.CarryResync("db:t", "db:u", "m:db:u:__stale", "m:db:u:__touched"),
        ir.DeleteFields("m:__settle", ("db:u",)),
        ir.DeleteKey("m:db:t:__stale"),
        ir.DeleteKey("m:db:t:__touched"),
        ir.DeleteKey("m:db:t:__partial"),
        ir.DeleteFields("m:__resync", ("db:t",)),
        ir.DeleteFields("m:__settle", ("db:t",)),
    ]
    assert CallEncoder(LAYOUT).body(ops) == today
    work = [
        ir.FenceResync("db:t"),
        ir.ClearFkMemberships(json=False),
        ir.ClearRows("m:__tableops", "CU x #1", 500, "m:db:t:__keys", "m:db:t"),
        ir.MoveRows("", "MU", 10, "i", "b", "ti", "tb"),
        ir.CopyMembers("k", "CP", 10, "", "i", "to", "db:t"),
        ir.SetFields("m:__checkpoint", (("id", "f.1:9"),)),
        ir.BeginResync("db:t", "alter", "m:db:t:__touched"),
        ir.RestartResync("db:t", "s", "t"),
    ]
    assert CallEncoder(LAYOUT).body(work) == [
        "RB", "db:t", "FC", 0, "CU", "m:__tableops", "CU x #1", 500, "m:db:t:__keys", "m:db:t",
        "MU", "", "MU", 10, "i", "b", "ti", "tb", "CP", "k", "CP", 10, "", "i", "to", "db:t",
        "H", "m:__checkpoint", 1, "id", "f.1:9", "RS", "db:t", "alter", "m:db:t:__touched",
        "RR", "db:t", "s", "t",
    ]  # fmt: skip


def test_a_table_action_registers_the_table_again() -> None:
    row: Row = {"id": 1}
    ops: list[ir.Op] = [
        ir.WriteRow(T, "1", row),
        ir.RemoveMember("m:__tables", "db:t"),
        ir.WriteRow(T, "2", row),
    ]
    got = CallEncoder(LAYOUT).body(ops)
    assert [a for a in got if a in ("A", "C", "R", "W")] == ["A", "C", "W", "R", "A", "C", "W"]


def test_cascades() -> None:
    child = ir.TableKeys("db", "c", "m:db:c", "m:db:c:__keys", "db:c", "m:db:c:__touched")
    fk = ir.FkConstraint("1", "db:t", child, "m:db:c:__fk:p", "CASCADE", "SET NULL", ("pid",), ("id",))
    ops: list[ir.Op] = [
        ir.FkGraph("m:__resync", False, (fk,)),
        ir.JoinFkSet("m:db:c:__fk:p:1:1", "5"),
        ir.LeaveFkSet("m:db:c:__fk:p:1:1", "5"),
        ir.CascadeDelete("1", b"1:1"),
        ir.CascadeUpdate("1", b"1:1", ("2", None)),
    ]
    assert CallEncoder(LAYOUT).body(ops) == [
        "F", "m:__resync", 0, 1, "1", "db:t", "db:c", "m:db:c", "m:db:c:__keys", "m:db:c:__touched",
        "m:db:c:__fk:p", "CASCADE", "SET NULL", 1, "pid", "id",
        "FA", "m:db:c:__fk:p:1:1", "5", "FR", "m:db:c:__fk:p:1:1", "5",
        "FD", "1", b"1:1", "FU", "1", b"1:1", "10", "2", b"",
    ]  # fmt: skip


def test_len_values() -> None:
    assert len_values(["ké", b"\x00:", ""]) == b"3:k\xc3\xa9" + b"2:\x00:" + b"0:"
