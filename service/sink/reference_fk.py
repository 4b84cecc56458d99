"""Foreign-key cascades in the reference executor: lua/cascade.lua, step for step.

A child row is found in the set of its referencing value (`set_prefix` + hex of `len:text` per
column, service/sink/fks.py), checked against its stored columns, then deleted or has its foreign
key set (CASCADE / SET NULL), and the cascade goes on through its own children up to depth 15;
each row is changed at most once per cascade op; a shaped child's derived entries follow each row
it deletes or changes (reference_derive). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.sink.ir import CascadeDelete, CascadeUpdate, FkConstraint, FkGraph
from service.sink.keys import DERIVED_SUFFIX, FKDEFS_SUFFIX
from service.sink.reference_derive import derive, underive
from service.sink.reference_keyspace import Keyspace, ScriptError, as_bytes, members, merge_json

__all__ = ["Cascades", "MAX_DEPTH"]

MAX_DEPTH = 15  # InnoDB's (fks.MAX_DEPTH); the script stops deeper cascades silently
Values = list[bytes | None] | None  # a row's values of some columns (None: NULL); None: no row


def _enc(vals: Values) -> bytes | None:
    """`len:text` per value; None when there is no row or a value is NULL (fk_enc)."""
    if vals is None:
        return None
    parts: list[bytes] = []
    for v in vals:
        if v is None:
            return None
        parts += (b"%d:" % len(v), v)
    return b"".join(parts)


@dataclass(slots=True)
class _Constraint:
    c: FkConstraint
    base: bytes  # the child's row-key base with its ':'
    cf: list[bytes]
    pf: list[bytes]

    @property
    def prefix(self) -> bytes:
        return as_bytes(self.c.set_prefix)

    @property
    def derived(self) -> bytes:
        return self.base + DERIVED_SUFFIX.encode()


@dataclass(slots=True)
class Cascades:
    """The cascade state of one apply call (cascade.lua's `fk` table and op FC's spec)."""

    ks: Keyspace
    by_parent: dict[str, list[_Constraint]] = field(default_factory=dict)
    by_child: dict[str, list[_Constraint]] = field(default_factory=dict)
    by_id: dict[str, _Constraint] = field(default_factory=dict)
    json: bool = False
    resync: bytes = b""
    seen: set[bytes] = field(default_factory=set)
    clear_json: bool | None = None  # op FC before the next table-work unit
    clear: list[tuple[bytes, list[bytes]]] | None = None  # its sets: prefix, fields

    def graph(self, op: FkGraph) -> None:
        self.resync, self.json = as_bytes(op.resync_key), op.json
        self.by_parent, self.by_child, self.by_id = {}, {}, {}
        for c in op.constraints:
            k = _Constraint(c, as_bytes(c.child.base) + b":", [as_bytes(f) for f in c.child_fields], [])
            k.pf = [as_bytes(f) for f in c.parent_fields]
            self.by_id[c.cid] = k
            self.by_parent.setdefault(c.parent_tid, []).append(k)
            self.by_child.setdefault(c.child.tid, []).append(k)

    # -- reading stored rows ---------------------------------------------------------------------
    def _read(self, key: bytes, fields: list[bytes]) -> Values:
        if self.json:
            doc = self.ks.get(key)
            if doc is None:
                return None
            _, vals = members(doc)
            return [None if (v := vals.get(f)) is None or v == b"null" else v for f in fields]
        if not self.ks.exists(key):
            return None
        return self.ks.hmget(key, fields)

    def _sets(self, tid: str, key: bytes) -> dict[str, bytes]:
        """The sets the row belongs in as a child, by constraint id."""
        out: dict[str, bytes] = {}
        for k in self.by_child.get(tid, ()):
            e = _enc(self._read(key, k.cf))
            if e is not None:
                out[k.c.cid] = k.prefix + e.hex().encode()
        return out

    def _refs(self, tid: str, key: bytes) -> dict[str, bytes | None]:
        """The values the row is referenced by as a parent, by constraint id."""
        return {k.c.cid: _enc(self._read(key, k.pf)) for k in self.by_parent.get(tid, ())}

    # -- the cascade ops -------------------------------------------------------------------------
    def apply(self, op: CascadeDelete | CascadeUpdate) -> None:
        k = self.by_id.get(op.cid)
        if k is None:  # the script fails indexing nil: no op F named this constraint
            raise ScriptError(f"cascade of unknown constraint {op.cid!r}")
        self.seen = set()
        if isinstance(op, CascadeDelete):
            self._cascade(k, op.old, None, 1)
        else:
            self._cascade(k, op.old, [None if v is None else as_bytes(v) for v in op.values], 1)

    def _touch(self, k: _Constraint, m: bytes) -> None:  # the copy of a table in resync must keep it
        if self.ks.hexists(self.resync, as_bytes(k.c.child.tid)):
            self.ks.sadd(as_bytes(k.c.child.touched), [m])

    def _cascade(self, k: _Constraint, old: bytes | None, new: Values, depth: int) -> None:
        if old is None or depth > MAX_DEPTH:
            return
        rule = k.c.on_update if new is not None else k.c.on_delete
        if rule not in ("CASCADE", "SET NULL"):
            return
        if new is not None and _enc(new) == old:
            return
        s = k.prefix + old.hex().encode()
        for m in self.ks.smembers(s):
            key = k.base + m
            if _enc(self._read(key, k.cf)) != old:
                self.ks.srem(s, [m])  # stale: the row is gone or references another value
            elif key not in self.seen:
                self.seen.add(key)
                if new is None and rule == "CASCADE":
                    self._delete_row(k, m, key, depth)
                else:
                    self._set_row(k, m, key, new if rule == "CASCADE" else None, depth)

    def _delete_row(self, k: _Constraint, m: bytes, key: bytes, depth: int) -> None:
        tid = k.c.child.tid
        refs = self._refs(tid, key)
        for s in self._sets(tid, key).values():
            self.ks.srem(s, [m])
        self.ks.delete(key)
        if k.c.child.derive:
            underive(self.ks, k.derived, m)
        self.ks.srem(as_bytes(k.c.child.index), [m])
        self._touch(k, m)
        for k2 in self.by_parent.get(tid, ()):
            self._cascade(k2, refs[k2.c.cid], None, depth + 1)

    def _set_row(self, k: _Constraint, m: bytes, key: bytes, new: Values, depth: int) -> None:
        """The row's foreign key becomes `new` (None: NULL)."""
        tid = k.c.child.tid
        refs, before = self._refs(tid, key), self._sets(tid, key)
        if self.json:
            parts = []
            for j, f in enumerate(k.cf):
                v = new[j] if new is not None else None
                parts.append(f + b":" + (b"null" if v is None else v))
            self.ks.set(key, merge_json(self.ks.get(key), b"{" + b",".join(parts) + b"}"))
        else:
            for j, f in enumerate(k.cf):
                v = new[j] if new is not None else None
                if v is None:
                    self.ks.hdel(key, [f])
                else:
                    self.ks.hset(key, [(f, v)])
        if k.c.child.derive:
            derive(self.ks, k.c.child.derive, key, k.derived, m)
        after = self._sets(tid, key)
        for cid, s in before.items():
            if after.get(cid) != s:
                self.ks.srem(s, [m])
        for cid, s in after.items():
            if before.get(cid) != s:
                self.ks.sadd(s, [m])
        self._touch(k, m)
        for k2 in self.by_parent.get(tid, ()):
            self._cascade(k2, refs[k2.c.cid], self._read(key, k2.pf), depth + 1)

    # -- op FC: the rows of a table-work unit leave their sets ----------------------------------
    def clear_for(self, base: bytes) -> None:
        """Before a ClearRows/MoveRows unit on the table whose rows are under `base`: the sets
        its `__fkdefs` names (`len:field` per column), if op FC came before."""
        if self.clear_json is None:
            return
        spec: list[tuple[bytes, list[bytes]]] = []
        for prefix, enc in self.ks.hgetall(base + b":" + FKDEFS_SUFFIX.encode()).items():
            fields, at = [], 0
            while at < len(enc):
                colon = enc.index(b":", at)
                n = int(enc[at:colon])
                fields.append(enc[colon + 1 : colon + 1 + n])
                at = colon + 1 + n
            spec.append((prefix, fields))
        self.clear = spec or None

    def unlink(self, key: bytes, m: bytes) -> None:
        """Row `key` (suffix m) is about to be removed or moved by a unit after op FC."""
        if self.clear is None:
            return
        self.json = bool(self.clear_json)  # the script sets the graph's flag too (fk.json)
        for prefix, fields in self.clear:
            e = _enc(self._read(key, fields))
            if e is not None:
                self.ks.srem(prefix + e.hex().encode(), [m])

    def clear_done(self) -> None:
        self.clear, self.clear_json = None, None
