"""The foreign-key part of a plan: the ops that keep the sets of referencing values with the rows,
and the cascades the apply script runs from them (service/sink/fks.py, lua/cascade.lua).

Only tables with foreign keys get here (Planner._changes): the others pay nothing per row.
The rows a copy reads join their sets through `service.pipeline.resync.add_fk_members`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from service.binlog.rowchange import Op as Change
from service.binlog.rowchange import Row, RowChange
from service.sink.fks import (
    ACTING,
    ForeignKey,
    ForeignKeys,
    defs_key,
    fk_field,
    fk_text,
    fk_value,
    set_name,
    set_prefix,
)
from service.sink.ir import (
    CascadeDelete,
    CascadeUpdate,
    ClearFkMemberships,
    FkConstraint,
    FkGraph,
    JoinFkSet,
    LeaveFkSet,
    Op,
    TableKeys,
)
from service.sink.keys import KeyLayout
from service.transactions import Transaction

__all__ = ["CascadePlan"]

_NO_FKS = ForeignKeys()


def _no_fks() -> ForeignKeys:
    return _NO_FKS


@dataclass(slots=True)
class CascadePlan:
    layout: KeyLayout
    key_columns: Callable[[str, str], tuple[str, ...] | None]
    json_mode: bool
    suffix: Callable[[tuple[str, ...], Row | None], str | None]  # the planner's row-key suffix
    # The foreign keys between mirrored tables, as the catalog last read them
    foreign_keys: Callable[[], ForeignKeys] = _no_fks
    # (schema, table) -> its derived entries' spec ("": none): a child row a cascade deletes or
    # changes has its entries follow (lua/derive.lua, called by cascade.lua)
    derive_of: Callable[[str, str], str] | None = None
    # whole-table work clears the foreign-key sets even before the graph is read (a Redis
    # Cluster's start dropping a table its document group no longer holds: cluster.py `_regroup`)
    always_clear: bool = False
    # the FkGraph op of a graph (built once per graph) and its constraint ids; whether the call has it
    _graph: tuple[ForeignKeys | None, FkGraph | None, dict[ForeignKey, str]] = field(
        default=(None, None, {}), repr=False
    )
    _sent: bool = field(default=False, repr=False)

    def begin_call(self) -> None:
        self._sent = False

    def ops(self, out: list[Op], ch: RowChange, partial: bool, fks: ForeignKeys) -> None:
        """After a row's ops: its memberships in the sets of its foreign keys' values (LeaveFkSet,
        JoinFkSet), and, for a parent row deleted or whose referenced columns changed, the cascade
        (CascadeDelete, CascadeUpdate) that the script applies to the child rows it finds in those
        sets."""
        key = (ch.schema, ch.table)
        json_mode = self.json_mode
        cols = self.key_columns(*key) or ()
        before, after = ch.before, ch.after
        if partial and before is not None and after is not None:
            after = {**before, **after}  # MINIMAL: the columns left out did not change
        old_s, new_s = self.suffix(cols, before), self.suffix(cols, after)
        for fk in fks.by_child.get(key, ()):
            o = fk_value(before, fk.columns, json_mode) if old_s is not None else None
            n = fk_value(after, fk.columns, json_mode) if new_s is not None else None
            if o == n and old_s == new_s:
                continue
            prefix = set_prefix(self.layout, fk)
            if o is not None:
                out.append(LeaveFkSet(set_name(prefix, o), old_s or ""))
            if n is not None:
                out.append(JoinFkSet(set_name(prefix, n), new_s or ""))
        if ch.op is Change.INSERT:
            return
        deleted = ch.op is Change.DELETE
        for fk in fks.by_parent.get(key, ()):
            if (fk.on_delete if deleted else fk.on_update) not in ACTING:
                continue
            cid = self._ids(fks).get(fk)
            o = fk_value(before, fk.ref_columns, json_mode)
            if cid is None or o is None:
                continue  # not resolvable here: the applier has the child table copied again
            if deleted:
                self._graph_op(out, fks)
                out.append(CascadeDelete(cid, o))
                continue
            assert after is not None
            vals = [after.get(c) for c in fk.ref_columns]
            if fk_value(after, fk.ref_columns, json_mode) == o:
                continue
            self._graph_op(out, fks)
            out.append(
                CascadeUpdate(cid, o, tuple(None if v is None else fk_text(v, json_mode) for v in vals))
            )

    def _ids(self, fks: ForeignKeys) -> dict[ForeignKey, str]:
        """The constraints the script can apply (`ForeignKeys.resolvable`, child rows keyed), by
        their id in the FkGraph op; built once per graph."""
        if self._graph[0] is not fks:
            json_mode, lay = self.json_mode, self.layout
            constraints: list[FkConstraint] = []
            ids: dict[ForeignKey, str] = {}
            for fk in fks.keys:
                if not self.key_columns(*fk.child) or not fks.resolvable(fk, self.key_columns):
                    continue
                ids[fk] = cid = str(len(ids) + 1)
                s, t = fk.child
                derive = self.derive_of(s, t) if self.derive_of is not None else ""
                base, index, tid = lay.table_base(s, t), lay.index_key(s, t), lay.table_id(s, t)
                child = TableKeys(s, t, base, index, tid, lay.touched_key(s, t), derive)
                constraints.append(
                    FkConstraint(
                        cid,
                        lay.table_id(*fk.parent),
                        child,
                        set_prefix(lay, fk),
                        fk.on_delete,
                        fk.on_update,
                        tuple(fk_field(c, json_mode) for c in fk.columns),
                        tuple(fk_field(c, json_mode) for c in fk.ref_columns),
                    )
                )
            self._graph = (fks, FkGraph(lay.resync_key, json_mode, tuple(constraints)), ids)
        return self._graph[2]

    def _graph_op(self, out: list[Op], fks: ForeignKeys) -> None:
        """The FkGraph op (the constraints the cascade ops follow), once per call, before its
        first cascade."""
        if not self._sent:
            self._ids(fks)
            graph = self._graph[1]
            assert graph is not None
            out.append(graph)
            self._sent = True

    def resyncs(self, txn: Transaction) -> list[tuple[str, str]]:
        """The tables `txn`'s cascades reach that the script cannot update from the sets (and the
        tables their cascades reach in turn): they are copied again (RESYNC) with the
        transaction. Unresolvable: a constraint `_ids` leaves out, or a parent image that
        lacks the referenced columns (a partial image)."""
        fks = self.foreign_keys()
        if not fks.by_parent or not txn.changes:
            return []
        ids = self._ids(fks)
        out: list[tuple[str, str]] = []
        for i, ch in enumerate(txn.changes):
            parents = fks.by_parent.get((ch.schema, ch.table))
            if not parents or ch.op is Change.INSERT or not self.key_columns(ch.schema, ch.table):
                continue
            deleted = ch.op is Change.DELETE
            after = ch.after
            if i in txn.partial and ch.before is not None and after is not None:
                after = {**ch.before, **after}
            for fk in parents:
                rule = fk.on_delete if deleted else fk.on_update
                if rule not in ACTING or not self.key_columns(*fk.child):
                    continue
                o = fk_value(ch.before, fk.ref_columns, self.json_mode)
                known = all(ch.before is not None and c in ch.before for c in fk.ref_columns)
                if not deleted and known and fk_value(after, fk.ref_columns, self.json_mode) == o:
                    continue  # the referenced columns did not change
                if known and o is None:
                    continue  # a NULL is referenced by no row
                if fk not in ids or not known:
                    out.append(fk.child)
        return fks.descendants(dict.fromkeys(out)) if out else []

    def clear_op(self) -> tuple[Op, ...]:
        """ClearFkMemberships for a unit of whole-table work: the rows a DROP or TRUNCATE removes (or a RENAME
        moves away) leave the sets their table's `__fkdefs` names. Read in Redis, not from the
        graph: the catalog reads the source's present, where a renamed or dropped table is gone
        already. () when the source has no foreign keys between mirrored tables."""
        if not self.always_clear and not self.foreign_keys().keys:
            return ()
        return (ClearFkMemberships(self.json_mode),)

    def defs(self) -> dict[str, dict[str, bytes]]:
        """`__fkdefs` of each child table: set prefix -> its fields (`len:field` each), what op FC
        reads; written (HSET) whenever the graph is read (RedisMirror users: pipeline/resync.py)."""
        out: dict[str, dict[str, bytes]] = {}
        for fk in self.foreign_keys().keys:
            fields = [fk_field(c, self.json_mode) for c in fk.columns]
            raw = [f.encode() if isinstance(f, str) else f for f in fields]
            spec = b"".join(b"%d:%s" % (len(f), f) for f in raw)
            out.setdefault(defs_key(self.layout, fk.schema, fk.table), {})[set_prefix(self.layout, fk)] = spec
        return out

    def members(self, schema: str, table: str, rows: list[dict[str, Any]]) -> dict[str, list[str]]:
        """The sets of the foreign-key values of rows copied from the source -> their suffixes."""
        fks = self.foreign_keys().by_child.get((schema, table))
        cols = self.key_columns(schema, table) if fks else None
        sets: dict[str, list[str]] = {}
        for fk in fks or () if cols else ():
            prefix = set_prefix(self.layout, fk)
            for row in rows:
                value = fk_value(row, fk.columns, self.json_mode)
                suffix = self.suffix(cols or (), row)
                if value is not None and suffix is not None:
                    sets.setdefault(set_name(prefix, value), []).append(suffix)
        return sets
