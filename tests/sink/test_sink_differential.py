"""Differential tests: random apply calls of the IR through the reference executor and through the
real Lua (via the wire codec) on a real redis-server; after every call the two keyspaces must be
the same, byte for byte, and so must the replies and error texts.

The world: four tables of one layout, a parent `t`, its child `c` (c.pid -> t.id) and grandchild
`g` (g.cid -> c.id), and `u`; rows keyed by a small id so that calls meet each other's rows.
Cascades form a chain (each child has one parent): which child a cascade reaches first is then
irrelevant, as Redis's set order cannot be reproduced. SINK_DIFF_EXAMPLES=n runs more examples.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import redis as redis_sync
from hypothesis import given, settings
from hypothesis import strategies as st

from service.sink import ir
from service.sink.codec import CallEncoder
from service.sink.derive import HIDDEN, Derivation, IndexSpec, Part
from service.sink.fks import defs_key, fk_field
from service.sink.keys import KeyLayout
from service.sink.plan import _entry_moves
from service.sink.reference import execute
from service.sink.reference_keyspace import Keyspace, as_bytes
from tests.sink.differential import Twin, plain_form, redis_dump

pytestmark = pytest.mark.redis

LAY = KeyLayout("m")
COLUMNS = {"t": ("id", "a", "b"), "c": ("id", "pid", "a"), "g": ("id", "cid", "a"), "u": ("id", "a", "b")}
FK_COLUMN = {"c": "pid", "g": "cid"}  # the child's column -> its parent's `id`
PARENT = {"c": "t", "g": "c"}
CID = {"c": "1", "g": "2"}


def keys_of(name: str) -> ir.TableKeys:
    lay = LAY
    return ir.TableKeys(
        "s", name, lay.table_base("s", name), lay.index_key("s", name), lay.table_id("s", name),
        lay.touched_key("s", name),
    )  # fmt: skip


TABLES = {n: keys_of(n) for n in COLUMNS}
NAMES = list(COLUMNS)


def set_prefix(child: str) -> str:
    return f"{TABLES[child].base}:__fkx:fk_{child}:"


def enc(n: int) -> bytes:
    """A referenced id as cascade.lua compares it: `len:text` (the same text in both layouts)."""
    t = str(n).encode()
    return b"%d:%s" % (len(t), t)


def fk_set(child: str, n: int) -> str:
    return set_prefix(child) + enc(n).hex()


Rules = dict[str, tuple[str, str]]  # child table -> its constraint's (ON DELETE, ON UPDATE)


def graph(json_mode: bool, rules: Rules) -> ir.FkGraph:
    out = []
    for child, col in FK_COLUMN.items():
        on = rules[child]
        out.append(
            ir.FkConstraint(
                CID[child],
                TABLES[PARENT[child]].tid,
                TABLES[child],
                set_prefix(child),
                on[0],
                on[1],
                (fk_field(col, json_mode),),
                (fk_field("id", json_mode),),
            )  # fmt: skip
        )
    return ir.FkGraph(LAY.resync_key, json_mode, tuple(out))


# -- strategies ----------------------------------------------------------------------------------

ids = st.integers(1, 4)
values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**64 - 1),
    st.text(max_size=6),
    st.binary(max_size=4),
    st.floats(),
    st.decimals(min_value=-1000, max_value=1000, places=2),
    st.booleans(),
    st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 1, 1)),
    st.just({"k": [1, "x", None]}),
)
tables = st.sampled_from(NAMES)
rule = st.sampled_from(["CASCADE", "SET NULL", "RESTRICT"])


@st.composite
def rows(draw: st.DrawFn, name: str, n: int, partial: bool = False) -> dict[str, Any]:
    cols = COLUMNS[name]
    if partial:
        cols = tuple(draw(st.lists(st.sampled_from(cols), unique=True, max_size=len(cols))))
    row: dict[str, Any] = {}
    for c in cols:
        if c == "id":
            row[c] = n
        elif c in ("pid", "cid"):
            row[c] = draw(st.none() | ids)
        else:
            row[c] = draw(values)
    return row


@st.composite
def updates(draw: st.DrawFn, name: str, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    before = draw(rows(name, n))
    after = draw(rows(name, n))
    for c in after:  # unchanged columns: the before image's very object, as the decoder reuses it
        if draw(st.booleans()):
            after[c] = before[c]
    return before, after


@st.composite
def row_op(draw: st.DrawFn, json_mode: bool) -> ir.Op:
    name = draw(tables)
    t, n = TABLES[name], draw(ids)
    kinds = ["write", "merge", "update", "delete", "move", "reread"] + ([] if json_mode else ["changed"])
    kind = draw(st.sampled_from(kinds))
    if kind == "write":
        return ir.WriteRow(t, str(n), draw(rows(name, n)))
    if kind == "merge":
        return ir.MergeRow(t, str(n), draw(rows(name, n, partial=True)))
    if kind in ("update", "changed"):
        before, after = draw(updates(name, n))
        return (ir.UpdateRow if kind == "update" else ir.UpdateChanged)(t, str(n), before, after)
    if kind == "delete":
        return ir.DeleteRow(t, str(n))
    if kind == "move":
        return ir.MoveRow(t, str(n), str(draw(ids.filter(lambda m: m != n))))
    return ir.RereadRow(t, str(n))


@st.composite
def other_op(draw: st.DrawFn) -> ir.Op:
    name = draw(tables)
    t = TABLES[name]
    stale = LAY.stale_key("s", name)
    kind = draw(st.integers(0, 13))
    if kind == 0:
        return ir.SkipSequence()
    if kind == 1:
        return ir.AppendChange(LAY.changes_key, 1000, (("op", "x"), ("key", draw(st.text(max_size=3)))))
    if kind == 2:
        return ir.AddMember(LAY.tables_key, t.tid)
    if kind == 3:
        return ir.RemoveMember(LAY.tables_key, t.tid)
    if kind == 4:
        key = draw(st.sampled_from([t.index, t.touched, stale, f"{t.base}:{draw(ids)}", LAY.resync_key]))
        return ir.DeleteKey(key)
    if kind == 5:
        return ir.SetFields(LAY.settle_key, ((t.tid, "f.1:5"),))
    if kind == 6:
        return ir.DeleteFields(draw(st.sampled_from([LAY.resync_key, LAY.settle_key])), (t.tid,))
    if kind == 7:
        return ir.FenceResync(t.tid)
    if kind == 8:
        reason = draw(st.sampled_from(["alter", "3 4 x", "- y", "12", ""]) | st.text(max_size=5))
        return ir.BeginResync(t.tid, reason, t.touched)
    if kind == 9:
        return ir.RestartResync(t.tid, stale, t.touched)
    if kind == 10:
        new = draw(st.sampled_from(NAMES))
        return ir.CarryResync(t.tid, TABLES[new].tid, LAY.stale_key("s", new), TABLES[new].touched)
    child = draw(st.sampled_from(["c", "g"]))
    n, m = draw(ids), draw(ids)
    if kind == 11:
        return draw(st.sampled_from([ir.JoinFkSet, ir.LeaveFkSet]))(fk_set(child, n), str(m))
    if kind == 12:
        return ir.CascadeDelete(CID[child], enc(n))
    new_value = draw(st.none() | ids)
    return ir.CascadeUpdate(CID[child], enc(n), (None if new_value is None else str(new_value),))


def call_ops(json_mode: bool) -> st.SearchStrategy[list[ir.Op]]:
    return st.lists(st.one_of(row_op(json_mode), row_op(json_mode), other_op()), max_size=8)


@dataclass
class Txn:
    chunks: list[list[ir.Op]]
    stop: int | None = None  # abandoned before this chunk (a crash: its `__progress` stays)
    fault: tuple[int, str] | None = None  # a call refused: (chunk, what is wrong in its header)


@dataclass
class Unit:
    op: ir.Op
    fence: list[ir.Op] = field(default_factory=list)
    fc: bool = False


@st.composite
def txns(draw: st.DrawFn, json_mode: bool) -> Txn:
    chunks = draw(st.lists(call_ops(json_mode), min_size=1, max_size=3))
    stop = draw(st.none() | st.integers(2, 3)) if len(chunks) > 1 else None
    fault = draw(
        st.none() | st.tuples(st.integers(1, len(chunks)), st.sampled_from(["token", "prev", "done"]))
    )
    return Txn(chunks, stop, fault)


@st.composite
def units(draw: st.DrawFn) -> Unit:
    name = draw(tables)
    t = TABLES[name]
    limit = draw(st.sampled_from([1, 2, 3, 100]))
    record = draw(st.sampled_from(["", LAY.table_ops_key]))
    fence = [ir.FenceResync(t.tid)] if draw(st.booleans()) else []
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return Unit(ir.ClearRows(record, f"CU {name}", limit, t.index, t.base), fence, draw(st.booleans()))
    other = TABLES[draw(st.sampled_from([n for n in NAMES if n != name]))]
    if kind == 1:
        op: ir.Op = ir.MoveRows(record, f"MU {name}", limit, t.index, t.base, other.index, other.base)
        return Unit(op, fence, draw(st.booleans()))
    cond = draw(st.sampled_from(["", t.tid]))
    return Unit(
        ir.CopyMembers(record, f"CP {name}", limit, "", other.index, LAY.stale_key("s", name), cond), fence
    )


def steps(json_mode: bool) -> st.SearchStrategy[list[Txn | Unit]]:
    return st.lists(st.one_of(txns(json_mode), txns(json_mode), units()), min_size=1, max_size=8)


# -- the driver ----------------------------------------------------------------------------------


def header(
    txn: str, prev: str, chunk: int, final: bool, nseq: int, done: int, token: str = "tok"
) -> ir.ApplyHeader:
    return ir.ApplyHeader(
        LAY.lease_key, token, LAY.checkpoint_key, prev, LAY.progress_key, txn, chunk, final, LAY.seq_key,
        nseq, LAY.resync_key, done,
    )  # fmt: skip


def with_graph(ops: list[ir.Op], json_mode: bool, rules: Rules) -> list[ir.Op]:
    """Op F before the first cascade of the call, as the planner sends it."""
    at = next((i for i, op in enumerate(ops) if isinstance(op, ir.CascadeDelete | ir.CascadeUpdate)), None)
    return ops if at is None else [*ops[:at], graph(json_mode, rules), *ops[at:]]


def start(r: redis_sync.Redis, json_mode: bool) -> Twin:
    twin = Twin(r, LAY, json_mode, CallEncoder(LAY).encode, Keyspace())
    r.set(LAY.lease_key, "tok")
    twin.ks.set(LAY.lease_key.encode(), b"tok")
    for child, col in FK_COLUMN.items():  # `__fkdefs`: what op FC reads (`len:field` per column)
        f = as_bytes(fk_field(col, json_mode))
        key, prefix, spec = (
            defs_key(LAY, "s", child).encode(),
            set_prefix(child).encode(),
            b"%d:%s" % (len(f), f),
        )
        r.hset(key, prefix, spec)
        twin.ks.hset(key, [(prefix, spec)])
    twin.check()
    return twin


def drive(twin: Twin, plan: list[Txn | Unit], json_mode: bool, rules: Rules) -> str:
    """Runs `plan`; returns the last checkpoint id stored."""
    prev = ""
    for n, step in enumerate(plan, 1):
        txn = f"f.1:{n}"
        if isinstance(step, Unit):
            each: list[ir.Op] = [ir.ClearFkMemberships(json_mode)] if step.fc else []
            twin.unit(header(txn, prev, 0, True, 0, 0), step.fence, each, step.op)
            continue
        done, k = 0, len(step.chunks)
        for i, ops in enumerate(step.chunks, 1):
            if step.stop == i:
                break
            final, nseq = i == k, len(ops)
            tail: list[ir.Op] = [ir.SetFields(LAY.checkpoint_key, (("id", txn), ("pos", str(n))))]
            if not final:
                tail = [ir.SetFields(LAY.progress_key, (("t:s:t", str(done + nseq)),))]
            token, expect, at = "tok", prev, done
            if step.fault is not None and step.fault[0] == i:
                token = "other" if step.fault[1] == "token" else token
                expect = "f.0:0" if step.fault[1] == "prev" else expect
                at = done + 1 if step.fault[1] == "done" and k > 1 else done
            h = header(txn, expect, 0 if k == 1 else i, final, nseq, at, token)
            kind, _ = twin.call(ir.ApplyCall(h, with_graph(ops, json_mode, rules), tail))
            if kind == "error":
                break
            done += nseq
            if final:
                prev = txn
    return prev


# the child and grandchild shaped (hash rows): the rows their cascades delete or change keep their
# copies at the key template and their set entries (cascade.lua calls derive.lua)
def derived_children(json_mode: bool) -> dict[str, str]:
    return {
        n: Derivation(
            key=(Part(f"app:{n}:"), Part("id", field=True, integer=True)),
            indexes=(IndexSpec("s", (Part(f"app:{n}-by-{col}:"), Part(col, field=True))),),
            json=() if json_mode else None,
        ).spec_text()
        for n, col in FK_COLUMN.items()
    }


@pytest.mark.parametrize(
    ("json_mode", "derived"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["hash", "json", "hash-derived", "json-derived"],
)
def test_random_calls_leave_the_same_keyspace(
    sink_redis: redis_sync.Redis, json_mode: bool, derived: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if derived:
        for n, spec in derived_children(json_mode).items():
            monkeypatch.setitem(TABLES, n, replace(TABLES[n], derive=spec))

    @settings(settings.get_profile("sink-differential"))
    @given(plan=steps(json_mode), on=st.tuples(rule, rule, rule, rule))
    def check(plan: list[Txn | Unit], on: tuple[str, str, str, str]) -> None:
        drive(start(sink_redis, json_mode), plan, json_mode, {"c": on[:2], "g": on[2:]})

    check()


# -- paths random calls seldom take ----------------------------------------------------------------

T, U, C, G = TABLES["t"], TABLES["u"], TABLES["c"], TABLES["g"]
WIDE = {f"col{i}": i for i in range(600)}  # more than the script's 500 fields per HSET


def wide(shift: int) -> dict[str, Any]:
    return {"id": 1, **{k: v + shift for k, v in WIDE.items()}}


EDGES: dict[str, tuple[bool, list[list[ir.Op]]]] = {
    # write_row trusts an HSET that added every field: a merged field the new row lacks stays
    "write over a merge of other columns": (
        False,
        [[ir.MergeRow(T, "1", {"b": 5})], [ir.WriteRow(T, "1", {"id": 1, "a": 2, "b": None})]],
    ),
    "a JSON document replaced by a hash row": (
        False,
        [[ir.SetFields(LAY.checkpoint_key, ())], [ir.WriteRow(T, "1", {"id": 1})]],
    ),
    "rows wider than one HSET": (
        False,
        [
            [ir.WriteRow(T, "1", wide(0))],
            [ir.UpdateRow(T, "1", wide(0), wide(1))],
            [ir.UpdateChanged(T, "1", wide(1), {**wide(2), "col7": None})],
            [ir.MergeRow(T, "1", wide(3))],
        ],
    ),
    "an update of a table in resync is refused": (
        False,
        [
            [ir.WriteRow(T, "1", {"id": 1, "a": 1}), ir.BeginResync(T.tid, "alter", T.touched)],
            [ir.UpdateChanged(T, "1", {"id": 1, "a": 1}, {"id": 1, "a": 2})],
        ],
    ),
    "JSON text the script splits by hand": (
        True,
        [
            [ir.WriteRow(T, "1", {"id": 1, "a": 'q"u,o}t\\e', "b": {"x": [1, {"y": "]}"}]}})],
            [ir.MergeRow(T, "1", {"b": None, "c": "\u00e9\U0001f600", "a": "{["})],
        ],
    ),
    "marks of every form": (  # common.lua's reason_of: "{generation} {reason}", "- {reason}", other
        False,
        [
            [
                ir.SetFields(
                    LAY.resync_key,
                    ((T.tid, "1-2 x"), (U.tid, "-- y"), (C.tid, "- 7 z"), (G.tid, "12 34")),
                )
            ],
            [ir.FenceResync(T.tid), ir.FenceResync(U.tid), ir.FenceResync(C.tid)],
            [ir.RestartResync(T.tid, LAY.stale_key("s", "t"), T.touched), ir.FenceResync(G.tid)],
            [ir.CarryResync(G.tid, U.tid, LAY.stale_key("s", "u"), U.touched)],
            [ir.RestartResync(C.tid, LAY.stale_key("s", "c"), C.touched)],
        ],
    ),
    "table work in many calls": (
        False,
        [
            [ir.WriteRow(U, f"k{i}", {"id": i}) for i in range(300)],
            [ir.BeginResync(U.tid, "x", U.touched)],
        ],
    ),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_edge_calls_leave_the_same_keyspace(sink_redis: redis_sync.Redis, name: str) -> None:
    json_mode, calls = EDGES[name]
    twin = start(sink_redis, json_mode)
    if name == "a JSON document replaced by a hash row":
        sink_redis.set(f"{T.base}:1", b'{"id":1}')
        twin.ks.set(f"{T.base}:1".encode(), b'{"id":1}')
    prev = ""
    for n, ops in enumerate(calls, 1):
        tail = [ir.SetFields(LAY.checkpoint_key, (("id", f"f.1:{n}"),))]
        kind, _ = twin.call(ir.ApplyCall(header(f"f.1:{n}", prev, 0, True, len(ops), 0), ops, tail))
        prev = f"f.1:{n}" if kind == "reply" else prev
    if name == "table work in many calls":  # SSCAN and SPOP in pages of a set of 300 names
        h = header("f.1:9", prev, 0, True, 0, 0)
        stale = LAY.stale_key("s", "u")
        twin.unit(h, [], [], ir.CopyMembers(LAY.table_ops_key, "CP u", 10, "", U.index, stale, U.tid))
        twin.unit(h, [ir.FenceResync(U.tid)], [], ir.MoveRows("", "MU", 7, U.index, U.base, T.index, T.base))
        twin.unit(
            h, [], [ir.ClearFkMemberships(False)], ir.ClearRows(LAY.table_ops_key, "CU", 7, T.index, T.base)
        )


def test_changed_values_of_a_shaped_row_move_its_copy_or_derive_it_again(
    sink_redis: redis_sync.Redis,
) -> None:
    """Op UL on a shaped row (the planner sends it when no field the entries read changes): the
    copy at the key template takes the same HSET/HDEL; op UM (a read field changed) moves the
    entries the planner computed, or derives the row again when the stored record is not the one
    it expected."""
    t = replace(T, derive=SHAPED_PLAIN["t"].spec_text())
    twin = start(sink_redis, False)
    images = [
        {"id": 1, "a": b"x", HIDDEN + "b": 5, "c": "one", "d": 1},
        {"id": 1, "a": b"x", HIDDEN + "b": 5, "c": "two", "d": 1},  # the copy follows
        {"id": 1, "a": b"x", HIDDEN + "b": 5, "c": None, "d": 2},  # a field gone from the copy too
        {"id": 1, "a": b"y", HIDDEN + "b": 5, "c": "three", "d": 2},  # a set entry moves
        {"id": 1, "a": b"y", HIDDEN + "b": 6, "c": "three", "d": 2},  # a hidden score moves
        {"id": 1, "a": None, HIDDEN + "b": 6, "c": "three", "d": 2},  # out of the set index
        {"id": 1, "a": b"y", HIDDEN + "b": 6, "c": "three", "d": 2},  # back into it
    ]
    calls: list[list[ir.Op]] = [[ir.WriteRow(t, "1", images[0])]]
    for b, a in zip(images, images[1:], strict=False):  # op UM when a read field changes
        moves = _entry_moves(t, "1", b, a) if any(b[f] != a[f] for f in ("a", HIDDEN + "b")) else None
        calls.append([ir.UpdateChanged(t, "1", b, a, moves)])
    # moves planned from a before image the mirror does not hold: the script derives it again
    stale = {**images[-1], "a": b"z"}
    calls.append(
        [
            ir.UpdateChanged(
                t,
                "1",
                stale,
                {**images[-1], "a": b"w"},
                _entry_moves(t, "1", stale, {**images[-1], "a": b"w"}),
            )
        ]
    )
    prev = ""
    for n, ops in enumerate(calls, 1):
        tail = [ir.SetFields(LAY.checkpoint_key, (("id", f"f.1:{n}"),))]
        call = ir.ApplyCall(header(f"f.1:{n}", prev, 0, True, len(ops), 0), ops, tail)
        assert twin.call(call)[0] == "reply"
        prev = f"f.1:{n}"
    copy = sink_redis.hgetall("app:t:1")
    assert copy == {b"id": b"1", b"a": b"w", b"c": b"three", b"d": b"2"}, copy


def test_cluster_groups_keep_the_newest_fencing_number(sink_redis: redis_sync.Redis) -> None:
    twin = start(sink_redis, False)
    sink_redis.delete(LAY.lease_key)  # a group's lease key holds the last writer's number
    twin.ks.delete(LAY.lease_key.encode())
    for token in ("#3", "#2", "#3", "#5", "tok"):
        twin.call(ir.ApplyCall(header("f.1:1", "", 0, True, 0, 0, token), []))


@pytest.mark.parametrize("json_mode", [False, True], ids=["hash", "json"])
@pytest.mark.parametrize(
    "on", [("CASCADE", "CASCADE"), ("SET NULL", "SET NULL")], ids=["cascade", "set-null"]
)
def test_cascades_into_shaped_children_keep_their_entries(
    sink_redis: redis_sync.Redis, monkeypatch: pytest.MonkeyPatch, on: tuple[str, str], json_mode: bool
) -> None:
    """A parent's key update and delete cascading into shaped children (and, on delete, their
    children): the copies at the key templates, set entries and counts follow in both executors."""
    for n, spec in derived_children(json_mode).items():
        monkeypatch.setitem(TABLES, n, replace(TABLES[n], derive=spec))
    c, g = TABLES["c"], TABLES["g"]
    twin = start(sink_redis, json_mode)
    rules = {"c": on, "g": on}
    calls: list[list[ir.Op]] = [
        [
            ir.WriteRow(c, "1", {"id": 1, "pid": 1, "a": "x"}),
            ir.JoinFkSet(fk_set("c", 1), "1"),
            ir.WriteRow(c, "2", {"id": 2, "pid": 1}),
            ir.JoinFkSet(fk_set("c", 1), "2"),
            ir.WriteRow(c, "3", {"id": 3, "pid": 2}),
            ir.JoinFkSet(fk_set("c", 2), "3"),
            ir.WriteRow(g, "1", {"id": 1, "cid": 1}),
            ir.JoinFkSet(fk_set("g", 1), "1"),
        ],
        [ir.CascadeUpdate(CID["c"], enc(1), ("4",))],  # t.id 1 -> 4
        [ir.CascadeDelete(CID["c"], enc(4 if on[1] == "CASCADE" else 2))],
    ]
    prev = ""
    for n, ops in enumerate(calls, 1):
        tail = [ir.SetFields(LAY.checkpoint_key, (("id", f"f.1:{n}"),))]
        h = header(f"f.1:{n}", prev, 0, True, len(ops), 0)
        kind, _ = twin.call(ir.ApplyCall(h, with_graph(ops, json_mode, rules), tail))
        assert kind == "reply"
        prev = f"f.1:{n}"
        if n == 1:
            assert sink_redis.smembers("app:c-by-pid:1") == {b"app:c:1", b"app:c:2"}
    by_pid = {k: sink_redis.smembers(k) for k in sink_redis.scan_iter("app:c-by-pid:*")}
    if on[0] == "CASCADE":  # c 1, 2 moved to pid 4, then deleted with g 1
        assert by_pid == {b"app:c-by-pid:2": {b"app:c:3"}} and not sink_redis.exists("app:g:1", "app:c:1")
    else:  # c 1, 2 lost their pid on the update; c 3 on the delete of t.id 2
        assert by_pid == {} and sink_redis.exists("app:c:1", "app:c:2", "app:c:3", "app:g:1") == 4


# -- the plain MULTI/EXEC form of insert-only calls (service/sink/plain.py) -----------------------


@st.composite
def insert_calls(draw: st.DrawFn) -> list[list[ir.Op]]:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        ops: list[ir.Op] = []
        for _ in range(draw(st.integers(0, 6))):
            name = draw(st.sampled_from(["t", "u"]))
            if draw(st.integers(0, 5)) == 0:
                ops.append(ir.AddMember(LAY.tables_key, TABLES[name].tid))
            else:
                n = draw(ids)
                ops.append(ir.WriteRow(TABLES[name], str(n), draw(rows(name, n))))
        out.append(ops)
    return out


@given(calls=insert_calls())
@settings(settings.get_profile("sink-differential"))
def test_the_plain_form_writes_what_the_reference_does(
    sink_redis: redis_sync.Redis, calls: list[list[ir.Op]]
) -> None:
    twin = start(sink_redis, False)
    prev = ""
    for n, ops in enumerate(calls, 1):
        txn = f"f.1:{n}"
        call = ir.ApplyCall(header(txn, prev, 0, True, len(ops), 0), ops, [checkpoint(txn)])
        assert plain_form(sink_redis, LAY, call) == ("reply", execute(twin.ks, call, LAY))
        twin.check()
        prev = txn


# shaped tables in the plain form: "t" with a key template, a unique, a set and a zset index and
# its `b` stored hidden; "u" with indexes alone (their members: the mirror's row keys); binary
# key parts, as the random values may be bytes
SHAPED_PLAIN = {
    "t": Derivation(
        key=(Part("app:t:"), Part("id", field=True, integer=True)),
        indexes=(
            IndexSpec("u", (Part("app:t-by-id:"), Part("id", field=True))),
            IndexSpec("s", (Part("app:t-by-a:"), Part("a", field=True, binary=True))),
            IndexSpec("z", (Part("app:t-by-b"),), score=HIDDEN + "b"),
        ),
        hidden=True,
    ),
    "u": Derivation(
        key=None, indexes=(IndexSpec("s", (Part("app:u-by-b:"), Part("b", field=True, binary=True))),)
    ),
}


@given(calls=insert_calls(), scores=st.lists(st.integers(-5, 5) | st.floats(allow_nan=False), max_size=40))
@settings(settings.get_profile("sink-differential"))
def test_the_plain_form_of_shaped_inserts_writes_what_the_reference_does(
    sink_redis: redis_sync.Redis, calls: list[list[ir.Op]], scores: list[float]
) -> None:
    """Shaped rows go in the plain form while none of them has entries yet; a call that writes a
    row the mirror holds is refused by the guard (the script moves its entries) and applied as the
    script: the same keyspace as the reference either way."""
    twin = start(sink_redis, False)
    shaped = {n: replace(TABLES[n], derive=d.spec_text()) for n, d in SHAPED_PLAIN.items()}
    prev = ""
    for n, ops in enumerate(calls, 1):
        for k, op in enumerate(ops):
            if isinstance(op, ir.WriteRow):
                row = dict(op.row)
                if op.table.table == "t":  # `b` hidden, often a number (the zset's score)
                    b = row.pop("b", None)
                    row[HIDDEN + "b"] = scores.pop() if scores else b
                ops[k] = ir.WriteRow(shaped[op.table.table], op.suffix, row)
        txn = f"f.1:{n}"
        call = ir.ApplyCall(header(txn, prev, 0, True, len(ops), 0), ops, [checkpoint(txn)])
        outcome = plain_form(sink_redis, LAY, call)
        if outcome is None or outcome[0] == "refused":  # (None: a value hiredis packs, a row twice)
            assert outcome is None or outcome[1].startswith(b"DERIVED "), outcome
            sink_redis.delete(LAY.guard_key)  # (the guard's refusal count: the reference has none)
            assert twin.call(call)[0] == "reply"
        else:
            assert outcome == ("reply", execute(twin.ks, call, LAY))
            twin.check()
        prev = txn


def checkpoint(txn: str) -> ir.SetFields:
    return ir.SetFields(LAY.checkpoint_key, (("id", txn),))


def test_the_script_and_the_plain_form_replace_a_row_alike(sink_redis: redis_sync.Redis) -> None:
    row_key = f"{T.base}:1"
    write = ir.WriteRow(T, "1", {"id": 1, "a": 2, "b": None})
    dumps = []
    for form in ("script", "plain"):
        twin = start(sink_redis, False)
        sink_redis.hset(row_key, "b", "5")  # a MINIMAL image merged into a row the mirror lacked
        call = ir.ApplyCall(header("f.1:1", "", 0, True, 1, 0), [write], [checkpoint("f.1:1")])
        if form == "script":
            twin._script(args=twin.encode(call))
        else:
            assert plain_form(sink_redis, LAY, call) == ("reply", 1)
        dumps.append(redis_dump(sink_redis)[row_key.encode()])
    assert dumps[0] == dumps[1]
