"""Committed source transactions: the unit the mirror applies atomically.

`TransactionAssembler` is pure: fed decoded events in stream order, it returns a `Transaction`
each time a unit commits (BEGIN/GTID ... XID or COMMIT; a DDL statement on its own), and
nothing for groups that end in ROLLBACK. Positions come from `CheckpointTracker`.
XA transactions come out at XA PREPARE (their later XA COMMIT/ROLLBACK is a statement of its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from service.binlog.events import Event, GtidEvent, QueryEvent, RowsEvent
from service.binlog.rowchange import RowChange
from service.checkpoint import Checkpoint, CheckpointTracker, statement_kind

__all__ = ["Ddl", "TableFilter", "Transaction", "TransactionAssembler", "parse_ddl"]


@dataclass(frozen=True, slots=True)
class Ddl:
    """A statement that changes a schema (a unit of its own in the stream)."""

    schema: str  # the statement's default database
    sql: str
    kind: str  # create | alter | drop | rename | truncate | other
    tables: tuple[tuple[str, str], ...]  # (schema, table) pairs it touches, when parseable


@dataclass(frozen=True, slots=True)
class Transaction:
    changes: tuple[RowChange, ...]
    ddl: tuple[Ddl, ...]
    gtid: str | None
    ts: int
    end: Checkpoint  # where to resume after this transaction


@dataclass(frozen=True, slots=True)
class TableFilter:
    """Which tables to mirror: fnmatch globs on "schema.table" (case-sensitive, like table names on
    Linux). An empty `include` means every table; `exclude` wins over `include`."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def from_lists(cls, include: list[str] | None = None, exclude: list[str] | None = None) -> TableFilter:
        return cls(tuple(include or ()), tuple(exclude or ()))

    def wants(self, schema: str, table: str) -> bool:
        name = f"{schema}.{table}"
        if any(fnmatchcase(name, p) for p in self.exclude):
            return False
        return not self.include or any(fnmatchcase(name, p) for p in self.include)

    def wants_schema(self, schema: str) -> bool:
        """Could any table of `schema` be wanted? (for a DDL like CREATE DATABASE)."""
        if any(fnmatchcase(f"{schema}.*", p) and p.endswith(".*") for p in self.exclude):
            return False
        return not self.include or any(fnmatchcase(schema, p.split(".", 1)[0]) for p in self.include)


# --- DDL: a small parser, enough to know which tables a statement touches -------------------------

_IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$\u0080-\uffff]+)"
_NAME = rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)"
_COMMENTS = re.compile(r"/\*(?!!|M!).*?\*/|/\*!?M?!\d*|\*/|(?:--\s|#)[^\n]*", re.S)
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "create",
        re.compile(
            rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_NAME}",
            re.I,
        ),
    ),
    ("alter", re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?{_NAME}", re.I)),
    ("truncate", re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?{_NAME}", re.I)),
    ("create", re.compile(rf"^CREATE\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+NOT\s+EXISTS\s+)?({_IDENT})", re.I)),
    ("drop", re.compile(rf"^DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?({_IDENT})", re.I)),
    ("alter", re.compile(rf"^ALTER\s+(?:DATABASE|SCHEMA)\s+({_IDENT})", re.I)),
]
_DROP_TABLE = re.compile(r"^DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?(.*)$", re.I | re.S)
_RENAME_TABLE = re.compile(r"^RENAME\s+TABLES?\s+(.*)$", re.I | re.S)
_ALTER_RENAME = re.compile(rf"\bRENAME\s+(?:TO\s+|AS\s+)?{_NAME}\s*$", re.I)
_ONE_NAME = re.compile(rf"\s*{_NAME}\s*", re.S)
_DB_LEVEL = re.compile(r"^(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\b", re.I)


def _unquote(ident: str) -> str:
    ident = ident.strip()
    if ident.startswith("`") and ident.endswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _qualify(name: str, default_schema: str) -> tuple[str, str]:
    parts = re.findall(_IDENT, name)
    if len(parts) == 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return default_schema, _unquote(parts[0])


def _name_list(text: str, default_schema: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        m = _ONE_NAME.fullmatch(item.split()[0] if item.split() else "")
        if m:
            out.append(_qualify(m.group(1), default_schema))
    return out


def parse_ddl(schema: str, sql: str) -> Ddl:
    """Classify a schema-changing statement and name the (schema, table) pairs it touches.

    Database-level statements report `(database, "")`. Anything not understood is kind "other"
    with no tables; callers that must be safe then treat the whole default schema as touched."""
    text = _COMMENTS.sub(" ", sql).strip().rstrip(";").strip()
    if _DB_LEVEL.match(text):
        for kind, pattern in _PATTERNS[3:]:
            if m := pattern.match(text):
                return Ddl(schema, sql, kind, ((_unquote(m.group(1)), ""),))
    for kind, pattern in _PATTERNS[:3]:
        if m := pattern.match(text):
            tables = [_qualify(m.group(1), schema)]
            if kind == "alter" and (r := _ALTER_RENAME.search(text)):
                tables.append(_qualify(r.group(1), schema))  # ALTER TABLE a RENAME TO b
            return Ddl(schema, sql, kind, tuple(tables))
    if m := _DROP_TABLE.match(text):
        names = re.sub(r"\b(?:RESTRICT|CASCADE)\b", "", m.group(1), flags=re.I)
        return Ddl(schema, sql, "drop", tuple(_name_list(names, schema)))
    if m := _RENAME_TABLE.match(text):
        pairs: list[tuple[str, str]] = []
        for item in m.group(1).split(","):
            halves = re.split(r"\s+TO\s+", item.strip(), flags=re.I)
            for half in halves:
                pairs.extend(_name_list(half, schema))
        return Ddl(schema, sql, "rename", tuple(pairs))
    return Ddl(schema, sql, "other", ())


# --- the assembler ------------------------------------------------------------------------------


@dataclass(slots=True)
class TransactionAssembler:
    """Events in, committed `Transaction`s out. Owns the `CheckpointTracker` it is given.

    Row changes of tables the filter does not want are dropped (the transaction still comes
    out, possibly empty, so its `end` can be checkpointed). DDL is kept only when it may touch
    a wanted table (or cannot be parsed)."""

    tracker: CheckpointTracker
    table_filter: TableFilter = field(default_factory=TableFilter)
    _changes: list[RowChange] = field(default_factory=list)
    _ddl: list[Ddl] = field(default_factory=list)
    _gtid: str | None = None
    _rolled_back: bool = False

    @property
    def in_transaction(self) -> bool:
        return self.tracker.in_transaction

    def feed(self, event: Event) -> Transaction | None:
        was_open = self.tracker.in_transaction
        if isinstance(event, RowsEvent) and not event.skipped:
            wanted = self.table_filter.wants(event.table.schema, event.table.table)
            if wanted:
                self._changes.extend(event.changes)
        elif isinstance(event, GtidEvent):
            self._gtid = None if event.anonymous else event.gtid
        elif isinstance(event, QueryEvent):
            kind = statement_kind(event.sql)
            if kind == "rollback" and was_open:
                self._rolled_back = True
            elif kind == "ddl" and self._ddl_wanted(ddl := parse_ddl(event.schema, event.sql)):
                self._ddl.append(ddl)
        end = self.tracker.observe(event)
        if end is None:
            return None
        txn = None
        if not self._rolled_back:
            txn = Transaction(
                changes=tuple(self._stamp(c) for c in self._changes),
                ddl=tuple(self._ddl),
                gtid=self._gtid,
                ts=end.ts,
                end=end,
            )
        self._changes, self._ddl, self._gtid, self._rolled_back = [], [], None, False
        return txn

    def _stamp(self, change: RowChange) -> RowChange:
        if change.gtid is None and self._gtid is not None:
            return replace(change, gtid=self._gtid)
        return change

    def _ddl_wanted(self, ddl: Ddl) -> bool:
        if not ddl.tables:
            return True
        return any(
            self.table_filter.wants_schema(s) if not t else self.table_filter.wants(s, t)
            for s, t in ddl.tables
        )
