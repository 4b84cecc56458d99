"""Differential tests through the real Planner: random transactions of a small source database
(inserts, updates with key changes, deletes, MINIMAL images, ON DELETE/UPDATE CASCADE and SET
NULL the source does not log, TRUNCATE, DROP, RENAME, resync starts) are planned into the IR by
service/sink/plan.py and run, as RedisMirror sends them (table work in units first, chunks for a
big transaction), through the reference executor and the real Lua; the keyspaces must agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import redis as redis_sync
from hypothesis import given, settings
from hypothesis import strategies as st

from service.binlog.rowchange import EventSpan, Op, Row, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink import ir
from service.sink.codec import CallEncoder
from service.sink.derive import Derivation, IndexSpec, Part
from service.sink.fks import ForeignKey, ForeignKeys
from service.sink.keys import KeyLayout
from service.sink.plan import ActionKind, Planner, TableAction, checkpoint_op
from service.sink.reference_keyspace import Keyspace
from service.sink.tablework import unit_ids, work_op
from service.transactions import Transaction
from tests.sink.differential import Twin

pytestmark = pytest.mark.redis

LAY = KeyLayout("m")
# "u"'s third column is stored hidden when it is shaped (derive.HIDDEN: a NUL first; its copies
# leave it out)
COLUMNS = {"t": ("id", "a", "b"), "c": ("id", "pid", "a"), "u": ("id", "a", "\0b"), "v": ("id", "a", "b")}
KEYED = frozenset(COLUMNS)  # "k" has no usable key: its rows are skipped
CHUNK = 3  # a transaction of more changes is sent in chunks
STEP = 2  # rows per call of whole-table work

ids = st.integers(1, 5)
KEYS = range(1, 6)
values = st.one_of(
    st.none(), st.integers(-5, 5), st.text(max_size=4), st.binary(max_size=3), st.floats(-1, 1)
)


@dataclass
class Source:
    """The source database the transactions come from: rows by table and id, and the child rows
    its foreign key (c.pid -> t.id) changes without logging them."""

    on_delete: str
    on_update: str
    rows: dict[str, dict[int, Row]] = field(default_factory=lambda: {n: {} for n in COLUMNS})

    def cascade(self, old: int, new: int | None) -> None:
        rule = self.on_delete if new is None else self.on_update
        for cid, row in list(self.rows["c"].items()):
            if row["pid"] != old:
                continue
            if rule == "CASCADE" and new is None:
                del self.rows["c"][cid]
            elif rule in ("CASCADE", "SET NULL"):
                row["pid"] = new if rule == "CASCADE" else None


def change(op: Op, table: str, before: Row | None, after: Row | None) -> RowChange:
    return RowChange(op, "s", table, before, after, EventSpan("f.1", 4, 8), 1, 1)


@st.composite
def txn_changes(draw: st.DrawFn, src: Source) -> tuple[list[RowChange], set[int]]:
    """The changes of one transaction, applied to `src` as drawn; which of them are partial."""
    out: list[RowChange] = []
    partial: set[int] = set()
    for _ in range(draw(st.integers(1, 5))):
        name = draw(st.sampled_from(["t", "t", "c", "c", "u", "k"]))
        rows = src.rows.get(name, {})
        minimal = draw(st.integers(0, 3)) == 0
        free = [i for i in KEYS if i not in rows]
        kinds = (["insert"] if free else []) + (["update", "delete"] if rows else [])
        kind = draw(st.sampled_from(kinds))
        if name == "k":  # no key: skipped, but a change-log entry keeps its number
            out.append(change(Op.INSERT, "k", None, {"x": draw(values)}))
            continue
        cols = COLUMNS[name]
        if kind == "insert":
            n = draw(st.sampled_from(free))
            row = {c: n if c == "id" else draw(ids if c == "pid" else values) for c in cols}
            if name == "c" and row["pid"] not in src.rows["t"]:
                row["pid"] = None
            rows[n] = row
            after = {c: v for c, v in row.items() if c == "id" or not minimal or draw(st.booleans())}
            out.append(change(Op.INSERT, name, None, after if minimal else dict(row)))
        else:
            n = draw(st.sampled_from(sorted(rows)))
            before = dict(rows[n])
            if kind == "delete":
                del rows[n]
                if name == "t":
                    src.cascade(n, None)
                out.append(change(Op.DELETE, name, {"id": n} if minimal else before, None))
            else:
                row = dict(before)
                for c in cols[1:]:
                    if draw(st.booleans()):
                        row[c] = draw(values) if c != "pid" else draw(st.sampled_from([None, *src.rows["t"]]))
                if draw(st.integers(0, 3)) == 0 and free:
                    row["id"] = draw(st.sampled_from(free))
                del rows[n]
                rows[row["id"]] = row
                if name == "t" and row["id"] != n:
                    src.cascade(n, row["id"])
                after = {c: v for c, v in row.items() if c == "id" or v != before[c] or not minimal}
                out.append(change(Op.UPDATE, name, {"id": n} if minimal else before, after))
        if minimal:
            partial.add(len(out) - 1)
    return out, partial


@st.composite
def actions(draw: st.DrawFn, src: Source) -> list[TableAction]:
    """A DDL transaction's table actions, applied to `src`."""
    kind = draw(st.sampled_from(list(ActionKind)))
    name = draw(st.sampled_from(["t", "c", "u"] if kind is not ActionKind.RENAME else ["u", "v"]))
    if kind in (ActionKind.DROP, ActionKind.TRUNCATE):  # (InnoDB refuses both for a parent in use)
        src.rows[name].clear()
    if kind is ActionKind.RENAME:
        other = "v" if name == "u" else "u"
        src.rows[other] = src.rows[name]
        src.rows[name] = {}
        return [TableAction(kind, "s", name, "s", other)]
    return [TableAction(kind, "s", name, reason=draw(st.sampled_from(["alter", "12 x", ""])))]


