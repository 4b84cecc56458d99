"""The Redis sink's planner (service/sink/plan.py): row ops, chunks, table actions and work, resume."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink.codec import Arg, CallEncoder
from service.sink.derive import Derivation, IndexSpec, Part, Ttl
from service.sink.ir import DeleteFields, SetFields, SkipSequence, UpdateChanged, UpdateRow
from service.sink.keys import KeyLayout
from service.sink.plan import ActionKind, IrOp, Planner, TableAction
from service.sink.tablework import TableWork, unit_ids, work_op
from service.sink.values import field_value, same_text
from service.transactions import Transaction
from tests.fixture_changes import fixture_changes


def _txn(*changes: RowChange) -> Transaction:
    end = Checkpoint(BinlogPosition("mysql-bin.000001", 100))
    return Transaction(changes=changes, ddl=(), gtid="0-1-1", ts=1, end=end)


def _change(op: Op, before: dict[str, object] | None, after: dict[str, object] | None) -> RowChange:
    return RowChange(op, "db", "t", before, after, EventSpan("mysql-bin.000001", 4, 90), 1, 1)


CONTEXT = ["A", "m:__tables", "db:t", "C", "m:db:t", "m:db:t:__keys", "db:t", "m:db:t:__touched", ""]


def _args(p: Planner, ops: list[IrOp] | None) -> list[Arg]:
    """The ops as the apply script reads them in a call of their own (codec.py)."""
    assert ops is not None
    return CallEncoder(p.layout).body(ops)


def _row_args(p: Planner, ops: list[IrOp] | None) -> list[Arg]:
    """The same, less the ops that name the table and op Q (table db.t)."""
    args = _args(p, ops)
    if args[:1] == ["Q"]:
        n = args[3]
        assert isinstance(n, int)
        args = args[4 + n :]
    assert args[: len(CONTEXT)] == CONTEXT
    return args[len(CONTEXT) :]


def test_plan_pk_change_full_images() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    ops = p.change(_change(Op.UPDATE, {"id": 1, "v": "a"}, {"id": 2, "v": None}))
    # row ops name rows by suffix (op C: the table); W carries values of a shape (op K: names)
    assert _args(p, ops) == [*CONTEXT, "E", "1", "K", "1", 1, "id", "W", "2", "1", "2"]


def test_plan_update_sends_the_changed_values_of_a_row_op_q_checks() -> None:
    """Op UL: a shape of the columns whose value changed (the before image's own object =
    unchanged: the decoder shares it when the bytes are equal), the columns that became NULL,
    the changed values; op Q, first in the call, lists the rows by table for the check."""
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    before = {"id": 7, "v": "ké:pt", "n": 1, "f": 0.0, "g": 2.5, "b": b"\x00:", "z": None, "gone": "x"}
    after = {"id": 7, "v": "ké:pt", "n": True, "f": -0.0, "g": 2.5, "b": b"\x00:", "z": "new", "gone": None}
    ops = p.change(_change(Op.UPDATE, before, after))
    # equal ints, strings and floats are unchanged, but 1 == True and 0.0 == -0.0 print otherwise
    assert _row_args(p, ops) == ["K", "1", 3, "n", "f", "z", "UL", "1", 1, "gone", "1", "-0.0", "new"]
    assert ops is not None
    ops += p.change(_change(Op.UPDATE, {"id": 8, "v": "a"}, {"id": 8, "v": "b"})) or []
    assert _args(p, ops)[:6] == ["Q", 1, "db:t", 2, "m:db:t:7", "m:db:t:8"]
    json_mode = Planner(KeyLayout("m"), lambda s, t: ("id",), json_mode=True)
    assert _row_args(json_mode, json_mode.change(_change(Op.UPDATE, before, after)))[:2] == ["WJN", 1]


def test_plan_update_of_a_shaped_row_carries_its_entry_moves_or_goes_whole() -> None:
    """A shaped table's update goes as its changed values (op UL: the copy takes them); one that
    changes a field its entries read carries the moves computed from its images (op UM: the
    record expected, the entries that go and come, the counts); whole (op U) when its key template
    moves the row's key or the table has a ttl."""
    indexed = Derivation(None, (IndexSpec("s", (Part("app:by-v:"), Part("v", field=True))),))
    keyed = Derivation((Part("app:"), Part("v", field=True)), ())
    ttl = Derivation(None, indexed.indexes, Ttl(seconds=60))
    kinds = {}
    for name, spec in (("indexed", indexed), ("keyed", keyed), ("ttl", ttl)):
        p = Planner(KeyLayout("m"), lambda s, t: ("id",), derive_of=lambda s, t, d=spec: d.spec_text())
        for what, after in (("other", {"id": 1, "v": "a", "n": 2}), ("read", {"id": 1, "v": "b", "n": 1})):
            ops = p.change(_change(Op.UPDATE, {"id": 1, "v": "a", "n": 1}, after))
            assert ops is not None
            op = ops[-1]
            kinds[name, what] = "U" if isinstance(op, UpdateRow) else "UM" if op.moves else "UL"
            if (name, what) == ("indexed", "read"):
                assert isinstance(op, UpdateChanged) and op.moves is not None
                tag = indexed.tag
                assert op.moves.member == "m:db:t:1"
                assert op.moves.expected == f"12:{tag}8:m:db:t:1s1:110:app:by-v:a"
                assert op.moves.record == f"12:{tag}8:m:db:t:1s1:110:app:by-v:b"
                assert op.moves.drops == (("s", "app:by-v:a"),)
                assert op.moves.adds == (("s", "app:by-v:b", ""),)
                assert op.moves.counts == ()  # one entry out of the index, one in
    assert kinds == {
        ("indexed", "other"): "UL",
        ("indexed", "read"): "UM",
        ("keyed", "other"): "UL",
        ("keyed", "read"): "U",
        ("ttl", "other"): "U",
        ("ttl", "read"): "U",
    }


