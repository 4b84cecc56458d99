"""The wire codec of the apply IR: typed ops (ir.py) in, the ARGV the apply script reads out.

The only Python code that knows lua/apply.lua's instruction stream: the header's field order, the
two-letter opcodes, shape ids (op K), runs of JSON rows (op WJN), the rows op Q checks, `len:value`
runs. The planner says what a call does; this module says how the script is told.

Per call, `CallEncoder` sends each row shape's column names once (op K) and each table's keys
once per run of its rows (op C), registering the table in `__tables` once (op A) — until a table
action, which may remove it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain

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
    ResyncHeader,
    SetFields,
    SkipSequence,
    TableKeys,
    UpdateChanged,
    UpdateRow,
    WriteRow,
)
from service.sink.keys import KeyLayout
from service.sink.values import hash_text, json_document, row_fields, same_text

__all__ = [
    "HEADER_FIELDS",
    "Arg",
    "CallEncoder",
    "header_args",
    "len_values",
    "resync_finish_args",
    "resync_reread_args",
    "resync_rows_args",
]

Arg = str | bytes | int  # an apply call's argument

HEADER_FIELDS = 12  # apply.lua's ARGV[1..12]; its ops from ARGV[13]

# table actions: the tables the call registered in `__tables` may be gone (op A again)
_ACTIONS = (AddMember, RemoveMember, BeginResync, RestartResync, CarryResync)


def header_args(h: ApplyHeader) -> list[Arg]:
    """The apply script's first 12 arguments, in its order."""
    return [
        h.lease_key,
        h.token,
        h.checkpoint_key,
        h.expected_prev,
        h.progress_key,
        h.txn_id,
        h.chunk,
        "1" if h.final else "0",
        h.seq_key,
        h.nseq,
        h.resync_key,
        h.done,
    ]


def len_values(values: Iterable[str | bytes]) -> bytes:
    """Values in one argument, `len:value` each (lengths in bytes): one argument is far cheaper
    for Redis than many (op U's unchanged values; cascade.lua's referenced values)."""
    out: list[bytes] = []
    for v in values:
        raw = v.encode() if isinstance(v, str) else v
        out.append(b"%d:" % len(raw))
        out.append(raw)
    return b"".join(out)


