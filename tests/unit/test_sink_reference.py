"""The reference executor (service/sink/reference.py): what one apply call of the IR leaves in the
keyspace. The differential tests (tests/sink/) hold it to the Lua; these pin its reading of it."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from service.sink.fks import set_name
from service.sink.ir import (
    AppendChange,
    ApplyCall,
    ApplyHeader,
    BeginResync,
    CarryResync,
    CascadeDelete,
    CascadeUpdate,
    ClearFkMemberships,
    ClearRows,
    CopyMembers,
    DeleteRow,
    FenceResync,
    FkConstraint,
    FkGraph,
    JoinFkSet,
    MergeRow,
    MoveRow,
    MoveRows,
    Op,
    RestartResync,
    SetFields,
    SkipSequence,
    TableKeys,
    UpdateChanged,
    UpdateRow,
    WriteRow,
)
from service.sink.keys import KeyLayout
from service.sink.reference import ScriptError, apply_call, changed_columns, execute
from service.sink.reference_keyspace import Keyspace, members, merge_json

LAY = KeyLayout("m")
RESYNC = LAY.resync_key.encode()


def table(name: str) -> TableKeys:
    return TableKeys(
        "s", name, LAY.table_base("s", name), LAY.index_key("s", name), LAY.table_id("s", name),
        LAY.touched_key("s", name),
    )  # fmt: skip


T = table("t")


def header(**kw: object) -> ApplyHeader:
    fields: dict[str, object] = dict(
        lease_key=LAY.lease_key, token="tok", checkpoint_key=LAY.checkpoint_key, expected_prev="",
        progress_key=LAY.progress_key, txn_id="f.1:10", chunk=0, final=True, seq_key=LAY.seq_key,
        nseq=1, resync_key=LAY.resync_key, done=0,
    )  # fmt: skip
    fields.update(kw)
    return ApplyHeader(**fields)  # type: ignore[arg-type]


def fresh() -> Keyspace:
    ks = Keyspace()
    ks.set(LAY.lease_key.encode(), b"tok")
    return ks


def run(ks: Keyspace, ops: list[Op], **kw: object) -> int | bytes:
    return apply_call(ks, header(**kw), ops, tables_key=LAY.tables_key)


def row(ks: Keyspace, suffix: str, t: TableKeys = T) -> object:
    return ks.dump().get(f"{t.base}:{suffix}".encode())


def members_of(ks: Keyspace, key: str) -> set[bytes]:
    return set(ks.dump().get(key.encode(), ("set", frozenset()))[1])  # type: ignore[call-overload]


def test_write_row_stores_the_non_null_columns_and_registers_the_table() -> None:
    ks = fresh()
    assert run(ks, [WriteRow(T, "1", {"id": 1, "a": None, "d": Decimal("1.50"), "b": b"\x00"})]) == 1
    assert row(ks, "1") == ("hash", {b"id": b"1", b"d": b"1.50", b"b": b"\x00"})
    assert members_of(ks, T.index) == {b"1"}
    assert members_of(ks, LAY.tables_key) == {b"s:t"}
    assert ks.get(LAY.seq_key.encode()) == b"1"


def test_json_rows_are_documents_and_merges_keep_the_stored_order() -> None:
    ks = fresh()
    t = dataclasses.replace(T, json=True)  # a table of JSON documents
    run(ks, [WriteRow(t, "1", {"id": 1, "a": "x", "b": None})])
    assert row(ks, "1") == ("string", b'{"id":1,"a":"x","b":null}')
    run(ks, [MergeRow(t, "1", {"b": 2, "c": [1, 2]})])
    assert row(ks, "1") == ("string", b'{"id":1,"a":"x","b":2,"c":[1,2]}')


def test_the_checks_come_first_and_refuse_the_whole_call() -> None:
    ks = fresh()
    ks.hset(LAY.checkpoint_key.encode(), [(b"id", b"f.1:5")])
    before = ks.dump()
    with pytest.raises(ScriptError, match="^LEASE_LOST the writer lease is held by another instance"):
        run(ks, [WriteRow(T, "1", {"id": 1})], token="other", expected_prev="f.1:5")
    with pytest.raises(ScriptError, match="^CHECKPOINT_MOVED expected f.1:4 found f.1:5$"):
        run(ks, [WriteRow(T, "1", {"id": 1})], expected_prev="f.1:4")
    with pytest.raises(ScriptError, match="^PROGRESS_MOVED f.1:10: expected 3 rows done, found 0$"):
        run(ks, [WriteRow(T, "1", {"id": 1})], expected_prev="f.1:5", chunk=2, final=False, done=3)
    with pytest.raises(ScriptError, match="^ROWS_MISSING row 3:s:t m:s:t:1$"):
        run(ks, [UpdateChanged(T, "1", {"id": 1, "a": 1}, {"id": 1, "a": 2})], expected_prev="f.1:5")
    assert ks.dump() == before


def test_a_cluster_group_keeps_the_newest_fencing_number() -> None:
    ks = Keyspace()
    run(ks, [], token="#4", nseq=0)
    assert ks.get(LAY.lease_key.encode()) == b"4"
    with pytest.raises(ScriptError, match=r"fencing number 4\)"):
        run(ks, [], token="#3", nseq=0)


def test_chunks_record_their_progress_and_the_last_clears_it() -> None:
    ks = fresh()
    assert run(ks, [SkipSequence(), SkipSequence()], chunk=1, final=False, nseq=2) == 1
    assert ks.hgetall(LAY.progress_key.encode()) == {b"txn": b"f.1:10", b"rows": b"2", b"first": b"1"}
    assert run(ks, [SkipSequence()], chunk=2, final=True, nseq=1, done=2) == 1  # the first chunk's
    assert not ks.exists(LAY.progress_key.encode())
    assert ks.get(LAY.seq_key.encode()) == b"3"


def test_change_log_entries_are_numbered_by_the_call() -> None:
    ks = fresh()
    ks.set(LAY.seq_key.encode(), b"9")
    run(ks, [SkipSequence(), AppendChange(LAY.changes_key, 100, (("op", "insert"),))], nseq=2)
    assert ks.dump()[LAY.changes_key.encode()] == ("stream", [(b"seq", b"11", b"op", b"insert")])


def test_an_update_writes_only_the_changes_unless_the_table_is_in_resync() -> None:
    ks = fresh()
    run(ks, [WriteRow(T, "1", {"id": 1, "a": 1, "b": 2})])
    ks.hset(f"{T.base}:1".encode(), [(b"extra", b"x")])  # not in the before image: kept
    run(ks, [UpdateRow(T, "1", {"id": 1, "a": 1, "b": 2}, {"id": 1, "a": 5, "b": None})])
    assert row(ks, "1") == ("hash", {b"id": b"1", b"a": b"5", b"extra": b"x"})
    run(ks, [BeginResync(T.tid, "alter", T.touched)])
    run(ks, [UpdateRow(T, "1", {"id": 1, "a": 5}, {"id": 1, "a": 6})])
    assert row(ks, "1") == ("hash", {b"id": b"1", b"a": b"6"})  # replaced: the resync's new shape
    assert members_of(ks, T.touched) == {b"1"}


def test_changed_columns_compare_stored_text_not_equality() -> None:
    changed, nulled = changed_columns(
        {"a": 1, "b": 0.0, "c": 2, "d": 1}, {"a": 1.0, "b": -0.0, "c": 2, "d": None}
    )
    assert changed == [("a", 1.0), ("b", -0.0)]
    assert nulled == ["d"]


def test_resync_marks_generation_fence_restart_and_carry() -> None:
    ks = fresh()
    u = table("u")
    run(ks, [BeginResync(T.tid, "alter", T.touched)])
    assert ks.hgetall(RESYNC) == {b"__gen": b"1", b"s:t": b"1 alter"}
    run(ks, [FenceResync(T.tid), FenceResync(u.tid)])
    assert ks.hgetall(RESYNC) == {b"__gen": b"1", b"s:t": b"- alter"}
    run(ks, [DeleteRow(T, "7")])
    assert members_of(ks, T.touched) == {b"7"}
    run(ks, [RestartResync(T.tid, LAY.stale_key("s", "t"), T.touched)])
    assert ks.hgetall(RESYNC)[b"s:t"] == b"2 alter"
    assert not ks.exists(T.touched.encode())
    run(ks, [CarryResync(T.tid, u.tid, LAY.stale_key("s", "u"), u.touched)])
    assert ks.hgetall(RESYNC)[b"s:u"] == b"3 alter"


def test_a_partial_image_in_resync_is_read_again_and_a_move_keeps_the_rest() -> None:
    ks = fresh()
    run(ks, [WriteRow(T, "1", {"id": 1, "a": 1, "b": 2}), BeginResync(T.tid, "r", T.touched)])
    run(ks, [MoveRow(T, "1", "2"), MergeRow(T, "2", {"id": 2, "a": None})])
    assert row(ks, "2") == ("hash", {b"id": b"2", b"b": b"2"})
    assert members_of(ks, T.index) == {b"2"}
    assert members_of(ks, T.touched) == {b"1"}
    assert ks.hgetall(f"{T.base}:__partial".encode()) == {b"2": b"1"}


def test_a_whole_row_replaces_stored_fields_it_does_not_name() -> None:
    """A stored hash holding only other fields (a MINIMAL merge on a row the mirror lacked) loses
    them when the whole row comes: its HSET added every field, but the hash then has more."""
    ks = fresh()
    run(ks, [MergeRow(T, "1", {"b": 5})])
    run(ks, [WriteRow(T, "1", {"id": 1, "a": 2, "b": None})])
    assert row(ks, "1") == ("hash", {b"id": b"1", b"a": b"2"})


def fk_graph(on_delete: str, on_update: str) -> tuple[TableKeys, FkGraph, str]:
    child = table("c")
    prefix = f"{child.base}:__fkx:fk:"
    c = FkConstraint("1", T.tid, child, prefix, on_delete, on_update, ("pid",), ("id",))
    return child, FkGraph(LAY.resync_key, False, (c,)), prefix


@pytest.mark.parametrize(("rule", "left"), [("CASCADE", None), ("SET NULL", {b"id": b"10"})])
def test_a_deleted_parent_cascades_to_its_children(rule: str, left: object) -> None:
    ks = fresh()
    child, graph, prefix = fk_graph(rule, "RESTRICT")
    fkset = set_name(prefix, b"1:1")
    run(
        ks, [WriteRow(T, "1", {"id": 1}), WriteRow(child, "10", {"id": 10, "pid": 1}), JoinFkSet(fkset, "10")]
    )
    run(ks, [DeleteRow(T, "1"), graph, CascadeDelete("1", b"1:1")])
    assert row(ks, "10", child) == (None if left is None else ("hash", left))
    assert members_of(ks, child.index) == (set() if left is None else {b"10"})
    assert not ks.exists(fkset.encode())


def test_an_updated_parent_key_cascades_and_moves_the_child_between_sets() -> None:
    ks = fresh()
    child, graph, prefix = fk_graph("RESTRICT", "CASCADE")
    run(ks, [WriteRow(child, "10", {"id": 10, "pid": 1}), JoinFkSet(set_name(prefix, b"1:1"), "10")])
    run(ks, [graph, CascadeUpdate("1", b"1:1", ("2",))])
    assert row(ks, "10", child) == ("hash", {b"id": b"10", b"pid": b"2"})
    assert members_of(ks, set_name(prefix, b"1:2")) == {b"10"}
    assert not ks.exists(set_name(prefix, b"1:1").encode())


def test_table_work_clears_and_moves_rows_and_records_its_units() -> None:
    ks = fresh()
    u = table("u")
    rec = LAY.table_ops_key
    run(ks, [WriteRow(T, str(i), {"id": i}) for i in range(3)], nseq=3)
    ks.hset(f"{T.base}:__fkdefs".encode(), [(b"m:s:t:__fkx:x:", b"2:id")])
    ks.sadd(set_name("m:s:t:__fkx:x:", b"1:1").encode(), [b"1"])
    move = MoveRows(rec, "MU a", 2, T.index, T.base, u.index, u.base)
    assert run(ks, [ClearFkMemberships(False), move], nseq=0) == 1  # rows left
    assert run(ks, [move], nseq=0) == 0
    assert run(ks, [move], nseq=0) == 0  # recorded as done: nothing more
    assert members_of(ks, u.index) == {b"0", b"1", b"2"}
    assert ks.hgetall(rec.encode()) == {
        b"txn": b"f.1:10",
        b"to " + u.index.encode(): u.base.encode(),
        b"MU a": b"done",
    }
    assert not ks.exists(b"m:s:t:__fkx:x:313a31")
    copy = CopyMembers("", "CP", 1, "", u.index, LAY.stale_key("s", "u"), "")
    assert run(ks, [copy], nseq=0) == b"0"
    assert members_of(ks, LAY.stale_key("s", "u")) == {b"0", b"1", b"2"}
    assert run(ks, [ClearRows("", "CU", 10, u.index, u.base)], nseq=0) == 0
    assert [k for k in ks.dump() if k.startswith(u.base.encode())] == [LAY.stale_key("s", "u").encode()]


def test_set_fields_write_the_checkpoint() -> None:
    ks = fresh()
    run(ks, [SetFields(LAY.checkpoint_key, (("id", "f.1:10"), ("pos", "10")))], nseq=0)
    assert ks.hgetall(LAY.checkpoint_key.encode()) == {b"id": b"f.1:10", b"pos": b"10"}


def test_flat_json_members_and_merge_copy_raw_text() -> None:
    doc = b'{"a":18446744073709551615,"b\\"":"x,}","c":{"d":[1,{"e":2}]},"f":0.1000000000000001}'
    keys, vals = members(doc)
    assert keys == [b'"a"', b'"b\\""', b'"c"', b'"f"']
    assert vals[b'"c"'] == b'{"d":[1,{"e":2}]}'
    assert (
        merge_json(doc, b'{"a":null,"g":[]}')
        == doc[:-1].replace(b"18446744073709551615", b"null") + b',"g":[]}'
    )


def test_execute_runs_a_call_s_ops_then_its_tail() -> None:
    ks = fresh()
    tail = (SetFields(LAY.checkpoint_key, (("id", "f.1:10"),)),)
    call = ApplyCall(header(), [WriteRow(T, "1", {"id": 1})], tail)
    assert execute(ks, call, LAY) == 1
    assert ks.hgetall(LAY.checkpoint_key.encode()) == {b"id": b"f.1:10"}
    with pytest.raises(ScriptError, match="^CHECKPOINT_MOVED expected  found f.1:10$"):
        execute(ks, call, LAY)