def test_plan_update_of_a_table_in_resync_carries_the_whole_row() -> None:
    """Op U: a mask of the changed values over the shape, the columns that became NULL, the
    changed values, and the unchanged ones packed in one argument (`len:value`, lengths in
    bytes), for a row that may be absent or lack a column: its table is being resynced."""
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    p.marks.begin_resync("db:t")
    before = {"id": 7, "v": "ké:pt", "n": 1, "f": 0.0, "g": 2.5, "b": b"\x00:", "z": None, "gone": "x"}
    after = {"id": 7, "v": "ké:pt", "n": True, "f": -0.0, "g": 2.5, "b": b"\x00:", "z": "new", "gone": None}
    ops = p.change(_change(Op.UPDATE, before, after))
    shape = ["K", "1", 7, "id", "v", "n", "f", "g", "b", "z"]
    unchanged = b"1:7" + b"6:k\xc3\xa9:pt" + b"3:2.5" + b"2:\x00:"
    assert _args(p, ops) == [
        *CONTEXT,
        *shape,
        "U",
        "7",
        "1",
        "0011001",
        1,
        "gone",
        "1",
        "-0.0",
        "new",
        unchanged,
    ]


def test_plan_whole_rows_when_op_q_cannot_check_the_row() -> None:
    """Op Q checks rows before the call writes: a row the call writes first, or a table after a
    table action in the call, gets op U; and a table with a gap (an UL met no row) keeps U."""
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    upd = _change(Op.UPDATE, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})

    def op(ops: list[IrOp] | None) -> str:
        assert ops is not None
        return "UL" if isinstance(ops[-1], UpdateChanged) else "U" if isinstance(ops[-1], UpdateRow) else "?"

    p.change(_change(Op.INSERT, None, {"id": 1, "v": "a"}))
    assert op(p.change(upd)) == "U"
    p.begin_call()
    out = p.change(upd)
    assert op(out) == "UL" and out is not None
    p.transaction(out, _txn(upd), [TableAction(ActionKind.REGISTER, "db", "other")])
    assert _args(p, out)[:5] == ["Q", 1, "db:t", 1, "m:db:t:1"]  # the UL before the action only
    p.begin_call()
    p.marks.gap("db:t")
    assert op(p.change(upd)) == "U"


