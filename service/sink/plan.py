"""Pure planning: a transaction (plus the table actions its DDL implies) -> the apply IR (ir.py).

What each call does to the mirror, as typed ops; how the apply script is told is the codec's job
(codec.py). No I/O here, so the whole mapping from row changes to Redis writes is unit-tested
without a server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from service.binlog.rowchange import Op, Row, RowChange
from service.checkpoint import BinlogPosition
from service.sink.cascades import CascadePlan
from service.sink.derive import entry_moves, has_documents, hides, read_fields, visible
from service.sink.fks import ForeignKeys, defs_key
from service.sink.ir import (
    AddMember,
    AppendChange,
    BeginResync,
    CarryResync,
    DeleteFields,
    DeleteKey,
    DeleteRow,
    EntryMoves,
    FenceResync,
    MergeRow,
    MoveRow,
    RemoveMember,
    RereadRow,
    RestartResync,
    SetFields,
    SkipSequence,
    TableKeys,
    Text,
    UpdateChanged,
    UpdateRow,
    WriteRow,
)
from service.sink.ir import Op as IrOp
from service.sink.keys import KeyLayout, escape
from service.sink.marks import TableMarks
from service.sink.tablework import TableWork
from service.sink.values import hash_text, json_document, key_text, same_text
from service.transactions import Transaction

__all__ = ["ActionKind", "IrOp", "KeyColumns", "Planner", "SkipCounter", "TableAction", "checkpoint_op"]


class ActionKind(StrEnum):
    DROP = "drop"  # DROP TABLE, or the table left the selection: rows and registration removed
    TRUNCATE = "truncate"  # rows removed, table stays mirrored
    RENAME = "rename"  # rows move to the new name
    RESYNC = "resync"  # rows will be re-read from the source (ALTER, or a newly selected table)
    REGISTER = "register"  # CREATE TABLE of a selected table


@dataclass(frozen=True, slots=True)
class TableAction:
    kind: ActionKind
    schema: str
    table: str
    new_schema: str | None = None  # rename target
    new_table: str | None = None
    reason: str = ""


@dataclass(slots=True)
class SkipCounter:
    """Rows not mirrored because their table has no usable key, per (schema, table)."""

    rows: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, schema: str, table: str) -> None:
        self.rows[(schema, table)] = self.rows.get((schema, table), 0) + 1


KeyColumns = Callable[[str, str], tuple[str, ...] | None]


@dataclass(slots=True)
class Planner:
    layout: KeyLayout
    key_columns: KeyColumns  # (schema, table) -> key columns, or None: no usable key (skip rows)
    json_mode: bool = False
    full_images: bool = True  # source logs FULL row images: inserts/updates replace the whole row
    changelog_maxlen: int | None = None  # None: no change-log stream
    skipped: SkipCounter = field(default_factory=SkipCounter)
    # Which tables' updates carry whole rows (UpdateRow) instead of their changed columns
    # (UpdateChanged): resync, gap and settle marks. The writer gives it; the apply replies and
    # the resyncs change it too (service/sink/marks.py)
    marks: TableMarks = field(default_factory=TableMarks)
    # The foreign keys between mirrored tables, as the catalog last read them (cascades.py)
    foreign_keys: Callable[[], ForeignKeys] | None = None
    # (schema, table) -> the fingerprint of its shape ("" unshaped, service/shaping.py), recorded
    # in `__shapes` by the action that (re)starts its rows (a cluster group: its own); None: not recorded
    shape_of: Callable[[str, str], str] | None = None
    # (schema, table) -> its derived entries' spec ("": none; service/sink/derive.py)
    derive_of: Callable[[str, str], str] | None = None
    # (schema, table) -> whether its rows are JSON documents (a section's `value`); None: json_mode
    json_of: Callable[[str, str], bool] | None = None
    # (schema, table) -> its keys: built once per table
    _table_keys: dict[tuple[str, str], TableKeys] = field(default_factory=dict, repr=False)
    # Per call (reset by `begin_call`): rows an earlier op of the call wrote (their update in the
    # same call carries the whole row: op Q checks rows before the call writes); whether a table
    # action came (which may change which rows and resyncs there are)
    _written: set[tuple[str, str, str]] = field(default_factory=set, repr=False)
    _acted: bool = field(default=False, repr=False)
    # key columns by table, read once per call by `_insert` (a DDL, which may change them, comes
    # in a batch of its own, its table actions first)
    _call_keys: dict[tuple[str, str], tuple[str, ...] | None] = field(default_factory=dict, repr=False)
    # the cascade ops of tables with foreign keys (service/sink/cascades.py)
    cascades: CascadePlan = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.cascades = CascadePlan(self.layout, self.key_columns, self.json_mode, self._suffix)
        self.cascades.derive_of = self.derive_of
        if self.foreign_keys is not None:
            self.cascades.foreign_keys = self.foreign_keys

    # -- row changes -----------------------------------------------------------------------------
    def table_keys(self, schema: str, table: str) -> TableKeys:
        """The keys of a table (built once per table: its row ops share the object)."""
        keys = self._table_keys.get((schema, table))
        if keys is not None and keys.derive and has_documents(keys.derive) and self.derive_of is not None:
            # a document's spec holds every table of it: another one's definition read again
            # (a DDL) makes a new spec of this one's too
            spec = self.derive_of(schema, table)
            if spec is not keys.derive and spec != keys.derive:
                keys = None
        if keys is None:
            lay = self.layout
            keys = self._table_keys[schema, table] = TableKeys(
                schema,
                table,
                lay.table_base(schema, table),
                lay.index_key(schema, table),
                lay.table_id(schema, table),
                lay.touched_key(schema, table),
                self.derive_of(schema, table) if self.derive_of is not None else "",
                self.json_of(schema, table) if self.json_of is not None else self.json_mode,
            )
        return keys

    def _suffix(self, cols: tuple[str, ...], row: Row | None) -> str | None:
        if row is None:
            return None
        if len(cols) == 1:
            v = row.get(cols[0])
            if v is None:
                return None
            if type(v) is int:  # digits and '-': nothing to escape
                return str(v)
            return escape(key_text(v))
        if any(row.get(c) is None for c in cols):
            return None
        return self.layout.row_suffix([row[c] for c in cols])

    def change_keys(
        self, ch: RowChange, cols: tuple[str, ...], partial: bool = False
    ) -> tuple[str | None, str | None]:
        """The row-key suffixes a change names: the old (before) and the new (after) one; None
        where the image has none or a key column is NULL (`cols`: the table's key columns)."""
        op = ch.op
        old = self._suffix(cols, ch.before) if op is not Op.INSERT else None
        new = self._suffix(cols, ch.after) if op is not Op.DELETE else None
        if op is Op.UPDATE and new is None and ch.before is not None and ch.after is not None:
            if partial or not self.full_images:
                # partial after-image: key columns it lacks did not change (MINIMAL logs only the
                # changed columns, so `SET b = 5` on key (a, b) brings b but not a)
                new = self._suffix(cols, {**ch.before, **ch.after})
        return old, new

    def change_key(self, ch: RowChange, partial: bool = False) -> str | None:
        """The row-key suffix a change names (its new key, else its old one; the change log's
        `key`), or None when its row cannot be keyed (no usable key, a NULL key column)."""
        cols = self.key_columns(ch.schema, ch.table)
        if not cols:
            return None
        old, new = self.change_keys(ch, cols, partial)
        return new if new is not None else old

    def _insert(self, out: list[IrOp], ch: RowChange, key: tuple[str, str]) -> None:
        """An INSERT's whole row (most changes of a load), straight into `out`: what `change`
        plans for it, without a list per row."""
        after = ch.after
        assert after is not None
        if key in self._call_keys:
            cols = self._call_keys[key]
        else:
            cols = self._call_keys[key] = self.key_columns(ch.schema, ch.table)
        suffix = self._suffix(cols, after) if cols else None
        if suffix is None:
            self.skipped.add(ch.schema, ch.table)
            return
        t = self._table_keys.get(key)
        if t is None:
            t = self.table_keys(*key)
        if not t.json:  # only hash-row updates read it (`change`)
            self._written.add((ch.schema, ch.table, suffix))
        out.append(WriteRow(t, suffix, after))

    def change(self, ch: RowChange, partial: bool = False) -> list[IrOp] | None:
        """The ops of one change; None when the row cannot be keyed (counted, skipped).

        `partial`: the change's images lack columns (MINIMAL/NOBLOB), so an UPDATE merges the
        present columns into the stored row instead of replacing it."""
        full = self.full_images and not partial
        cols = self.key_columns(ch.schema, ch.table)
        if not cols:
            self.skipped.add(ch.schema, ch.table)
            return None
        op = ch.op
        old, new = self.change_keys(ch, cols, partial)
        if op is not Op.INSERT and old is None or op is not Op.DELETE and new is None:
            self.skipped.add(ch.schema, ch.table)
            return None
        t = self.table_keys(ch.schema, ch.table)
        out: list[IrOp] = []
        if old is not None and old != new:
            if new is not None and not full:
                out.append(MoveRow(t, old, new))  # keep the columns the partial image left out
            else:
                out.append(DeleteRow(t, old))
        if new is not None:
            after = ch.after
            assert after is not None
            if op is Op.UPDATE and full and old == new and ch.before is not None and not t.json:
                tid = t.tid
                whole = self._acted or self.marks.whole_rows(tid)
                moves = None
                if not whole and t.derive and _moves_entries(t.derive, ch.before, after):
                    # a shaped row whose entries move: its changed values and the moves (op UM)
                    moves = _entry_moves(t, new, ch.before, after)
                    whole = moves is None
                if whole or (ch.schema, ch.table, new) in self._written:
                    self._written.add((ch.schema, ch.table, new))  # it may have been absent
                    out.append(UpdateRow(t, new, ch.before, after))
                else:
                    out.append(UpdateChanged(t, new, ch.before, after, moves))
            else:
                self._written.add((ch.schema, ch.table, new))
                if op is Op.INSERT or full:
                    out.append(WriteRow(t, new, after))
                else:
                    out.append(MergeRow(t, new, after))
                if partial and op is Op.INSERT:
                    # completed from the catalog's defaults, which may not be this point's: a
                    # resync reads it again
                    out.append(RereadRow(t, new))
        if self.changelog_maxlen is not None:
            before, after = ch.before, ch.after
            if t.derive and hides(t.derive):  # hidden fields (service/shaping.py) stay in Redis
                before, after = visible(before), visible(after)
            fields: tuple[tuple[str, Text], ...] = (
                ("op", op.value),
                ("schema", ch.schema),
                ("table", ch.table),
                ("key", new if new is not None else old or ""),
                ("ts", str(ch.ts)),
                ("before", json_document(before)),
                ("after", json_document(after)),
            )
            out.append(AppendChange(self.layout.changes_key, self.changelog_maxlen, fields))
        return out

    # -- table actions ---------------------------------------------------------------------------
    def action(self, a: TableAction) -> list[IrOp]:
        """The ops of a table action in its transaction's call. The calls before removed or moved
        the rows of a dropped, truncated or renamed table and filled a resync's `__stale`
        (`table_work`)."""
        lay = self.layout
        tid = lay.table_id(a.schema, a.table)
        self._track_marks(a, tid)
        # a DDL may change a table's shape (its definition is read again): its keys are rebuilt
        self._table_keys.pop((a.schema, a.table), None)
        if a.new_schema is not None and a.new_table is not None:
            self._table_keys.pop((a.new_schema, a.new_table), None)
        fkdefs: list[IrOp] = [DeleteKey(defs_key(lay, a.schema, a.table))] if self.cascades.clear_op() else []
        if a.kind is ActionKind.DROP:
            gone = [RemoveMember(lay.tables_key, tid), *fkdefs, *self._end_resync(a.schema, a.table)]
            return gone + self._shape_ops(tid, "")
        stale, touched = lay.stale_key(a.schema, a.table), lay.touched_key(a.schema, a.table)
        if a.kind is ActionKind.TRUNCATE:
            # a resync in flight restarts: rows it read before the TRUNCATE must not come back
            return [RestartResync(tid, stale, touched)]
        shape = self.shape_of(a.schema, a.table) if self.shape_of is not None else ""
        if a.kind is ActionKind.REGISTER:
            return [AddMember(lay.tables_key, tid), *self._shape_ops(tid, shape)]
        if a.kind is ActionKind.RESYNC:  # its `__stale` was filled before (CopyMembers)
            begin = BeginResync(tid, a.reason[:200] or "resync", touched)
            return [AddMember(lay.tables_key, tid), begin, *self._shape_ops(tid, shape)]
        assert a.kind is ActionKind.RENAME and a.new_schema is not None and a.new_table is not None
        ns, nt = a.new_schema, a.new_table
        new = lay.table_id(ns, nt)
        out: list[IrOp] = [RemoveMember(lay.tables_key, tid), AddMember(lay.tables_key, new)]
        # the rows keep the shape they were written in (a RESYNC follows when the new name's
        # section differs: service/pipeline/applier.py)
        out += self._shape_ops(tid, "") + self._shape_ops(new, shape)
        # a resync in flight continues under the new name (the moved rows are not all re-read
        # yet); its `__stale` was filled before (CopyMembers). So does a settle window.
        out.append(CarryResync(tid, new, lay.stale_key(ns, nt), lay.touched_key(ns, nt)))
        at = self.marks.settle_at(new)
        out.append(
            DeleteFields(lay.settle_key, (new,))
            if at is None
            else SetFields(lay.settle_key, ((new, str(at)),))
        )
        return out + fkdefs + self._end_resync(a.schema, a.table)

    def _shape_ops(self, tid: str, shape: str) -> list[IrOp]:
        """Record (or forget, "") the shape table `tid`'s rows are written in."""
        if self.shape_of is None:
            return []
        key = self.layout.shapes_key
        return [SetFields(key, ((tid, shape),))] if shape else [DeleteFields(key, (tid,))]

    def _track_marks(self, a: TableAction, tid: str) -> None:
        """The marks after `a` (the ops of `action` change them in Redis)."""
        if a.kind is ActionKind.RESYNC:
            self.marks.begin_resync(tid)
        elif a.kind is ActionKind.TRUNCATE:
            self.marks.truncated(tid)
        elif a.kind is ActionKind.RENAME:  # the marks move (CarryResync)
            assert a.new_schema is not None and a.new_table is not None
            self.marks.renamed(tid, self.layout.table_id(a.new_schema, a.new_table))
        elif a.kind is not ActionKind.REGISTER:  # DROP: the marks go
            self.marks.dropped(tid)

    def table_work(self, actions: Sequence[TableAction]) -> tuple[list[IrOp], list[TableWork]]:
        """The work of `actions` on whole tables, in order: the rows of a dropped or truncated
        table go; a renamed table's rows move after whatever its new name held went (and, if its
        resync is running, are copied to the new name's `__stale`); a table whose resync begins
        has its `__keys` copied into `__stale`. With the ops that come first: a FenceResync
        for each table concerned, so that a resync in flight writes no more rows into it (its
        generation moves; the action itself restarts, moves or ends it)."""
        lay = self.layout
        work: list[TableWork] = []
        tables: list[tuple[str, str]] = []
        for a in actions:
            index, base = lay.index_key(a.schema, a.table), lay.table_base(a.schema, a.table)
            fk = self.cascades.clear_op()
            if a.kind is ActionKind.DROP or a.kind is ActionKind.TRUNCATE:
                work.append(TableWork("CU", index, base, fk=fk))
            elif a.kind is ActionKind.RESYNC:
                work.append(TableWork("CP", index, to_index=lay.stale_key(a.schema, a.table)))
            elif a.kind is ActionKind.RENAME:
                assert a.new_schema is not None and a.new_table is not None
                n_index = lay.index_key(a.new_schema, a.new_table)
                n_base = lay.table_base(a.new_schema, a.new_table)
                tid, n_stale = lay.table_id(a.schema, a.table), lay.stale_key(a.new_schema, a.new_table)
                work += [
                    TableWork("CU", n_index, n_base),
                    TableWork("MU", index, base, n_index, n_base, fk=fk),
                    TableWork("CP", n_index, to_index=n_stale, if_resync=tid),  # for CarryResync
                ]
                tables.append((a.new_schema, a.new_table))
            else:
                continue
            tables.append((a.schema, a.table))
        fence: list[IrOp] = [FenceResync(lay.table_id(s, t)) for s, t in dict.fromkeys(tables)]
        return fence, work

    def _end_resync(self, schema: str, table: str) -> list[IrOp]:
        lay = self.layout
        tid = lay.table_id(schema, table)
        return [
            DeleteKey(lay.stale_key(schema, table)),
            DeleteKey(lay.touched_key(schema, table)),
            DeleteKey(lay.partial_key(schema, table)),
            DeleteFields(lay.resync_key, (tid,)),
            DeleteFields(lay.settle_key, (tid,)),
        ]

    # -- whole transactions ----------------------------------------------------------------------
    def begin_call(self) -> None:
        """Start planning a new script call: which rows it wrote, whether a table action came and
        the key columns read are only valid within one call."""
        self._written.clear()
        self._acted = False
        self._call_keys.clear()
        self.cascades.begin_call()

    def _actions(self, out: list[IrOp], actions: Sequence[TableAction]) -> None:
        for a in actions:
            out += self.action(a)
        if actions:
            self._call_keys.clear()
            self._acted = True

    def transaction(self, out: list[IrOp], txn: Transaction, actions: Sequence[TableAction]) -> None:
        """Append the ops of a whole transaction (its table actions first) to the current call,
        after other transactions' ops: several small transactions share one atomic call."""
        if self.marks.settling:
            self._settle(out, txn.end.position)
        self._actions(out, actions)
        self._changes(out, txn, range(len(txn.changes)))

    def _settle(self, out: list[IrOp], end: BinlogPosition) -> None:
        """End the settle windows that a transaction ending at `end` is past (`settling`)."""
        done = self.marks.settled_by(end)
        if done:
            out.append(DeleteFields(self.layout.settle_key, tuple(done)))

    def chunks(
        self,
        txn: Transaction,
        actions: Sequence[TableAction],
        chunk_size: int,
        only: Sequence[int] | None = None,
    ) -> Iterator[tuple[list[IrOp], int]]:
        """The ops of each call of at most chunk_size row changes, with their change counts; a
        transaction of exactly chunk_size changes is one call.

        `only`: indexes of the changes to plan (a resumed transaction, see `remaining`)."""
        todo = range(len(txn.changes)) if only is None else only
        for at in range(0, max(len(todo), 1), chunk_size):
            self.begin_call()
            cur: list[IrOp] = []
            if at == 0:
                if self.marks.settling:
                    self._settle(cur, txn.end.position)
                self._actions(cur, actions)
            part = todo[at : at + chunk_size]
            self._changes(cur, txn, part)
            yield cur, len(part)

    def _changes(self, out: list[IrOp], txn: Transaction, indexes: Sequence[int]) -> None:
        """The ops of the changes `indexes` of `txn`."""
        logged = self.changelog_maxlen is not None
        changes, partial = txn.changes, txn.partial
        fks = self.cascades.foreign_keys()
        fk_tables = fks.tables  # empty for most sources: no per-row cost below
        direct = not logged  # whole-row INSERTs go straight to `out` (_insert)
        for i in indexes:
            ch = changes[i]
            if direct and ch.op is Op.INSERT and not (partial and i in partial):
                key = (ch.schema, ch.table)
                if not (fk_tables and key in fk_tables):
                    self._insert(out, ch, key)
                    continue
            ops = self.change(ch, i in partial)
            if ops is None:
                if logged:  # not mirrored, but it keeps its sequence number (first_seq + i)
                    out.append(SkipSequence())
                continue
            out += ops
            if fk_tables and (ch.schema, ch.table) in fk_tables:
                self.cascades.ops(out, ch, i in partial, fks)

    def table_ids(self, txn: Transaction) -> list[str]:
        """The table id of each change of `txn` (one escape per table, not per change)."""
        return [self.table_keys(ch.schema, ch.table).tid for ch in txn.changes]

    def remaining(self, txn: Transaction, done: Mapping[str, int]) -> list[int]:
        """Indexes of the changes of a chunked transaction still to apply, when the first
        `done[table_id]` changes of each table were applied before a crash.

        Counting per table makes the resume exact even when the chunk size or the table selection
        changed meanwhile: chunks apply a prefix of the changes, whose changes of one table are a
        prefix of that table's changes, and the source delivers each selected table's changes in
        the same order again."""
        seen: dict[str, int] = {}
        out: list[int] = []
        for i, tid in enumerate(self.table_ids(txn)):
            k = seen.get(tid, 0)
            seen[tid] = k + 1
            if k >= done.get(tid, 0):
                out.append(i)
        return out


def checkpoint_op(layout: KeyLayout, fields: Mapping[str, Any]) -> SetFields:
    """The op that stores the checkpoint (the last op of a transaction's call)."""
    return SetFields(layout.checkpoint_key, tuple((k, str(v)) for k, v in fields.items()))


def _entry_moves(t: TableKeys, suffix: str, before: Row, after: Row) -> EntryMoves | None:
    """The entry moves of a shaped row's update (derive.entry_moves), or None: it goes whole."""
    reads = read_fields(t.derive) or ()
    old = {f: hash_text(v) for f in reads if (v := before.get(f)) is not None}
    new = {f: hash_text(v) for f in reads if (v := after.get(f)) is not None}
    moves = entry_moves(t.derive, old, new, f"{t.base}:{suffix}")
    return EntryMoves(*moves) if moves is not None else None


def _moves_entries(spec: str, before: Row, after: Row) -> bool:
    """Whether an update of a shaped table's row (spec text `spec`; "": none) changes a field its
    entries are derived from (or the table has a ttl): then it goes whole, to be derived again."""
    if not spec:
        return False
    reads = read_fields(spec)
    if reads is None:
        return True
    # (the decoder reuses an unchanged value's object: `is` holds for any type)
    return not all((v := before.get(f)) is (a := after.get(f)) or same_text(v, a) for f in reads)
