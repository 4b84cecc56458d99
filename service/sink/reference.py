"""The reference executor: one apply call of the IR (service/sink/ir.py) over an in-memory keyspace.

The sink's twin, as the pure decoder is the compiled one's: what lua/apply.lua (with common.lua
and cascade.lua) does to Redis for each op, written as plain Python over `Keyspace`. The
differential tests (tests/sink/) run random calls through both and require the same keyspace;
unit tests of the sink can assert on the keyspace a plan leaves instead of its ARGV bytes.

Values become stored text through service/sink/values.py, the code the real path uses. The script
batches the `__keys`/`__touched` and foreign-key set writes of row ops and runs them before the
next op that may read a set: the same result as writing them at once, which is what this does.
Pure: no I/O (an import-linter contract keeps redis out).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.binlog.rowchange import Row
from service.sink.ir import (
    AddMember,
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
    DeleteFields,
    DeleteKey,
    DeleteRow,
    FenceResync,
    FkGraph,
    JoinFkSet,
    LeaveFkSet,
    MergeRow,
    MoveRow,
    MoveRows,
    Op,
    RemoveMember,
    RereadRow,
    RestartResync,
    SetFields,
    SkipSequence,
    TableKeys,
    UpdateChanged,
    UpdateRow,
    WriteRow,
)
from service.sink.keys import (
    DERIVED_SUFFIX,
    GENERATION_FIELD,
    MARK_FENCED,
    PARTIAL_SUFFIX,
    TOUCHED_SUFFIX,
    KeyLayout,
    resync_mark,
)
from service.sink.reference_checks import check_call
from service.sink.reference_derive import derive, underive
from service.sink.reference_fk import Cascades
from service.sink.reference_keyspace import Keyspace, ScriptError, as_bytes, merge_json
from service.sink.values import json_document, row_fields, same_text

__all__ = ["Reply", "ScriptError", "apply_call", "changed_columns", "execute", "partial_key_of", "row_pairs"]

Reply = int | bytes  # the call's first sequence number, or a table-work unit's rows left/cursor
_GENERATION = re.compile(rb"[0-9]+ (.*)", re.S)
_FENCED = MARK_FENCED.encode() + b" "


def _reason(mark: bytes) -> bytes:
    """The reason of a `__resync` value: "{generation} {reason}" or "- {reason}" (common.lua's
    reason_of; anything else is its own reason)."""
    if mark.startswith(_FENCED):
        return mark[len(_FENCED) :]
    m = _GENERATION.fullmatch(mark)
    return m.group(1) if m else mark


def _mark(generation: int | str, reason: bytes) -> bytes:
    """A `__resync` value (keys.resync_mark), for a reason of any bytes."""
    text = resync_mark(generation, reason.decode("utf-8", "surrogateescape"))
    return text.encode("utf-8", "surrogateescape")


def partial_key_of(touched: str | bytes) -> bytes:
    """`{table}:__touched` -> `{table}:__partial` (common.lua's partial_of)."""
    return as_bytes(touched)[: -len(TOUCHED_SUFFIX)] + PARTIAL_SUFFIX.encode()


def changed_columns(before: Row, after: Row) -> tuple[list[tuple[str, Any]], list[str]]:
    """An UPDATE's changed non-NULL columns (name, value) and the columns that became NULL, as
    the planner sends them (ops U/UL): a value is unchanged when it is the before image's very
    object or is stored as the same text (values.same_text)."""
    changed: list[tuple[str, Any]] = []
    nulled: list[str] = []
    for k, v in after.items():
        b = before.get(k)
        if v is None:
            if b is not None:
                nulled.append(k)
        elif v is not b and not same_text(v, b):
            changed.append((k, v))
    return changed, nulled


def row_pairs(row: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    """A row's non-NULL columns as a hash's (field, value) pairs (values.row_fields)."""
    fields = row_fields(row)
    return [(as_bytes(f), as_bytes(v)) for f, v in zip(fields[::2], fields[1::2], strict=True)]


@dataclass(slots=True)
class _Call:
    """The state of one call (apply.lua's locals)."""

    ks: Keyspace
    h: ApplyHeader
    tables_key: bytes
    resync: bytes
    fk: Cascades
    marks: dict[str, bool] = field(default_factory=dict)  # table id -> in resync (read once)
    registered: set[str] = field(default_factory=set)
    seq: int = 0
    left: Reply | None = None

    def in_resync(self, t: TableKeys) -> bool:
        m = self.marks.get(t.tid)
        if m is None:
            m = self.marks[t.tid] = self.ks.hexists(self.resync, as_bytes(t.tid))
        return m

    def row_written(self, t: TableKeys, suffix: str, add: bool) -> None:
        s = as_bytes(suffix)
        (self.ks.sadd if add else self.ks.srem)(as_bytes(t.index), [s])
        if self.in_resync(t):
            self.ks.sadd(as_bytes(t.touched), [s])

    def row_merged(self, t: TableKeys, suffix: str) -> None:
        """A partial image: a resync in flight reads the row again at its end (`__partial`)."""
        self.ks.sadd(as_bytes(t.index), [as_bytes(suffix)])
        if self.in_resync(t):
            self.ks.hincrby(partial_key_of(t.touched), as_bytes(suffix), 1)

    def write_row(self, key: bytes, pairs: list[tuple[bytes, bytes]]) -> None:
        """The row becomes `pairs`. As the script does: one HSET first, kept when the key then
        holds exactly these fields; otherwise DEL and HSET."""
        c = len(pairs)
        if 0 < c <= 500:
            try:
                added = self.ks.hset(key, pairs)
            except ScriptError:  # another type: redis.pcall
                added = -1
            if added >= 0 and self.ks.hlen(key) == c:
                return
        self.ks.delete(key)
        self.ks.hset(key, pairs)

    def mark(self, tid: str, reason: bytes, touched: str, stale: str | None = None) -> None:
        """(Re)start tid's resync: a new generation, nothing touched yet."""
        gen = self.ks.hincrby(self.resync, GENERATION_FIELD.encode(), 1)
        self.ks.hset(self.resync, [(as_bytes(tid), _mark(gen, reason))])
        self.ks.delete(as_bytes(touched), partial_key_of(touched))
        if stale is not None:
            self.ks.delete(as_bytes(stale))
        self.marks.clear()

    def unit_done(self, key: bytes, uid: bytes) -> bool:
        txn, state = self.ks.hmget(key, [b"txn", uid])
        if txn != as_bytes(self.h.txn_id):  # another transaction's record (it finished)
            self.ks.delete(key)
            self.ks.hset(key, [(b"txn", as_bytes(self.h.txn_id))])
            return False
        return state == b"done"

    # -- the ops ---------------------------------------------------------------------------------
    def row_op(self, op: Op) -> None:
        t: TableKeys = op.table  # type: ignore[union-attr]
        if t.tid not in self.registered:  # each table joins `__tables` once per call (codec.py)
            self.registered.add(t.tid)
            self.ks.sadd(self.tables_key, [as_bytes(t.tid)])
        base = as_bytes(t.base) + b":"
        if isinstance(op, WriteRow):
            key = base + as_bytes(op.suffix)
            if t.json:
                self.ks.set(key, json_document(op.row))
            else:
                self.write_row(key, row_pairs(op.row))
            self.row_written(t, op.suffix, True)
        elif isinstance(op, MergeRow):
            key = base + as_bytes(op.suffix)
            if t.json:
                self.ks.set(key, merge_json(self.ks.get(key), json_document(op.row)))
            else:
                pairs = row_pairs(op.row)
                if pairs:
                    self.ks.hset(key, pairs)
                self.ks.hdel(key, [k.encode() for k, v in op.row.items() if v is None])
            self.row_merged(t, op.suffix)
        elif isinstance(op, UpdateRow) and t.json:  # a whole document, as WriteRow
            self.ks.set(base + as_bytes(op.suffix), json_document(op.after))
            self.row_written(t, op.suffix, True)
        elif isinstance(op, UpdateRow):
            key = base + as_bytes(op.suffix)
            changed, nulled = changed_columns(op.before, op.after)
            if self.in_resync(t) or not self.ks.exists(key):
                self.write_row(key, row_pairs(op.after))
                self.row_written(t, op.suffix, True)
            else:
                if changed:
                    self.ks.hset(key, row_pairs(dict(changed)))
                self.ks.hdel(key, [k.encode() for k in nulled])
        elif isinstance(op, UpdateChanged):  # the header's check found the row
            key = base + as_bytes(op.suffix)
            changed, nulled = changed_columns(op.before, op.after)
            if changed:
                self.ks.hset(key, row_pairs(dict(changed)))
            self.ks.hdel(key, [k.encode() for k in nulled])
        elif isinstance(op, DeleteRow):
            self.ks.delete(base + as_bytes(op.suffix))
            self.row_written(t, op.suffix, False)
        elif isinstance(op, MoveRow):  # the new suffix joins `__keys` by the MergeRow after it
            src = base + as_bytes(op.old)
            if self.ks.exists(src):
                self.ks.rename(src, base + as_bytes(op.new))
            self.row_written(t, op.old, False)
        else:
            assert isinstance(op, RereadRow)
            self.row_merged(t, op.suffix)
        if t.derive and not isinstance(op, RereadRow):  # apply.lua's `rederive` after the row op
            derived = base + DERIVED_SUFFIX.encode()
            for suffix in (op.old, op.new) if isinstance(op, MoveRow) else (op.suffix,):
                s = as_bytes(suffix)
                derive(self.ks, t.derive, base + s, derived, s)

    def table_unit(self, op: ClearRows | MoveRows | CopyMembers) -> None:
        key, uid = as_bytes(op.record), as_bytes(op.uid)
        todo = not key or not self.unit_done(key, uid)
        left: Reply
        if isinstance(op, CopyMembers):
            left = b"0"
            cond = op.if_resync
            if todo and (not cond or self.ks.hexists(self.resync, as_bytes(cond))):
                to = as_bytes(op.to)
                if op.cursor == "":
                    self.ks.delete(to)
                # SSCAN: every member at once, cursor 0 (Redis: a small set too; a big one in
                # pages whose union is the same)
                self.ks.sadd(to, self.ks.smembers(as_bytes(op.index)))
        else:
            left = 0
            if todo:
                index, base = as_bytes(op.index), as_bytes(op.base)
                self.fk.clear_for(base)
                ms = self.ks.spop(index, op.limit)
                derived = base + b":" + DERIVED_SUFFIX.encode()
                if self.ks.exists(derived):  # a shaped table's entries go with its rows
                    for m in ms:
                        underive(self.ks, derived, m)
                if isinstance(op, ClearRows):
                    for m in ms:
                        self.fk.unlink(base + b":" + m, m)
                        self.ks.delete(base + b":" + m)
                else:
                    if key:
                        self.ks.hset(key, [(b"to " + as_bytes(op.to_index), as_bytes(op.to_base))])
                    to = as_bytes(op.to_base) + b":"
                    for m in ms:
                        self.fk.unlink(base + b":" + m, m)
                        if self.ks.exists(base + b":" + m):
                            self.ks.rename(base + b":" + m, to + m)
                    self.ks.sadd(as_bytes(op.to_index), ms)
                left = self.ks.scard(index)
        if todo and key and left in (0, b"0"):
            self.ks.hset(key, [(uid, b"done")])
        self.fk.clear_done()
        self.left = left

    def other_op(self, op: Op) -> None:
        ks = self.ks
        if isinstance(op, _ACTIONS):  # they may remove a table from `__tables`: row ops add it again
            self.registered.clear()
        if isinstance(op, SkipSequence):
            self.seq += 1
        elif isinstance(op, AppendChange):
            fields = (b"seq", str(self.seq).encode(), *(as_bytes(x) for kv in op.fields for x in kv))
            ks.xadd(as_bytes(op.stream), op.maxlen, fields)
            self.seq += 1
        elif isinstance(op, SetFields):
            if op.fields:
                ks.hset(as_bytes(op.key), [(as_bytes(f), as_bytes(v)) for f, v in op.fields])
        elif isinstance(op, DeleteKey):
            ks.delete(as_bytes(op.key))
        elif isinstance(op, DeleteFields):
            ks.hdel(as_bytes(op.key), [as_bytes(f) for f in op.fields])
            if as_bytes(op.key) == self.resync:
                self.marks.clear()
        elif isinstance(op, AddMember):
            ks.sadd(as_bytes(op.set), [as_bytes(op.member)])
        elif isinstance(op, RemoveMember | LeaveFkSet):
            ks.srem(as_bytes(op.set), [as_bytes(op.member if isinstance(op, RemoveMember) else op.suffix)])
        elif isinstance(op, JoinFkSet):
            ks.sadd(as_bytes(op.set), [as_bytes(op.suffix)])
        elif isinstance(op, ClearRows | MoveRows | CopyMembers):
            self.table_unit(op)
        elif isinstance(op, ClearFkMemberships):
            self.fk.clear_json = op.json
        elif isinstance(op, FkGraph):
            self.fk.graph(op)
        elif isinstance(op, CascadeDelete | CascadeUpdate):
            self.fk.apply(op)
        elif isinstance(op, FenceResync):  # a resync in flight writes no more rows
            v = ks.hget(self.resync, as_bytes(op.tid))
            if v is not None:
                ks.hset(self.resync, [(as_bytes(op.tid), _mark(MARK_FENCED, _reason(v)))])
        elif isinstance(op, BeginResync):
            self.mark(op.tid, as_bytes(op.reason), op.touched)
        elif isinstance(op, RestartResync):  # TRUNCATE
            v = ks.hget(self.resync, as_bytes(op.tid))
            if v is not None:
                self.mark(op.tid, _reason(v), op.touched, op.stale)
        elif isinstance(op, CarryResync):  # RENAME
            v = ks.hget(self.resync, as_bytes(op.old_tid))
            if v is not None:
                self.mark(op.new_tid, _reason(v), op.touched)
            else:
                ks.hdel(self.resync, [as_bytes(op.new_tid)])
                ks.delete(as_bytes(op.stale), as_bytes(op.touched), partial_key_of(op.touched))
                self.marks.clear()
        else:
            raise ScriptError(f"BAD_PLAN unknown op {op!r}")


_ROW_OPS = (WriteRow, MergeRow, UpdateRow, UpdateChanged, DeleteRow, MoveRow, RereadRow)
_ACTIONS = (AddMember, RemoveMember, BeginResync, RestartResync, CarryResync)  # as codec.py's


def execute(ks: Keyspace, call: ApplyCall, layout: KeyLayout) -> Reply:
    """Run `call` over `ks` (its ops, then its tail), for a mirror of `layout`: `apply_call`."""
    ops = [*call.ops, *call.tail] if call.tail else call.ops
    return apply_call(ks, call.header, ops, tables_key=layout.tables_key)


def apply_call(ks: Keyspace, header: ApplyHeader, ops: Sequence[Op], *, tables_key: str) -> Reply:
    """Run one apply call over `ks`, as apply.lua would over Redis: its checks (lease, checkpoint
    chain, chunk progress, the rows of UpdateChanged ops) first, raising ScriptError with the
    script's error text and writing nothing; then the ops in order. Returns what the script does:
    the call's first change sequence number, or the last table-work unit's rows left (cursor).

    `tables_key`: the layout's `__tables` set, which each row op's table joins (once per call);
    a table's rows are JSON documents when its keys say so (`TableKeys.json`)."""
    h = header
    first_chunk_seq, stale_progress = check_call(ks, h, ops)
    progress, txn, resync = as_bytes(h.progress_key), as_bytes(h.txn_id), as_bytes(h.resync_key)
    if stale_progress:
        ks.delete(progress)
    seq = ks.incrby(as_bytes(h.seq_key), h.nseq) - h.nseq + 1
    first = first_chunk_seq if first_chunk_seq is not None else seq
    call = _Call(ks, h, as_bytes(tables_key), resync, Cascades(ks), seq=seq)
    for op in ops:
        if isinstance(op, _ROW_OPS):
            call.row_op(op)
        else:
            call.other_op(op)
    if h.chunk > 0 and not h.final:
        ks.hset(progress, [(b"txn", txn), (b"rows", b"%d" % (h.done + h.nseq)), (b"first", b"%d" % first)])
    elif h.chunk > 0:
        ks.delete(progress)
    return call.left if call.left is not None else first
