"""The apply IR's wire codec (service/sink/codec.py): typed ops in, the apply script's ARGV out."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import hashlib
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import hiredis
import pytest

from service.binlog.rowchange import EventSpan, Op, Row, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink import ir
from service.sink.codec import (
    HEADER_FIELDS,
    Arg,
    CallEncoder,
    len_values,
    resync_finish_args,
    resync_reread_args,
    resync_rows_args,
)
from service.sink.keys import KeyLayout
from service.sink.plan import ActionKind, Planner, TableAction
from service.sink.tablework import unit_ids, work_op
from service.transactions import Transaction
from tests.fixture_changes import fixture_changes

LAYOUT = KeyLayout("m")
T = ir.TableKeys("db", "t", "m:db:t", "m:db:t:__keys", "db:t", "m:db:t:__touched")
HEADER = ir.ApplyHeader(
    "m:__lease", "tok", "m:__checkpoint", "", "m:__progress", "f.1:9", 0, True, "m:__seq", 3, "m:__resync", 0
)  # fmt: skip


def test_header_in_the_script_s_order() -> None:
    args = CallEncoder(LAYOUT).encode(ir.ApplyCall(HEADER, []))
    assert args == [
        "m:__lease", "tok", "m:__checkpoint", "", "m:__progress", "f.1:9", 0, "1",
        "m:__seq", 3, "m:__resync", 0,
    ]  # fmt: skip
    assert len(args) == HEADER_FIELDS


def test_table_actions_and_work() -> None:
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
    assert CallEncoder(LAYOUT).body(ops) == [
        "R", "m:__tables", "db:t", "A", "m:__tables", "db:u",
        "RC", "db:t", "db:u", "m:db:u:__stale", "m:db:u:__touched",
        "X", "m:__settle", 1, "db:u", "D", "m:db:t:__stale", "D", "m:db:t:__touched", "D", "m:db:t:__partial",
        "X", "m:__resync", 1, "db:t", "X", "m:__settle", 1, "db:t",
    ]  # fmt: skip
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
        "F", "m:__resync", 0, 1, "1", "db:t", "db:c", "m:db:c", "m:db:c:__keys", "m:db:c:__touched", "",
        "m:db:c:__fk:p", "CASCADE", "SET NULL", 1, "pid", "id",
        "FA", "m:db:c:__fk:p:1:1", "5", "FR", "m:db:c:__fk:p:1:1", "5",
        "FD", "1", b"1:1", "FU", "1", b"1:1", "10", "2", b"",
    ]  # fmt: skip


def test_len_values() -> None:
    assert len_values(["ké", b"\x00:", ""]) == b"3:k\xc3\xa9" + b"2:\x00:" + b"0:"


# -- the ARGV of planned calls, pinned to what the planner sent before the IR ---------------------
# sha256 (first 16 hex digits) of each call's RESP as the bytecode planner of commit 487c578 built
# it (what Redis received). Two encodings changed with the codec, both read by apply.lua the same
# way: a whole JSON row outside a load's runs is a run of one (WJN 1, was WJ), and with the plain
# form on, every whole hash row is field-value pairs (WP, was W with its shape); for those two
# scenarios the pin is of the rows written (`_rows`), equal to the old planner's.
PINNED = {
    "hash inserts": "54dfec939b870a3b",
    "json inserts": "4898e98fdf3034e9",
    "plain inserts": "ea7e40c847383261",
    "updates": "af6aa0ba4a474c66",
    "partial": "1fe12b3569f7921a",
    "partial json": "ea02409f619750e5",
    "changelog": "06b0de97f82a424a",
    "fence": "f7ad3d3c92f37c22",
    "work": "b9f1a58720248620",
    "actions": "d213c82803d8e0f3",
    "chunk 0": "e6bd1ae3e0bd1938",
    "chunk 1": "ae214c7ce0c929e7",
    "chunk 2": "fd75143ff39426db",
    "resumed chunk 0": "5af8f82a80749bfb",
    "resumed chunk 1": "0885c93902b437b9",
    "fixtures hash": "e284d0d3fd6e49a8",
}
ROWS_PINNED = {"fixtures json": "a071970e0d6497d7", "fixtures plain": "a3e33c5795f57303"}
SPAN = EventSpan("mysql-bin.000001", 4, 90)
KeyCols = Callable[[str, str], tuple[str, ...] | None]


def _ch(op: Op, before: Row | None, after: Row | None, table: str = "t") -> RowChange:
    return RowChange(op, "db", table, before, after, SPAN, 1, 1)


def _tx(*changes: RowChange, end: int = 100, partial: frozenset[int] = frozenset()) -> Transaction:
    at = Checkpoint(BinlogPosition("mysql-bin.000001", end))
    return Transaction(changes=changes, ddl=(), gtid="0-1-1", ts=1, end=at, partial=partial)


def _planner(cols: KeyCols | None = None, plain_rows: bool = False, **kw: Any) -> tuple[Planner, CallEncoder]:
    p = Planner(LAYOUT, cols or (lambda s, t: ("id",)), **kw)
    return p, CallEncoder(LAYOUT, plain_rows=plain_rows)


def _fixture_changes() -> list[RowChange]:
    return [_unshared(c) for c in fixture_changes()]


def _unshared(c: RowChange) -> RowChange:
    """The change with no object in both images: the compiled decoder hands an update's unchanged
    value as the before image's very object (which the codec leaves out of op UL, unlike the
    bytecode planner the pins come from), the pure one a new object."""
    if c.before is None or c.after is None:
        return c
    b = c.before
    after = {k: _fresh(v) if k in b and b[k] is v else v for k, v in c.after.items()}
    return RowChange(c.op, c.schema, c.table, b, after, c.position, c.ts, c.server_id, c.gtid)


def _fresh(v: Any) -> Any:
    """An equal value that is another object (for the types `same_text` does not compare)."""
    if v is None or type(v) in (int, str, bytes, float, bool):
        return v
    if isinstance(v, Decimal):
        out: Any = Decimal(str(v))
    elif isinstance(v, dt.datetime | dt.date | dt.time):
        out = v.replace()
    elif isinstance(v, dt.timedelta):
        out = dt.timedelta(v.days, v.seconds, v.microseconds)
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):  # Geometry: compiled, frozen
        out = dataclasses.replace(v)
    else:
        out = copy.deepcopy(v)
    assert out is not v and out == v, v
    return out


def _scenarios() -> Iterator[tuple[str, list[Arg]]]:
    p, enc = _planner()
    p.begin_call()
    out: list[ir.Op] = []
    p.transaction(
        out, _tx(_ch(Op.INSERT, None, {"id": 1, "v": "a"}), _ch(Op.INSERT, None, {"id": 2, "v": None})), []
    )
    p.transaction(
        out,
        _tx(_ch(Op.INSERT, None, {"id": 1, "w": b"\x00"}, "u"), _ch(Op.INSERT, None, {"id": 3, "v": "c"})),
        [],
    )
    yield "hash inserts", enc.body(out)
    for kind in ("json", "plain"):
        p, enc = _planner(json_mode=kind == "json", plain_rows=kind == "plain")
        p.begin_call()
        out = []
        p.transaction(
            out, _tx(*(_ch(Op.INSERT, None, {"id": i, "v": f"x{i}", "n": None}) for i in range(5))), []
        )
        yield kind + " inserts", enc.body(out)
    # updates: checked by op Q, whole (the row was written before in the call; a table in
    # resync), deletes, a key change
    p, enc = _planner()
    p.begin_call()
    out = []
    b: Row = {"id": 7, "v": "ké:pt", "n": 1, "f": 0.0, "z": None, "gone": "x"}
    a: Row = {"id": 7, "v": "ké:pt", "n": True, "f": -0.0, "z": "new", "gone": None}
    changes = [
        _ch(Op.UPDATE, b, a),
        _ch(Op.INSERT, None, {"id": 8, "v": "a"}),
        _ch(Op.UPDATE, {"id": 8, "v": "a"}, {"id": 8, "v": "b"}),
        _ch(Op.DELETE, {"id": 9}, None),
        _ch(Op.UPDATE, {"id": 1, "v": "a"}, {"id": 2, "v": "a"}),
        _ch(Op.UPDATE, b, a, "u"),
    ]
    p.transaction(out, _tx(*changes), [])
    p.marks.resync_in_flight("db:u")
    p.transaction(out, _tx(_ch(Op.UPDATE, b, a, "u")), [])
    yield "updates", enc.body(out)
    # partial images (MINIMAL): moves, merges, an INSERT read again
    p, enc = _planner(full_images=False)
    p.begin_call()
    out = []
    changes = [
        _ch(Op.UPDATE, {"id": 1}, {"id": 2, "v": None}),
        _ch(Op.UPDATE, {"id": 1}, {"v": "x"}),
        _ch(Op.INSERT, None, {"id": 3, "v": "x"}),
    ]
    p.transaction(out, _tx(*changes, partial=frozenset({2})), [])
    yield "partial", enc.body(out)
    p, enc = _planner(full_images=False, json_mode=True)
    p.begin_call()
    out = []
    p.transaction(out, _tx(*changes[:2]), [])
    yield "partial json", enc.body(out)
    # the change log, with a row of a table without a key
    p, enc = _planner(lambda s, t: ("id",) if t != "nokey" else None, changelog_maxlen=100)
    p.begin_call()
    out = []
    changes = [
        _ch(Op.INSERT, None, {"id": 1, "v": "a"}),
        _ch(Op.INSERT, None, {"v": 1}, "nokey"),
        _ch(Op.UPDATE, {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
        _ch(Op.DELETE, {"id": 1, "v": "b"}, None),
    ]
    p.transaction(out, _tx(*changes), [])
    yield "changelog", enc.body(out)
    yield from _action_scenarios()
    # every change of the fixture binlogs
    changes = _fixture_changes()
    first = {(c.schema, c.table): next(iter(c.after or c.before or {})) for c in changes}
    for mode in ("hash", "json", "plain"):
        p, enc = _planner(lambda s, t: (first[s, t],), json_mode=mode == "json", plain_rows=mode == "plain")
        p.begin_call()
        out = []
        p.transaction(out, _tx(*changes), [])
        yield f"fixtures {mode}", enc.body(out)


def _action_scenarios() -> Iterator[tuple[str, list[Arg]]]:
    """Table actions (and their whole-table work) then rows; settle windows; chunked calls."""
    p, enc = _planner()
    p.marks.restore(
        ["db:a"],
        {"db:t": BinlogPosition("mysql-bin.000001", 50), "db:s": BinlogPosition("mysql-bin.000009", 50)},
    )
    acts = [
        TableAction(ActionKind.RENAME, "db", "s", "db", "s2"),
        TableAction(ActionKind.RENAME, "db", "a", "db", "b"),
        TableAction(ActionKind.TRUNCATE, "db", "t"),
        TableAction(ActionKind.DROP, "db", "c"),
        TableAction(ActionKind.RESYNC, "db", "d", reason="alter"),
        TableAction(ActionKind.REGISTER, "db", "e"),
    ]
    fence, work = p.table_work(acts)
    yield "fence", enc.body(fence)
    units: list[ir.Op] = []
    for uid, w in zip(unit_ids(work), work, strict=True):
        units += work_op("m:__tableops", uid, w, 500, "17" if w.op == "CP" else "")
    yield "work", enc.body(units)
    p.begin_call()
    out: list[ir.Op] = []
    upd = _ch(Op.UPDATE, {"id": 2, "v": 1}, {"id": 2, "v": 2})
    p.transaction(out, _tx(_ch(Op.INSERT, None, {"id": 1}), upd), [])
    p.transaction(out, _tx(_ch(Op.INSERT, None, {"id": 5}), upd, end=200), acts)
    yield "actions", enc.body(out)
    p, enc = _planner()
    t = _tx(*(_ch(Op.INSERT, None, {"id": i}, "ab"[i % 2]) for i in range(7)))
    for k, (ops, _) in enumerate(p.chunks(t, [TableAction(ActionKind.TRUNCATE, "db", "a")], 3)):
        yield f"chunk {k}", enc.body(ops)
    for k, (ops, _) in enumerate(p.chunks(t, [], 3, p.remaining(t, {"db:a": 2}))):
        yield f"resumed chunk {k}", enc.body(ops)


def _rows(args: list[Arg]) -> list[object]:
    """The ops with WJN runs as WJ per row and W rows (with their op K shapes) as WP pairs."""
    out: list[object] = []
    shapes: dict[Arg, list[Arg]] = {}
    i = 0
    while i < len(args):
        op = args[i]
        if op == "K":
            n = args[i + 2]
            assert isinstance(n, int)
            shapes[args[i + 1]] = args[i + 3 : i + 3 + n]
            i += 3 + n
        elif op == "WJN":
            rows, i = args[i + 1], i + 2
            assert isinstance(rows, int)
            for _ in range(rows):
                out += ["WJ", args[i], args[i + 1]]
                i += 2
        elif op == "W":
            names = shapes[args[i + 2]]
            out += ["WP", args[i + 1], len(names)]
            for k, v in zip(names, args[i + 3 : i + 3 + len(names)], strict=True):
                out += [k, v]
            i += 3 + len(names)
        elif op == "WP":
            c = args[i + 2]
            assert isinstance(c, int)
            out += args[i : i + 3 + 2 * c]
            i += 3 + 2 * c
        elif op == "U" or op == "UL":  # a shape named by its columns (op K is dropped)
            at = i + 2 if op == "U" else i + 1
            out += [*args[i:at], tuple(shapes[args[at]])]
            i = at + 1
        else:
            out.append(op)
            i += 1
    return out


@pytest.fixture(scope="module")
def planned() -> dict[str, list[Arg]]:
    return dict(_scenarios())


def _without_derive_specs(args: list[Arg]) -> list[Arg]:
    """The ARGV as sent before op C gained its 5th argument (issue 40: a shaped table's derived
    entries' spec, '' for every table here)."""
    out: list[Arg] = []
    i = 0
    while i < len(args):
        if args[i] == "C" and i + 5 < len(args) and args[i + 5] == "" and str(args[i + 2]).endswith("__keys"):
            out += args[i : i + 5]
            i += 6
        else:
            out.append(args[i])
            i += 1
    return out


@pytest.mark.parametrize("name", [*PINNED, *ROWS_PINNED])
def test_planned_calls_are_the_argv_sent_before_the_ir(planned: dict[str, list[Arg]], name: str) -> None:
    args = _without_derive_specs(planned[name])
    if name in PINNED:
        packed: bytes = hiredis.pack_command(("X", *args))  # type: ignore[arg-type]
        assert hashlib.sha256(packed).hexdigest()[:16] == PINNED[name]
    else:
        assert hashlib.sha256(repr(_rows(args)).encode()).hexdigest()[:16] == ROWS_PINNED[name]


def test_resync_calls() -> None:
    """The resync scripts' ARGV: the lease, the generation, the table's keys, the value mode and
    the table's derive spec ('' unshaped), then rows as the source gave them (count f v ..., NULLs
    not stored; json: 1, '' and the document)."""
    h = ir.ResyncHeader("m:__lease", "tok", "m:__resync", T, 4)
    row: Row = {"id": 1, "v": None, "b": b"\x00"}
    ops = [ir.WriteRow(T, "1", row)]
    head = ["m:__lease", "tok", "m:__resync", "db:t", 4]
    assert resync_rows_args(h, "m:db:t:__stale", ops) == [
        *head, "m:db:t:__touched", "m:db:t:__stale", "m:db:t:__keys", "m:db:t", "0", "",
        "1", 2, "id", "1", "b", b"\x00",
    ]  # fmt: skip
    json_t = dataclasses.replace(T, json=True)  # a table of JSON documents
    json_ops = [ir.WriteRow(json_t, "1", row)]
    assert resync_rows_args(dataclasses.replace(h, table=json_t), "s", json_ops)[-4:] == [
        "1", 1, "", b'{"id":1,"v":null,"b":"AA=="}',
    ]  # fmt: skip
    assert resync_reread_args(h, [("1", "3", ops[0]), ("2", "1", None)]) == [
        *head, "m:db:t:__touched", "m:db:t:__keys", "m:db:t", "0", "",
        "1", "3", 1, 2, "id", "1", "b", b"\x00", "2", "1", 0, 0,
    ]  # fmt: skip
    assert resync_finish_args(h, "m:db:t:__stale", 500, "m:__settle", "") == [
        *head[:4], "m:db:t:__touched", "m:db:t:__stale", "m:db:t:__keys", "m:db:t", 4, 500, "m:__settle", "",
    ]  # fmt: skip