@dataclass
class Step:
    changes: list[RowChange]
    partial: set[int]
    actions: list[TableAction]
    lost: list[tuple[str, int]]  # rows the mirror loses before it (evicted, removed by hand)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Source, list[Step]]:
    rule = st.sampled_from(["CASCADE", "SET NULL", "RESTRICT"])
    src = Source(draw(rule), draw(rule))
    out: list[Step] = []
    for _ in range(draw(st.integers(1, 8))):
        lost = []  # a row the source has, so that an update of it may come
        held = [(name, i) for name in ("t", "u") for i in src.rows[name]]
        if held and draw(st.integers(0, 2)) == 0:
            lost.append(draw(st.sampled_from(held)))
        if draw(st.integers(0, 4)) == 0:
            out.append(Step([], set(), draw(actions(src)), lost))
        else:
            changes, partial = draw(txn_changes(src))
            out.append(Step(changes, partial, [], lost))
    return src, out


def header(txn: str, prev: str, chunk: int, final: bool, nseq: int, done: int) -> ir.ApplyHeader:
    return ir.ApplyHeader(
        LAY.lease_key, "tok", LAY.checkpoint_key, prev, LAY.progress_key, txn, chunk, final, LAY.seq_key,
        nseq, LAY.resync_key, done,
    )  # fmt: skip


def send(twin: Twin, planner: Planner, txn: Transaction, acts: list[TableAction], prev: str) -> None:
    """One transaction as RedisMirror.send does: its table work first, unit by unit, then its call
    (or its chunks); a call refused with ROWS_MISSING is planned again with whole rows."""
    txn_id = str(txn.end.position)
    fence, work = planner.table_work(acts) if acts else ([], [])
    for i, (uid, w) in enumerate(zip(unit_ids(work), work, strict=True)):
        op = work_op(LAY.table_ops_key, uid, w, STEP)[-1]
        twin.unit(header(txn_id, prev, 0, True, 0, 0), fence if i == 0 else [], list(w.fk), op)
    todo = list(range(len(txn.changes)))
    parts = [todo[at : at + CHUNK] for at in range(0, max(len(todo), 1), CHUNK)]
    done = 0
    for i, part in enumerate(parts, 1):
        final = i == len(parts)
        for _ in range(2):
            ops, n = next(planner.chunks(txn, acts if i == 1 else [], CHUNK, part))
            tail: list[ir.Op] = [checkpoint_op(LAY, {"id": txn_id})]
            if not final:
                tail = [ir.SetFields(LAY.progress_key, (("t:all", str(done + n)),))]
            chunk = 0 if len(parts) == 1 else i
            kind, reply = twin.call(ir.ApplyCall(header(txn_id, prev, chunk, final, n, done), ops, tail))
            if kind == "reply":
                break
            assert isinstance(reply, str) and reply.startswith("ROWS_MISSING"), reply
            for tid in planner.table_ids(txn):  # the mirror had a gap: whole rows (replies.py)
                planner.marks.gap(tid)
        else:
            raise AssertionError(f"{txn_id}: refused again with whole rows")
        done += n