def test_plan_tracks_resyncs_and_gaps_through_table_actions() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    p.action(TableAction(ActionKind.RESYNC, "db", "a"))
    p.marks.gap("db:b")
    assert (p.marks.resyncs, p.marks.gaps) == ({"db:a"}, {"db:b"})
    p.action(TableAction(ActionKind.RENAME, "db", "a", "db", "x"))  # op RC carries the mark
    p.action(TableAction(ActionKind.RENAME, "db", "b", "db", "y"))
    assert (p.marks.resyncs, p.marks.gaps) == ({"db:x"}, {"db:y"})
    p.action(TableAction(ActionKind.TRUNCATE, "db", "y"))  # no rows: no gap
    p.action(TableAction(ActionKind.DROP, "db", "x"))
    assert (p.marks.resyncs, p.marks.gaps) == (set(), set())


def test_plan_whole_rows_until_the_stream_passes_a_finished_resync_s_copy() -> None:
    """A finished resync copied rows as the source had them at `copied_at`; until the stream
    passes that position, older events arrive for rows the copy moved on (one deleted later is
    absent), so updates carry whole rows. The first transaction past it ends the window (HDEL
    in its call); a RENAME carries a window, a DROP ends it."""
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    upd = _change(Op.UPDATE, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})
    p.marks.restore((), {"db:t": BinlogPosition("mysql-bin.000001", 100)})  # _txn ends there: not past it
    out: list[IrOp] = []
    p.transaction(out, _txn(upd), [])
    assert "U" in (args := _args(p, out)) and "UL" not in args and "Q" not in args
    p.marks.restore((), {"db:t": BinlogPosition("mysql-bin.000001", 99)})
    out = []
    p.transaction(out, _txn(upd), [])  # the same call: the row the U wrote may have been absent
    args = _args(p, out)
    assert args[:4] == ["X", "m:__settle", 1, "db:t"] and "U" in args and p.marks.settling == {}
    p.begin_call()
    out = []
    p.transaction(out, _txn(upd), [])
    args = _args(p, out)
    assert "UL" in args and args[:5] == ["Q", 1, "db:t", 1, "m:db:t:1"]
    at = BinlogPosition("mysql-bin.000009", 4)
    p.marks.restore((), {"db:t": at})
    args = _args(p, p.action(TableAction(ActionKind.RENAME, "db", "t", "db", "u")))
    assert args[args.index("H") :][:5] == ["H", "m:__settle", 1, "db:u", str(at)]
    assert args[-4:] == ["X", "m:__settle", 1, "db:t"]
    assert p.marks.settling == {"db:u": at}
    assert _args(p, p.action(TableAction(ActionKind.DROP, "db", "u")))[-4:] == ["X", "m:__settle", 1, "db:u"]
    assert p.marks.settling == {}


def test_plan_minimal_image_merges_and_moves() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: ("id",), full_images=False)
    ops = p.change(_change(Op.UPDATE, {"id": 1}, {"id": 2, "v": None}))
    assert _row_args(p, ops) == [
        "MV",
        "1",
        "2",
        "P",
        "2",
        1,
        "id",
        "2",
        1,
        "v",
    ]  # NULL in a partial image: HDEL
    ops = p.change(_change(Op.UPDATE, {"id": 1}, {"v": "x"}))  # key columns absent: same key
    assert _row_args(p, ops) == ["P", "1", 1, "v", "x", 0]
    # an INSERT completed from the catalog's defaults is written whole, and noted (op N): a
    # resync in flight reads it again, the defaults may not have been this point's
    args = _row_args(p, p.change(_change(Op.INSERT, None, {"id": 3, "v": "x"}), partial=True))
    assert args[-2:] == ["N", "3"] and "W" in args


def test_plan_keys_escape_and_composite_keys() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: ("a", "b"))
    ops = p.change(_change(Op.INSERT, None, {"a": "x:y", "b": -3, "c": b"\x00"})) or []
    assert _row_args(p, ops) == ["K", "1", 3, "a", "b", "c", "W", "x\\:y:-3", "1", "x:y", "-3", b"\x00"]
    ops += p.change(_change(Op.INSERT, None, {"a": "z", "b": 1, "c": None})) or []
    ops += p.change(_change(Op.INSERT, None, {"a": "z", "b": 2, "c": None})) or []
    assert _row_args(p, ops)[12:] == [
        "K",
        "2",
        2,
        "a",
        "b",
        "W",
        "z:1",
        "2",
        "z",
        "1",
        "W",
        "z:2",
        "2",
        "z",
        "2",
    ]
    p1 = Planner(KeyLayout("m"), lambda s, t: ("id",))
    assert _row_args(p1, p1.change(_change(Op.DELETE, {"id": "__keys"}, None))) == ["E", "\\__keys"]
    assert _row_args(p1, p1.change(_change(Op.DELETE, {"id": b"\x01"}, None))) == ["E", "0x01"]
    assert p1.change(_change(Op.DELETE, {"id": None}, None)) is None  # no usable key: skipped