class CallEncoder:
    """Encodes apply calls for one key layout (each table's rows as hash fields or JSON documents:
    `TableKeys.json`).

    `plain_rows`: whole hash rows as field-value pairs (op WP), the form plain.py can send
    without the script."""

    __slots__ = (
        "_lean",
        "_plain",
        "_registered",
        "_run_at",
        "_run_end",
        "_run_out",
        "_run_rows",
        "_shapes",
        "_table",
        "_tables_key",
    )

    def __init__(self, layout: KeyLayout, plain_rows: bool = False) -> None:
        self._tables_key = layout.tables_key
        self._plain = plain_rows
        self._shapes: dict[tuple[str, ...], str] = {}
        self._registered: set[str] = set()
        self._table: TableKeys | None = None
        self._lean: dict[str, list[Arg]] = {}
        self._run_out: list[Arg] | None = None
        self._run_at = 0  # the run's row count: its index in the call's ARGV, and its value
        self._run_rows = 0
        self._run_end = -1

    def encode(self, call: ApplyCall) -> list[Arg]:
        """The ARGV of `call` (EVALSHA with no keys)."""
        return header_args(call.header) + self.body(call.ops, call.tail)

    def body(self, ops: Sequence[Op], tail: Sequence[Op] = ()) -> list[Arg]:
        """The instructions of one call (ARGV from 13): op Q first, when UpdateChanged ops need it."""
        self._shapes.clear()
        self._registered.clear()
        self._table = None
        self._lean.clear()
        self._run_out = None
        out: list[Arg] = []
        self._ops(out, ops)
        if tail:
            self._ops(out, tail)
        if not self._lean:
            return out
        check: list[Arg] = ["Q", len(self._lean)]
        for tid, keys in self._lean.items():
            check += (tid, len(keys), *keys)
        return check + out

    def _ops(self, out: list[Arg], ops: Sequence[Op]) -> None:
        append = out.append
        for op in ops:
            if isinstance(op, WriteRow):  # most ops of a load: inline
                t = op.table
                if t is not self._table:
                    self._use(out, t)
                row = op.row
                if t.json:  # in a run (op WJN) while no other op came between its rows
                    if out is self._run_out and len(out) == self._run_end:
                        self._run_rows += 1
                        out[self._run_at] = self._run_rows
                    else:
                        self._run_at, self._run_rows = len(out) + 1, 1
                        out += ("WJN", 1)
                    out += (op.suffix, json_document(row))
                    self._run_out, self._run_end = out, len(out)
                elif self._plain:  # field-value pairs, as plain HSETs take them (plain.py)
                    fields = row_fields(row)
                    out += ("WP", op.suffix, len(fields) // 2)
                    out += fields
                else:
                    whole = True
                    for v in row.values():
                        if v is None:
                            whole = False
                            break
                    # the shape: the row's columns, less the NULL ones (not stored)
                    shape = tuple(row) if whole else tuple([k for k, v in row.items() if v is not None])
                    out += ("W", op.suffix, self._shape_id(out, shape))
                    for v in row.values():
                        if v is not None:
                            append(hash_text(v))
            elif isinstance(op, UpdateChanged):
                self._row(out, op.table)
                self._update_changed(out, op)
            elif isinstance(op, UpdateRow):
                self._row(out, op.table)
                if op.table.json:
                    out += ("WJN", 1, op.suffix, json_document(op.after))
                else:
                    self._update_row(out, op.suffix, op.before, op.after)
            elif isinstance(op, DeleteRow):
                self._row(out, op.table)
                out += ("E", op.suffix)
            elif isinstance(op, MergeRow):
                self._row(out, op.table)
                self._merge_row(out, op)
            elif isinstance(op, MoveRow):
                self._row(out, op.table)
                out += ("MV", op.old, op.new)
            elif isinstance(op, RereadRow):
                self._row(out, op.table)
                out += ("N", op.suffix)
            else:
                self._other(out, op)

    def _row(self, out: list[Arg], t: TableKeys) -> None:
        if t is not self._table:
            self._use(out, t)

    def _use(self, out: list[Arg], t: TableKeys) -> None:
        """Make `t` the table of the row ops that follow (op C), registered once per call (op A)."""
        if t == self._table:
            self._table = t
            return
        if t.tid not in self._registered:
            self._registered.add(t.tid)
            out += ("A", self._tables_key, t.tid)
        out += ("C", t.base, t.index, t.tid, t.touched, t.derive)
        self._table = t

    def _shape_id(self, out: list[Arg], shape: tuple[str, ...]) -> str:
        """The id of a row shape (its non-NULL column names) in this call; its op K goes out once
        per call, the rows of that shape then carry only values."""
        sid = self._shapes.get(shape)
        if sid is None:
            sid = self._shapes[shape] = str(len(self._shapes) + 1)
            out += ("K", sid, len(shape), *shape)
        return sid

    def _update_row(self, out: list[Arg], suffix: str, before: Row, after: Row) -> None:
        """Op U: the values that changed (a mask of the after image's non-NULL columns marks
        them) and the columns that became NULL; the unchanged values travel in one argument
        (`len_values`): the script reads them only to replace the row when the stored one is not
        the before image. A value is unchanged when it is the before image's very object (the
        decoder reuses it when the raw bytes are equal) or `same_text` says so."""
        names: list[str] = []
        changed: list[Arg] = []
        rest: list[bytes] = []
        mask: list[str] = []
        nulled: list[str] = []
        for k, v in after.items():
            b = before.get(k)
            if v is None:
                if b is not None:
                    nulled.append(k)
                continue
            names.append(k)
            text = hash_text(v)
            if v is b or same_text(v, b):
                mask.append("0")
                raw = text.encode() if isinstance(text, str) else text
                rest.append(b"%d:" % len(raw))
                rest.append(raw)
            else:
                mask.append("1")
                changed.append(text)
        sid = self._shape_id(out, tuple(names))
        out += ("U", suffix, sid, "".join(mask), len(nulled), *nulled)
        out += changed
        out.append(b"".join(rest))

    def _update_changed(self, out: list[Arg], op: UpdateChanged) -> None:
        """Op UL: only the values that changed (named by the shape) and the columns that became
        NULL, for a row that op Q checks is in Redis."""
        names: list[str] = []
        changed: list[Arg] = []
        nulled: list[str] = []
        before = op.before
        for k, v in op.after.items():
            b = before.get(k)
            if v is None:
                if b is not None:
                    nulled.append(k)
            elif v is not b and not same_text(v, b):
                names.append(k)
                changed.append(hash_text(v))
        m = op.moves
        out += ("UL" if m is None else "UM", self._shape_id(out, tuple(names)), len(nulled), *nulled)
        out += changed
        if m is not None:  # op UM: the entry moves, applied when the stored record is `expected`
            out += (m.member, m.expected, m.record, len(m.drops), *chain.from_iterable(m.drops))
            out += (len(m.adds), *chain.from_iterable(m.adds), len(m.counts))
            for field, n in m.counts:
                out += (field, n)
        t = op.table
        keys = self._lean.get(t.tid)
        if keys is None:
            keys = self._lean[t.tid] = []
        keys.append(f"{t.base}:{op.suffix}")

    def _merge_row(self, out: list[Arg], op: MergeRow) -> None:
        """Op P (a hash's present columns, then the NULL ones) or PJ (a JSON patch)."""
        if op.table.json:
            out += ("PJ", op.suffix, json_document(op.row))
            return
        out += ("P", op.suffix, 0)
        at = len(out) - 1
        nulls: list[str] = []
        for k, v in op.row.items():
            if v is None:
                nulls.append(k)
                continue
            out.append(k)
            out.append(hash_text(v))
        out[at] = (len(out) - at - 1) // 2
        out.append(len(nulls))
        out += nulls

    def _other(self, out: list[Arg], op: Op) -> None:
        if isinstance(op, _ACTIONS):
            self._registered.clear()
            self._table = None
        if isinstance(op, SkipSequence):
            out.append("S")
        elif isinstance(op, AppendChange):
            out += ("XA", op.stream, op.maxlen, len(op.fields))
            for k, v in op.fields:
                out += (k, v)
        elif isinstance(op, JoinFkSet):
            out += ("FA", op.set, op.suffix)
        elif isinstance(op, LeaveFkSet):
            out += ("FR", op.set, op.suffix)
        elif isinstance(op, CascadeDelete):
            out += ("FD", op.cid, op.old)
        elif isinstance(op, CascadeUpdate):
            mask = "".join("0" if v is None else "1" for v in op.values)
            out += ("FU", op.cid, op.old, mask, *(b"" if v is None else v for v in op.values))
        elif isinstance(op, FkGraph):
            out += fk_graph_args(op)
        elif isinstance(op, AddMember):
            out += ("A", op.set, op.member)
        elif isinstance(op, RemoveMember):
            out += ("R", op.set, op.member)
        elif isinstance(op, DeleteKey):
            out += ("D", op.key)
        elif isinstance(op, SetFields):
            out += ("H", op.key, len(op.fields))
            for k, v in op.fields:
                out += (k, v)
        elif isinstance(op, DeleteFields):
            out += ("X", op.key, len(op.fields), *op.fields)
        elif isinstance(op, FenceResync):
            out += ("RB", op.tid)
        elif isinstance(op, BeginResync):
            out += ("RS", op.tid, op.reason, op.touched)
        elif isinstance(op, RestartResync):
            out += ("RR", op.tid, op.stale, op.touched)
        elif isinstance(op, CarryResync):
            out += ("RC", op.old_tid, op.new_tid, op.stale, op.touched)
        elif isinstance(op, ClearFkMemberships):
            out += ("FC", int(op.json))
        elif isinstance(op, ClearRows):
            out += ("CU", op.record, op.uid, op.limit, op.index, op.base)
        elif isinstance(op, MoveRows):
            out += ("MU", op.record, op.uid, op.limit, op.index, op.base, op.to_index, op.to_base)
        elif isinstance(op, CopyMembers):
            out += ("CP", op.record, op.uid, op.limit, op.cursor, op.index, op.to, op.if_resync)
        else:  # pragma: no cover - the row ops are encoded by `_ops`
            raise TypeError(f"not an apply op: {op!r}")


def fk_graph_args(g: FkGraph) -> list[Arg]:
    """Op F: the constraints the cascade ops of the call follow (cascade.lua's `fk_graph`)."""
    out: list[Arg] = ["F", g.resync_key, int(g.json), len(g.constraints)]
    for c in g.constraints:
        t = c.child
        out += (c.cid, c.parent_tid, t.tid, t.base, t.index, t.touched, t.derive)
        out += (c.set_prefix, c.on_delete, c.on_update, len(c.child_fields))
        out += c.child_fields
        out += c.parent_fields
    return out


# -- the resync scripts (lua/resync_rows.lua, resync_reread.lua, resync_finish.lua) ----------------
def _copied_row(op: WriteRow) -> list[Arg]:
    """A row read from the source: count f v ... (json rows: 1, '' and the document)."""
    if op.table.json:
        return [1, "", json_document(op.row)]
    fields = row_fields(op.row)
    return [len(fields) // 2, *fields]


def resync_rows_args(h: ResyncHeader, stale_key: str, rows: Sequence[WriteRow]) -> list[Arg]:
    """RESYNC_ROWS: write the rows a resync read (those the stream did not write since)."""
    t = h.table
    out: list[Arg] = [h.lease_key, h.token, h.resync_key, t.tid, h.generation]
    out += [t.touched, stale_key, t.index, t.base, "1" if t.json else "0", t.derive]
    for op in rows:
        out.append(op.suffix)
        out += _copied_row(op)
    return out


def resync_reread_args(h: ResyncHeader, entries: Sequence[tuple[str, str, WriteRow | None]]) -> list[Arg]:
    """RESYNC_REREAD: each `__partial` entry (suffix, merges) with its row as read again (None:
    the source no longer has it)."""
    t = h.table
    out: list[Arg] = [h.lease_key, h.token, h.resync_key, t.tid, h.generation]
    out += [t.touched, t.index, t.base, "1" if t.json else "0", t.derive]
    for suffix, merges, op in entries:
        out += [suffix, merges, 0, 0] if op is None else [suffix, merges, 1, *_copied_row(op)]
    return out


def resync_finish_args(
    h: ResyncHeader, stale_key: str, limit: int, settle_key: str, copied_at: str
) -> list[Arg]:
    """RESYNC_FINISH: remove up to `limit` stale rows; end the resync (and open its settle window
    until `copied_at`, if not '') once none is left."""
    t = h.table
    out: list[Arg] = [h.lease_key, h.token, h.resync_key, t.tid, t.touched, stale_key, t.index, t.base]
    return [*out, h.generation, limit, settle_key, copied_at]