# table "u" shaped with a key template and indexes (service/sink/derive.py): its entries follow
# every op, unit and resync write, in both executors; so do those of the child "c", whose rows
# the cascades delete and change too (cascade.lua calls derive.lua)
DERIVED_CHILD = Derivation(
    key=(Part("app:c:"), Part("id", field=True, integer=True)),
    indexes=(IndexSpec("s", (Part("app:c-by-pid:"), Part("pid", field=True))),),
).spec_text()
DERIVED = Derivation(
    key=(Part("app:u:"), Part("id", field=True, integer=True)),
    indexes=(
        IndexSpec("u", (Part("app:u-by-id:"), Part("id", field=True, integer=True))),
        IndexSpec("s", (Part("app:u-by-a:"), Part("a", field=True, binary=True))),
        IndexSpec("z", (Part("app:u-by-b"),), score="\0b"),
    ),
    hidden=True,
).spec_text()
JSON_DERIVED_CHILD = Derivation(
    key=(Part("app:c:"), Part("id", field=True, integer=True)),
    indexes=(IndexSpec("s", (Part("app:c-by-pid:"), Part("pid", field=True))),),
    json=(),
).spec_text()
# the same over json rows: derive reads the document's fields (numbers as their literal text)
JSON_DERIVED = Derivation(
    key=(Part("app:u:"), Part("id", field=True, integer=True)),
    indexes=(
        IndexSpec("u", (Part("app:u-by-id:"), Part("id", field=True, integer=True))),
        IndexSpec("s", (Part("app:u-by-a:"), Part("a", field=True))),
        IndexSpec("z", (Part("app:u-by-b"),), score="\0b"),
    ),
    json=(),
    hidden=True,
).spec_text()
SHAPES, JSON_SHAPES = {"u": DERIVED, "c": DERIVED_CHILD}, {"u": JSON_DERIVED, "c": JSON_DERIVED_CHILD}


@pytest.mark.parametrize(
    ("json_mode", "changelog", "derived"),
    [
        (False, None, False),
        (False, 1000, False),
        (True, None, False),
        (False, None, True),
        (True, None, True),
    ],
    ids=["hash", "hash-log", "json", "hash-derived", "json-derived"],
)
def test_planned_transactions_leave_the_same_keyspace(
    sink_redis: redis_sync.Redis, json_mode: bool, changelog: int | None, derived: bool
) -> None:
    @settings(settings.get_profile("sink-differential"))
    @given(scenario=scenarios())
    def check(scenario: tuple[Source, list[Step]]) -> None:
        src, txns = scenario
        fk = ForeignKey("fk_c", "s", "c", ("pid",), "s", "t", ("id",), src.on_update, src.on_delete)
        fks = ForeignKeys((fk,))
        planner = Planner(
            LAY,
            lambda s, t: ("id",) if t in KEYED else None,
            json_mode,
            changelog_maxlen=changelog,
            derive_of=(lambda s, t: (JSON_SHAPES if json_mode else SHAPES).get(t, "")) if derived else None,
        )
        planner.cascades.foreign_keys = lambda: fks
        twin = Twin(sink_redis, LAY, json_mode, CallEncoder(LAY).encode, Keyspace())
        sink_redis.set(LAY.lease_key, "tok")
        twin.ks.set(LAY.lease_key.encode(), b"tok")
        for key, defs in planner.cascades.defs().items():  # what RedisMirror writes with the graph
            sink_redis.hset(key, mapping=defs)  # type: ignore[arg-type]
            twin.ks.hset(key.encode(), [(k.encode(), v) for k, v in defs.items()])
        prev = ""
        for n, step in enumerate(txns, 1):
            for name, i in step.lost:  # an update of it is refused (ROWS_MISSING), then whole rows
                key = f"{LAY.table_base('s', name)}:{i}"
                sink_redis.delete(key)
                twin.ks.delete(key.encode())
            end = Checkpoint(BinlogPosition("f.1", n))
            txn = Transaction(tuple(step.changes), (), None, 1, end, frozenset(step.partial))
            send(twin, planner, txn, step.actions, prev)
            prev = str(end.position)

    check()
