"""Foreign keys of the mirrored tables, and how the mirror finds a parent row's children itself.

MariaDB and MySQL before 9.6 apply `ON DELETE/UPDATE CASCADE` and `SET NULL` inside InnoDB and
log only the parent's row event, so the mirror applies them (docs/mirror.md, "Foreign keys"). For
that it keeps, with the rows, one set per referencing value:

    {prefix}:{schema}:{child}:__fkx:{constraint}:{hex}    set of the child rows' key suffixes
    {prefix}:{schema}:{child}:__fkdefs                    hash: each constraint's set prefix -> its
                                                          columns (what DROP/TRUNCATE/RENAME read)
    {prefix}:__fkready                                    hash: set prefix -> 1 once its sets are whole

The value is the child row's foreign-key columns, each as `{length}:{text}` in the layout's own
form (the hash field's bytes, or the raw JSON text of the value in the json layout), so the apply
script computes it from a stored row exactly as the planner does from a row image; the set's name
holds it as lowercase hex (`set_name`): a binary value's raw bytes are not text, and every reader
of key names may take them for UTF-8. (Mirrors before this form named the sets `__fk:` with the
raw value: `RedisMirror.migrate_fk_sets` drops them, and their tables are copied again.) The sets are
candidates: the script checks each member's stored columns before it acts, so a member left
behind (a partial image without the columns) is harmless, and dropped when met.

Pure: no I/O. The catalog reads the constraints (service/catalog.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from service.binlog.canonical import value_to_json
from service.sink.keys import FKDEFS_SUFFIX, KeyLayout, escape
from service.sink.values import TEXT_FORMS, field_value

__all__ = [
    "ACTING",
    "ForeignKey",
    "ForeignKeys",
    "defs_key",
    "fk_field",
    "fk_text",
    "fk_value",
    "ready_key",
    "set_name",
    "set_prefix",
]

ACTING = ("CASCADE", "SET NULL")  # the rules that change child rows (RESTRICT/NO ACTION: none)
MAX_DEPTH = 15  # InnoDB refuses a statement whose cascades go deeper (FK_MAX_CASCADE_DEL)


@dataclass(frozen=True, slots=True)
class ForeignKey:
    name: str
    schema: str  # the child (referencing) table
    table: str
    columns: tuple[str, ...]
    ref_schema: str  # the parent (referenced) table
    ref_table: str
    ref_columns: tuple[str, ...]
    on_update: str  # CASCADE | SET NULL | RESTRICT | NO ACTION | SET DEFAULT
    on_delete: str
    unique: bool = True  # the referenced columns are a unique index of the parent

    @property
    def child(self) -> tuple[str, str]:
        return (self.schema, self.table)

    @property
    def parent(self) -> tuple[str, str]:
        return (self.ref_schema, self.ref_table)


@dataclass(slots=True)
class ForeignKeys:
    """The constraints between mirrored tables (a constraint into or from a table that is not
    mirrored is left out: nothing to apply). `logged`: the source logs the rows its cascades
    change (MySQL 9.6+), so the mirror keeps no sets and applies no cascade itself."""

    keys: tuple[ForeignKey, ...] = ()
    logged: bool = False
    by_child: dict[tuple[str, str], tuple[ForeignKey, ...]] = field(default_factory=dict, repr=False)
    by_parent: dict[tuple[str, str], tuple[ForeignKey, ...]] = field(default_factory=dict, repr=False)
    tables: frozenset[tuple[str, str]] = frozenset()  # every table in a constraint

    def __post_init__(self) -> None:
        child: dict[tuple[str, str], list[ForeignKey]] = {}
        parent: dict[tuple[str, str], list[ForeignKey]] = {}
        for fk in self.keys:
            child.setdefault(fk.child, []).append(fk)
            parent.setdefault(fk.parent, []).append(fk)
        self.by_child = {k: tuple(v) for k, v in child.items()}
        self.by_parent = {k: tuple(v) for k, v in parent.items()}
        self.tables = frozenset(child) | frozenset(parent)

    def resolvable(self, fk: ForeignKey, key_columns: Callable[[str, str], tuple[str, ...] | None]) -> bool:
        """Whether the script can apply `fk`'s cascades from the sets: the referenced columns are
        unique (one parent row per value), and an ON UPDATE CASCADE does not rewrite the child's
        key columns (its row would move to another key: the table is copied again instead)."""
        if not fk.unique:
            return False
        key = key_columns(fk.schema, fk.table) or ()
        return not (fk.on_update == "CASCADE" and set(fk.columns) & set(key))

    def descendants(self, start: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """`start` and every table a cascade from them can reach (in first-reached order)."""
        out = dict.fromkeys(start)
        todo = list(out)
        while todo:
            for fk in self.by_parent.get(todo.pop(), ()):
                if (fk.on_delete in ACTING or fk.on_update in ACTING) and fk.child not in out:
                    out[fk.child] = None
                    todo.append(fk.child)
        return list(out)


def fk_text(value: Any, json_mode: bool) -> bytes:
    """One non-NULL value as the row stores it: the hash field's bytes, or its raw JSON text in
    a json-layout document (`json_document` renders each value alone, so the texts agree)."""
    if json_mode:
        return orjson.dumps(value_to_json(value))
    form = TEXT_FORMS.get(type(value))
    text = form(value) if form is not None else field_value(value)
    return text.encode() if isinstance(text, str) else text


def fk_value(row: Mapping[str, Any] | None, columns: tuple[str, ...], json_mode: bool) -> bytes | None:
    """The encoded value of `columns` in `row`; None when a column is NULL or absent (a row with
    a NULL in its foreign key references nothing)."""
    if row is None:
        return None
    parts: list[bytes] = []
    for c in columns:
        v = row.get(c)
        if v is None:
            return None
        t = fk_text(v, json_mode)
        parts += (b"%d:" % len(t), t)
    return b"".join(parts)


def fk_field(column: str, json_mode: bool) -> str | bytes:
    """How the script finds a column in a stored row: the hash field, or the raw JSON key."""
    return orjson.dumps(column) if json_mode else column


def set_prefix(layout: KeyLayout, fk: ForeignKey) -> str:
    """The sets of `fk`'s values are this + the value's hex (`set_name`). `__fkx` cannot be a
    row's key part (a part starting with `__` is escaped), and the escaped constraint name ends
    at the next `:`."""
    return f"{layout.table_base(fk.schema, fk.table)}:{SET_MARK}:{escape(fk.name)}:"


SET_MARK = "__fkx"  # the sets' part of the name; `__fk`: the raw-valued sets of older mirrors
OLD_SET_MARK = "__fk"


def set_name(prefix: str, value: bytes) -> str:
    """The set of the encoded value `value` (fk_value): its prefix + the value as hex, the same
    name lua/cascade.lua builds (`fk_hex`)."""
    return prefix + value.hex()


def defs_key(layout: KeyLayout, schema: str, table: str) -> str:
    """`{table}:__fkdefs`: hash of the table's set prefixes -> their columns, for op FC."""
    return f"{layout.table_base(schema, table)}:{FKDEFS_SUFFIX}"


def ready_key(layout: KeyLayout) -> str:
    """`__fkready`: hash of the set prefixes whose sets hold every row of their table (a copy of
    the table with that constraint known finished since); a table with a constraint missing here
    is copied again (rows copied by `binlog-mirror snapshot`, or before cascades were kept)."""
    return f"{layout.prefix}:__fkready"
