"""Pure planning: a transaction (plus the table actions its DDL implies) -> Lua instruction chunks.

No I/O here, so the whole mapping from row changes to Redis writes is unit-tested without a server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from service.binlog.rowchange import Op, Row, RowChange
from service.checkpoint import BinlogPosition
from service.sink.cascades import CascadePlan
from service.sink.fks import ForeignKeys, defs_key
from service.sink.keys import KeyLayout, escape
from service.sink.marks import TableMarks
from service.sink.tablework import Arg, TableWork
from service.sink.values import hash_text as _text
from service.sink.values import json_document, key_text
from service.sink.values import same_text as _same_text
from service.transactions import Transaction

__all__ = ["ActionKind", "Arg", "KeyColumns", "Planner", "SkipCounter", "TableAction", "checkpoint_args"]


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
    plain_rows: bool = False  # hash INSERTs as field-value pairs (op WP) for the plain form
    skipped: SkipCounter = field(default_factory=SkipCounter)
    # Which tables' updates carry whole rows (resync, gap, settle marks): the writer gives it, and
    # the apply replies and resyncs change it too (service/sink/marks.py)
    marks: TableMarks = field(default_factory=TableMarks)
    # The foreign keys between mirrored tables, as the catalog last read them (cascades.py)
    foreign_keys: Callable[[], ForeignKeys] | None = None
    # (schema, table) -> (row key base, index key, table id, touched key): built once per table
    _table_keys: dict[tuple[str, str], tuple[str, str, str, str]] = field(default_factory=dict, repr=False)
    # Per script call (reset by `begin_call`): non-NULL column names -> shape id (op K); the
    # tables already registered in `__tables` (also reset by table actions, which may remove
    # them); the table of the last C op.
    _shapes: dict[tuple[str, ...], str] = field(default_factory=dict, repr=False)
    _registered: set[tuple[str, str]] = field(default_factory=set, repr=False)
    _table: tuple[str, str] | None = field(default=None, repr=False)
    # table id -> the row keys of its UL ops (op Q); rows an earlier op of the call wrote (their
    # update in the same call carries the whole row: op Q checks rows before the call writes);
    # whether a table action came (which may change which rows and resyncs there are)
    _lean: dict[str, list[Arg]] = field(default_factory=dict, repr=False)
    _written: set[tuple[str, str, str]] = field(default_factory=set, repr=False)
    _acted: bool = field(default=False, repr=False)
    # key columns by table, read once per call by `_insert` (a DDL, which may change them, comes
    # in a batch of its own, its table actions first)
    _call_keys: dict[tuple[str, str], tuple[str, ...] | None] = field(default_factory=dict, repr=False)
    # the run of whole JSON rows (op WJN) `_insert` may extend: its list, the index of its row
    # count and its end
    _run_out: list[Arg] | None = field(default=None, repr=False)
    _run_at: int = field(default=0, repr=False)
    _run_end: int = field(default=-1, repr=False)
    # the cascade ops of tables with foreign keys (service/sink/cascades.py)
    cascades: CascadePlan = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.cascades = CascadePlan(self.layout, self.key_columns, self.json_mode, self._suffix)
        if self.foreign_keys is not None:
            self.cascades.foreign_keys = self.foreign_keys

    # -- row changes -----------------------------------------------------------------------------
    def _keys(self, schema: str, table: str) -> tuple[str, str, str, str]:
        keys = self._table_keys.get((schema, table))
        if keys is None:
            lay = self.layout
            keys = self._table_keys[schema, table] = (
                lay.table_base(schema, table),
                lay.index_key(schema, table),
                lay.table_id(schema, table),
                lay.touched_key(schema, table),
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

    def _shape(self, out: list[Arg], names: list[str]) -> str:
        """The id of a row shape (its non-NULL column names) in the current call; its op K goes
        out once per call, the rows of that shape then carry only values."""
        return self._shape_id(out, tuple(names))

    def _shape_id(self, out: list[Arg], shape: tuple[str, ...]) -> str:
        sid = self._shapes.get(shape)
        if sid is None:
            sid = self._shapes[shape] = str(len(self._shapes) + 1)
            out += ("K", sid, len(shape), *shape)
        return sid

    def _insert(self, out: list[Arg], ch: RowChange, key: tuple[str, str]) -> None:
        """An INSERT's whole row (most changes of a load), straight into `out`: what `change`
        (op W or WJ) and `_changes` (ops A, C) do for it, without a list per row or per shape, and
        JSON rows in runs (op WJN: one MSET in Redis for up to 500 of them)."""
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
        if not self.json_mode:  # only hash-mode updates read it (`change`)
            self._written.add((ch.schema, ch.table, suffix))
        if key not in self._registered:
            self._registered.add(key)
            out += ["A", self.layout.tables_key, self.layout.table_id(*key)]
        if key != self._table:
            out += self.context(*key)
            self._table = key
        if self.json_mode:  # in a run (op WJN) while no other op came between its rows
            if out is self._run_out and len(out) == self._run_end:
                count = out[self._run_at]
                assert isinstance(count, int)
                out[self._run_at] = count + 1
            else:
                self._run_at = len(out) + 1
                out += ("WJN", 1)
            out += (suffix, json_document(after))
            self._run_out, self._run_end = out, len(out)
            return
        append = out.append
        if self.plain_rows:  # field-value pairs (op WP), as plain HSETs take them (plain.py)
            out += ("WP", suffix, 0)
            at = len(out) - 1
            for k, v in after.items():
                if v is not None:
                    append(k)
                    append(_text(v))
            out[at] = (len(out) - at - 1) // 2
            return
        whole = True
        for v in after.values():
            if v is None:
                whole = False
                break
        # the shape: the row's columns, less the NULL ones (not stored)
        shape = tuple(after) if whole else tuple([k for k, v in after.items() if v is not None])
        out += ("W", suffix, self._shape_id(out, shape))
        for v in after.values():
            if v is not None:
                append(_text(v))

    def _write_row(self, out: list[Arg], suffix: str, after: Row, replace: bool) -> None:
        if self.json_mode:
            out += ("WJ" if replace else "PJ", suffix, json_document(after))
            return
        if replace:
            names: list[str] = []
            values: list[Arg] = []
            for k, v in after.items():
                if v is not None:
                    names.append(k)
                    values.append(_text(v))
            out += ("W", suffix, self._shape(out, names))
            out += values
            return
        append = out.append
        out += ("P", suffix, 0)
        at = len(out) - 1
        nulls: list[str] = []
        for k, v in after.items():
            if v is None:
                nulls.append(k)
                continue
            append(k)
            append(_text(v))
        out[at] = (len(out) - at - 1) // 2
        out.append(len(nulls))
        out += nulls

    def _update_row(self, out: list[Arg], suffix: str, before: Row, after: Row) -> None:
        """Op U: the values that changed (a mask of the after image's non-NULL columns marks
        them) and the columns that became NULL. The unchanged values travel in one argument,
        `len:value` after `len:value` (Redis takes one argument far faster than many): the
        script reads them only to replace the row when the stored one is not the before image.

        A value is unchanged when it is the before image's very object (the decoder reuses it
        when the raw bytes are equal) or `_same_text` says so."""
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
            text = _text(v)
            if v is b or _same_text(v, b):
                mask.append("0")
                raw = text.encode() if isinstance(text, str) else text
                rest.append(b"%d:" % len(raw))
                rest.append(raw)
            else:
                mask.append("1")
                changed.append(text)
        sid = self._shape(out, names)
        out += ("U", suffix, sid, "".join(mask), len(nulled), *nulled)
        out += changed
        out.append(b"".join(rest))

    def _lean_update(self, out: list[Arg], before: Row, after: Row) -> None:
        """Op UL: only the values that changed (named by the shape) and the columns that became
        NULL, for a row that op Q checks is in Redis: no text for the unchanged values, which
        were most of an update's planning."""
        names: list[str] = []
        changed: list[Arg] = []
        nulled: list[str] = []
        for k, v in after.items():
            b = before.get(k)
            if v is None:
                if b is not None:
                    nulled.append(k)
            elif v is not b and not _same_text(v, b):
                names.append(k)
                changed.append(_text(v))
        out += ("UL", self._shape(out, names), len(nulled), *nulled)
        out += changed

    def checks(self) -> list[Arg]:
        """Op Q of the call planned since `begin_call`: the rows its UL ops update, by table;
        it goes first in the call."""
        if not self._lean:
            return []
        out: list[Arg] = ["Q", len(self._lean)]
        for tid, keys in self._lean.items():
            out += (tid, len(keys), *keys)
        return out

    def context(self, schema: str, table: str) -> list[Arg]:
        """The op that makes `schema.table` the table of the row ops after it (in one call)."""
        base, index, tid, touched = self._keys(schema, table)
        return ["C", base, index, tid, touched]

    def change(self, ch: RowChange, partial: bool = False) -> list[Arg] | None:
        """Row ops for one change, relative to its table's `context`; None when the row cannot
        be keyed (counted, skipped).

        `partial`: the change's images lack columns (MINIMAL/NOBLOB), so an UPDATE merges the
        present columns into the stored row instead of replacing it."""
        full = self.full_images and not partial
        cols = self.key_columns(ch.schema, ch.table)
        if not cols:
            self.skipped.add(ch.schema, ch.table)
            return None
        op = ch.op
        out: list[Arg] = []
        old = self._suffix(cols, ch.before) if op is not Op.INSERT else None
        new = self._suffix(cols, ch.after) if op is not Op.DELETE else None
        if op is Op.UPDATE and new is None and ch.before is not None and ch.after is not None and not full:
            # partial after-image: key columns it lacks did not change (MINIMAL logs only the
            # changed columns, so `SET b = 5` on key (a, b) brings b but not a)
            new = self._suffix(cols, {**ch.before, **ch.after})
        if op is not Op.INSERT and old is None or op is not Op.DELETE and new is None:
            self.skipped.add(ch.schema, ch.table)
            return None
        if old is not None and old != new:
            if new is not None and not full:
                out += ("MV", old, new)  # keep the columns the partial image left out
            else:
                out += ("E", old)
        if new is not None:
            assert ch.after is not None
            if op is Op.UPDATE and full and old == new and ch.before is not None and not self.json_mode:
                base, _, tid, _ = self._keys(ch.schema, ch.table)
                if self._acted or self.marks.whole_rows(tid) or (ch.schema, ch.table, new) in self._written:
                    self._written.add((ch.schema, ch.table, new))  # it may have been absent
                    self._update_row(out, new, ch.before, ch.after)
                else:
                    self._lean_update(out, ch.before, ch.after)
                    keys = self._lean.get(tid)
                    if keys is None:
                        keys = self._lean[tid] = []
                    keys.append(f"{base}:{new}")
            else:
                self._written.add((ch.schema, ch.table, new))
                self._write_row(out, new, ch.after, op is Op.INSERT or full)
                if partial and op is Op.INSERT:
                    # completed from the catalog's defaults, which may not be this point's: a
                    # resync reads it again (op N)
                    out += ("N", new)
        if self.changelog_maxlen is not None:
            fields: list[Arg] = ["op", op.value, "schema", ch.schema, "table", ch.table]
            fields += ["key", new if new is not None else old or "", "ts", ch.ts]
            fields += ["before", json_document(ch.before), "after", json_document(ch.after)]
            out += ["XA", self.layout.changes_key, self.changelog_maxlen, len(fields) // 2, *fields]
        return out

    # -- table actions ---------------------------------------------------------------------------
    def action(self, a: TableAction) -> list[Arg]:
        """The ops of a table action in its transaction's call. The calls before removed or moved
        the rows of a dropped, truncated or renamed table and filled a resync's `__stale`
        (`table_work`)."""
        lay = self.layout
        tid = lay.table_id(a.schema, a.table)
        self._track_marks(a, tid)
        fkdefs: list[Arg] = ["D", defs_key(lay, a.schema, a.table)] if self.cascades.clear_op() else []
        if a.kind is ActionKind.DROP:
            return ["R", lay.tables_key, tid, *fkdefs] + self._end_resync(a.schema, a.table)
        stale, touched = lay.stale_key(a.schema, a.table), lay.touched_key(a.schema, a.table)
        if a.kind is ActionKind.TRUNCATE:
            # a resync in flight restarts: rows it read before the TRUNCATE must not come back
            return ["RR", tid, stale, touched]
        if a.kind is ActionKind.REGISTER:
            return ["A", lay.tables_key, tid]
        if a.kind is ActionKind.RESYNC:  # its `__stale` was filled before (op CP)
            return ["A", lay.tables_key, tid, "RS", tid, a.reason[:200] or "resync", touched]
        assert a.kind is ActionKind.RENAME and a.new_schema is not None and a.new_table is not None
        ns, nt = a.new_schema, a.new_table
        new = lay.table_id(ns, nt)
        out: list[Arg] = ["R", lay.tables_key, tid, "A", lay.tables_key, new]
        # a resync in flight continues under the new name (the moved rows are not all re-read
        # yet); its `__stale` was filled before (op CP). So does a settle window.
        out += ["RC", tid, new, lay.stale_key(ns, nt), lay.touched_key(ns, nt)]
        at = self.marks.settle_at(new)
        out += ["X", lay.settle_key, 1, new] if at is None else ["H", lay.settle_key, 1, new, str(at)]
        return out + fkdefs + self._end_resync(a.schema, a.table)

    def _track_marks(self, a: TableAction, tid: str) -> None:
        """The marks after `a` (the ops of `action` change them in Redis)."""
        if a.kind is ActionKind.RESYNC:
            self.marks.begin_resync(tid)
        elif a.kind is ActionKind.TRUNCATE:
            self.marks.truncated(tid)
        elif a.kind is ActionKind.RENAME:  # the marks move (op RC)
            assert a.new_schema is not None and a.new_table is not None
            self.marks.renamed(tid, self.layout.table_id(a.new_schema, a.new_table))
        elif a.kind is not ActionKind.REGISTER:  # DROP: the marks go
            self.marks.dropped(tid)

    def table_work(self, actions: Sequence[TableAction]) -> tuple[list[Arg], list[TableWork]]:
        """The work of `actions` on whole tables, in order: the rows of a dropped or truncated
        table go; a renamed table's rows move after whatever its new name held went (and, if its
        resync is running, are copied to the new name's `__stale`); a table whose resync begins
        has its `__keys` copied into `__stale`. With the ops that come first: op RB
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
                    TableWork("CP", n_index, to_index=n_stale, if_resync=tid),  # for op RC
                ]
                tables.append((a.new_schema, a.new_table))
            else:
                continue
            tables.append((a.schema, a.table))
        fence: list[Arg] = []
        for s, t in dict.fromkeys(tables):
            fence += ["RB", lay.table_id(s, t)]
        return fence, work

    def _end_resync(self, schema: str, table: str) -> list[Arg]:
        lay = self.layout
        tid = lay.table_id(schema, table)
        out: list[Arg] = ["D", lay.stale_key(schema, table), "D", lay.touched_key(schema, table)]
        out += ["D", lay.partial_key(schema, table)]
        return out + ["X", lay.resync_key, 1, tid, "X", lay.settle_key, 1, tid]

    # -- whole transactions ----------------------------------------------------------------------
    def begin_call(self) -> None:
        """Start planning a new script call: shape ids, table registrations and the current
        table (ops K, A, C) are only valid within one call."""
        self._shapes.clear()
        self._registered.clear()
        self._table = None
        self._lean.clear()
        self._written.clear()
        self._acted = False
        self._call_keys.clear()
        self._run_out = None
        self.cascades.begin_call()

    def _actions(self, out: list[Arg], actions: Sequence[TableAction]) -> None:
        for a in actions:
            out += self.action(a)
        if actions:
            self._call_keys.clear()
            self._registered.clear()
            self._table = None
            self._acted = True

    def transaction(self, out: list[Arg], txn: Transaction, actions: Sequence[TableAction]) -> None:
        """Append the ops of a whole transaction (its table actions first) to the current call,
        after other transactions' ops: several small transactions share one atomic call."""
        if self.marks.settling:
            self._settle(out, txn.end.position)
        self._actions(out, actions)
        self._changes(out, txn, range(len(txn.changes)))

    def _settle(self, out: list[Arg], end: BinlogPosition) -> None:
        """End the settle windows that a transaction ending at `end` is past (`settling`)."""
        done = self.marks.settled_by(end)
        if done:
            out += ["X", self.layout.settle_key, len(done), *done]

    def chunks(
        self,
        txn: Transaction,
        actions: Sequence[TableAction],
        chunk_size: int,
        only: Sequence[int] | None = None,
    ) -> Iterator[tuple[list[Arg], int]]:
        """Instruction lists (one call each) of at most chunk_size row changes, with their change
        counts; a transaction of exactly chunk_size changes is one call.

        `only`: indexes of the changes to plan (a resumed transaction, see `remaining`)."""
        todo = range(len(txn.changes)) if only is None else only
        for at in range(0, max(len(todo), 1), chunk_size):
            self.begin_call()
            cur: list[Arg] = []
            if at == 0:
                if self.marks.settling:
                    self._settle(cur, txn.end.position)
                self._actions(cur, actions)
            part = todo[at : at + chunk_size]
            self._changes(cur, txn, part)
            yield self.checks() + cur, len(part)

    def _changes(self, out: list[Arg], txn: Transaction, indexes: Sequence[int]) -> None:
        """Row ops of the changes `indexes` of `txn`; each table is registered (`__tables`) once
        per call and made current (op C) once per run of its changes."""
        seen = self._registered
        seq_only: list[Arg] = ["S"] if self.changelog_maxlen is not None else []
        changes, partial = txn.changes, txn.partial
        fks = self.cascades.foreign_keys()
        fk_tables = fks.tables  # empty for most sources: no per-row cost below
        direct = self.changelog_maxlen is None  # whole-row INSERTs go straight to `out` (_insert)
        for i in indexes:
            ch = changes[i]
            if direct and ch.op is Op.INSERT and not (partial and i in partial):
                key = (ch.schema, ch.table)
                if not (fk_tables and key in fk_tables):
                    self._insert(out, ch, key)
                    continue
            ops = self.change(ch, i in partial)
            if ops is None:
                out += seq_only  # not mirrored, but it keeps its sequence number (first_seq + i)
                continue
            key = (ch.schema, ch.table)
            if key not in seen:
                seen.add(key)
                out += ["A", self.layout.tables_key, self.layout.table_id(*key)]
            if key != self._table:
                out += self.context(*key)
                self._table = key
            out += ops
            if fk_tables and key in fk_tables:
                self.cascades.ops(out, ch, i in partial, fks)

    def table_ids(self, txn: Transaction) -> list[str]:
        """The table id of each change of `txn` (one escape per table, not per change)."""
        return [self._keys(ch.schema, ch.table)[2] for ch in txn.changes]

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


def checkpoint_args(layout: KeyLayout, fields: Mapping[str, Any]) -> list[Arg]:
    out: list[Arg] = ["H", layout.checkpoint_key, len(fields)]
    for k, v in fields.items():
        out += [k, str(v)]
    return out