def test_plan_json_mode() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: ("id",), json_mode=True, full_images=False)
    ins = p.change(_change(Op.INSERT, None, {"id": 1, "v": None}))
    assert _row_args(p, ins) == ["WJN", 1, "1", b'{"id":1,"v":null}']
    assert _row_args(p, p.change(_change(Op.UPDATE, {"id": 1}, {"v": 2}))) == ["PJ", "1", b'{"v":2}']


def test_plan_chunk_ops_set_the_table_once_per_call() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))

    def ins(table: str, i: int) -> RowChange:
        return RowChange(Op.INSERT, "db", table, None, {"id": i}, EventSpan("f.000001", 4, 9), 1, 1)

    chunks = [
        (_args(p, ops), n)
        for ops, n in p.chunks(_txn(ins("a", 0), ins("a", 1), ins("b", 0), ins("a", 2)), [], 3)
    ]
    assert [n for _, n in chunks] == [3, 1]
    ops = [op for op in _unrun(chunks[0][0]) if op in ("A", "C", "W", "K")]
    assert ops == ["A", "C", "K", "W", "W", "A", "C", "W"]
    # each call starts without a table and shapes
    assert chunks[1][0][:3] == ["A", "m:__tables", "db:a"]
    assert chunks[1][0][3:5] == ["C", "m:db:a"]
    assert chunks[1][0][9:11] == ["K", "1"]
    assert "S" not in chunks[0][0]  # without a change log the sequence needs no op per change


def test_plan_transactions_sharing_a_call_register_and_set_a_table_once() -> None:
    """Ops A and C once per call for a run of small transactions on one table; again after table
    actions (a DROP removes the table from `__tables`) and in the next call."""
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    out: list[IrOp] = []
    p.begin_call()
    for i in range(3):
        p.transaction(out, _txn(_change(Op.INSERT, None, {"id": i})), [])
    p.transaction(out, _txn(_change(Op.INSERT, None, {"id": 9})), [TableAction(ActionKind.DROP, "db", "t")])
    ops = [op for op in _unrun(_args(p, out)) if op in ("A", "C", "W", "R")]
    assert ops == ["A", "C", "W", "W", "W", "R", "A", "C", "W"]
    p.begin_call()
    again: list[IrOp] = []
    p.transaction(again, _txn(_change(Op.INSERT, None, {"id": 10})), [])
    assert _args(p, again)[:5] == ["A", "m:__tables", "db:t", "C", "m:db:t"]


def test_plan_skips_tables_without_key_and_keeps_sequence() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: None)
    chunks = list(p.chunks(_txn(_change(Op.INSERT, None, {"v": 1})), [], 10))
    assert chunks == [([], 1)]
    logged = Planner(KeyLayout("m"), lambda s, t: None, changelog_maxlen=10)
    assert list(logged.chunks(_txn(_change(Op.INSERT, None, {"v": 1})), [], 10)) == [([SkipSequence()], 1)]
    assert p.skipped.rows == {("db", "t"): 1}


def test_plan_chunks_and_actions() -> None:
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    changes = [_change(Op.INSERT, None, {"id": i}) for i in range(5)]
    chunks = list(p.chunks(_txn(*changes), [TableAction(ActionKind.TRUNCATE, "db", "t")], 2))
    assert [n for _, n in chunks] == [2, 2, 1]
    exact = list(p.chunks(_txn(*changes[:4]), [], 2))
    assert [n for _, n in exact] == [2, 2]  # no empty last call
    assert _args(p, chunks[0][0])[:2] == ["RR", "db:t"]  # the rows went before, in calls of their own


def test_table_work_of_table_actions() -> None:
    """The units run before the transaction's call, in action order; a rename first clears its
    new name, a resync copies `__keys` to `__stale`. Each table concerned gets op RB once (its
    resync in flight stops writing)."""
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))
    actions = [
        TableAction(ActionKind.RENAME, "db", "a", "db", "b"),
        TableAction(ActionKind.TRUNCATE, "db", "b"),
        TableAction(ActionKind.DROP, "db", "c"),
        TableAction(ActionKind.RESYNC, "db", "d"),
        TableAction(ActionKind.REGISTER, "db", "e"),  # no work
    ]
    fence, work = p.table_work(actions)
    assert _args(p, fence) == ["RB", "db:b", "RB", "db:a", "RB", "db:c", "RB", "db:d"]
    assert work == [
        TableWork("CU", "m:db:b:__keys", "m:db:b"),
        TableWork("MU", "m:db:a:__keys", "m:db:a", "m:db:b:__keys", "m:db:b"),
        TableWork("CP", "m:db:b:__keys", to_index="m:db:b:__stale", if_resync="db:a"),  # resync moves
        TableWork("CU", "m:db:b:__keys", "m:db:b"),
        TableWork("CU", "m:db:c:__keys", "m:db:c"),
        TableWork("CP", "m:db:d:__keys", to_index="m:db:d:__stale"),
    ]
    # units are named by what they do: the second clearing of b is another unit than the first
    ids = unit_ids(work)
    assert ids[0] == "CU m:db:b:__keys #1" and ids[3] == "CU m:db:b:__keys #2"
    assert unit_ids(work[3:]) == ["CU m:db:b:__keys #1", "CU m:db:c:__keys #1", ids[5]]
    moved = ["m:db:a:__keys", "m:db:a", "m:db:b:__keys", "m:db:b"]
    assert _args(p, work_op("m:__tableops", ids[1], work[1], 500)) == [
        "MU",
        "m:__tableops",
        ids[1],
        500,
        *moved,
    ]
    assert _args(p, work_op("m:__tableops", ids[4], work[4], 500))[:4] == ["CU", "m:__tableops", ids[4], 500]
    copy = ["CP", "m:__tableops", ids[5], 500, "17", "m:db:d:__keys", "m:db:d:__stale", ""]
    assert _args(p, work_op("m:__tableops", ids[5], work[5], 500, "17")) == copy
    assert p.table_work([TableAction(ActionKind.REGISTER, "db", "d")]) == ([], [])


def test_resume_skips_per_table_counts_whatever_the_chunk_size() -> None:
    """A resumed chunked transaction skips the first `done[table]` changes of each table: the same
    changes whether the selection (which tables' changes come) or the chunk size changed."""
    p = Planner(KeyLayout("m"), lambda s, t: ("id",))

    def ins(table: str, i: int) -> RowChange:
        return RowChange(Op.INSERT, "db", table, None, {"id": i}, EventSpan("f.000001", 4, 9), 1, 1)

    before = _txn(ins("a", 0), ins("b", 0), ins("a", 1), ins("b", 1), ins("a", 2), ins("b", 2))
    done = {"db:a": 2, "db:b": 2}  # two chunks of 2 were applied
    assert p.remaining(before, done) == [4, 5]
    # after the restart `b` is no longer selected and `c` is: a0 c0 a1 c1 a2
    after = _txn(ins("a", 0), ins("c", 0), ins("a", 1), ins("c", 1), ins("a", 2))
    todo = p.remaining(after, done)
    assert todo == [1, 3, 4]
    chunks = list(p.chunks(after, [], 2, todo))
    assert [n for _, n in chunks] == [2, 1]
    rows = []
    for planned, _ in chunks:
        ops = _unrun(_args(p, planned))
        for j, op in enumerate(ops):
            if op == "C":
                base = ops[j + 1]
            elif op == "W":
                rows.append(f"{base}:{ops[j + 1]}")
    assert sorted(rows) == ["m:db:a:2", "m:db:c:0", "m:db:c:1"]


_SCALARS = st.one_of(st.integers(), st.booleans(), st.floats(), st.text(max_size=5), st.binary(max_size=5))


@given(_SCALARS, _SCALARS)
def test_values_taken_as_unchanged_are_stored_as_the_same_text(v: object, b: object) -> None:
    if same_text(v, b):
        assert field_value(v) == field_value(b)


def _fixture_inserts() -> list[RowChange]:
    """Every INSERT of the real binlogs the tests hold (every column type, NULLs, several tables)."""
    return [c for c in fixture_changes() if c.op is Op.INSERT and c.after]


@pytest.mark.parametrize("json_mode", [False, True], ids=["hash", "json"])
def test_plan_whole_row_inserts_are_planned_as_change_plans_them(json_mode: bool) -> None:
    """A transaction's whole-row INSERTs go straight into the call (Planner._insert); the ops are
    those of `change` with the table's ops A and C before them, on every INSERT of the fixtures
    (rows without a key value are skipped and counted the same way)."""
    changes = _fixture_inserts()
    assert len(changes) > 100
    first = {(c.schema, c.table): next(iter(c.after or {})) for c in changes}

    def cols(s: str, t: str) -> tuple[str, ...]:
        return (first[s, t],)

    direct = Planner(KeyLayout("m"), cols, json_mode=json_mode)
    generic = Planner(KeyLayout("m"), cols, json_mode=json_mode)
    direct.begin_call()
    generic.begin_call()
    got: list[IrOp] = []
    direct.transaction(got, _txn(*changes), [])
    want: list[IrOp] = []
    for c in changes:
        want += generic.change(c) or []
    assert got == want
    args = _args(direct, got)
    assert direct.skipped.rows == generic.skipped.rows
    if json_mode:
        assert 0 < args.count("WJN") < len(changes)  # rows in runs: one op per run of a table


def _unrun(ops: list[Arg]) -> list[Arg]:
    """Runs of whole JSON rows (op WJN: a row count, then the rows) as the WJ ops of their rows."""
    out: list[Arg] = []
    sizes: dict[Arg, int] = {}
    i = 0
    while i < len(ops):
        op = ops[i]
        if op == "K":
            n = ops[i + 2]
            assert isinstance(n, int)
            sizes[ops[i + 1]] = n
            out += ops[i : i + 3 + n]
            i += 3 + n
        elif op == "WJN":
            rows, i = ops[i + 1], i + 2
            assert isinstance(rows, int) and rows > 0
            for _ in range(rows):
                out += ["WJ", ops[i], ops[i + 1]]
                i += 2
        else:
            out.append(op)
            i += 1
    return out


def test_table_actions_record_the_shape_the_rows_are_written_in() -> None:
    """`__shapes` follows the actions that (re)start a table's rows: set (or removed, unshaped)
    by RESYNC and REGISTER, carried by RENAME to the new name, removed by DROP; nothing at all
    without `shape_of` (a cluster's groups)."""
    lay = KeyLayout("m")
    shapes = {("db", "a"): "1:aaaa", ("db", "x"): "1:xxxx"}
    p = Planner(lay, lambda s, t: ("id",), shape_of=lambda s, t: shapes.get((s, t), ""))

    def shape_ops(action: TableAction) -> list[object]:
        return [op for op in p.action(action) if getattr(op, "key", None) == lay.shapes_key]

    a, b, x = lay.table_id("db", "a"), lay.table_id("db", "b"), lay.table_id("db", "x")
    assert shape_ops(TableAction(ActionKind.RESYNC, "db", "a")) == [
        SetFields(lay.shapes_key, ((a, "1:aaaa"),))
    ]
    assert shape_ops(TableAction(ActionKind.REGISTER, "db", "b")) == [DeleteFields(lay.shapes_key, (b,))]
    assert shape_ops(TableAction(ActionKind.RENAME, "db", "a", "db", "x")) == [
        DeleteFields(lay.shapes_key, (a,)),
        SetFields(lay.shapes_key, ((x, "1:aaaa"),)),  # its rows' shape, until its RESYNC
    ]
    assert shape_ops(TableAction(ActionKind.DROP, "db", "x")) == [DeleteFields(lay.shapes_key, (x,))]
    bare = Planner(lay, lambda s, t: ("id",))
    assert not [
        op for op in bare.action(TableAction(ActionKind.RESYNC, "db", "a")) if isinstance(op, SetFields)
    ]
