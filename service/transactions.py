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
from service.binlog.rowchange import Op, RowChange
from service.binlog.schema import TableSchema
from service.checkpoint import Checkpoint, CheckpointTracker, statement_kind

__all__ = [
    "Ddl", "TableFilter", "Transaction", "TransactionAssembler", "is_rename_only", "op_counts", "parse_ddl",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Ddl:
    """A statement that changes a schema (a unit of its own in the stream)."""

    schema: str  # the statement's default database
    sql: str
    kind: str  # create | alter | drop | rename | truncate | other
    tables: tuple[tuple[str, str], ...]  # (schema, table) pairs it touches, when parseable


_NONE_PARTIAL: frozenset[int] = frozenset()


@dataclass(slots=True, unsafe_hash=True, init=False)  # built per transaction: see checkpoint.py
class Transaction:
    changes: tuple[RowChange, ...]
    ddl: tuple[Ddl, ...]
    gtid: str | None
    ts: int
    end: Checkpoint  # where to resume after this transaction
    # Indexes into `changes` whose before or after image lacks columns of the table: the source
    # logged a partial row image (binlog_row_image=MINIMAL or NOBLOB, global or per session).
    partial: frozenset[int] = frozenset()

    def __init__(
        self, changes: tuple[RowChange, ...], ddl: tuple[Ddl, ...], gtid: str | None, ts: int,
        end: Checkpoint, partial: frozenset[int] = _NONE_PARTIAL,
    ) -> None:  # fmt: skip
        self.changes, self.ddl, self.gtid, self.ts, self.end = changes, ddl, gtid, ts, end
        self.partial = partial


def op_counts(changes: tuple[RowChange, ...]) -> dict[tuple[str, str], list[int]]:
    """Per table: its inserts, updates and deletes among `changes`, and the last one's timestamp
    (the applier's counters, compiled: a Python loop per row cost a few % of a load's CPU)."""
    out: dict[tuple[str, str], list[int]] = {}
    schema, table, counts = "", "", [0, 0, 0, 0]
    for ch in changes:
        if ch.table is not table or ch.schema is not schema:  # a run of one table's changes
            schema, table = ch.schema, ch.table
            key = (schema, table)
            found = out.get(key)
            if found is None:
                found = out[key] = [0, 0, 0, 0]
            counts = found
        op = ch.op
        counts[0 if op is Op.INSERT else 1 if op is Op.UPDATE else 2] += 1
        counts[3] = ch.ts
    return out


@dataclass(frozen=True, slots=True)
class TableFilter:
    """Which tables to mirror: fnmatch globs on "schema.table" (case-sensitive, like table names on
    Linux). An empty `include` means every table; `exclude` wins over `include`."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # wants() per (schema, table): asked for every rows event and TABLE_MAP of the stream
    _wanted: dict[tuple[str, str], bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_lists(cls, include: list[str] | None = None, exclude: list[str] | None = None) -> TableFilter:
        return cls(tuple(include or ()), tuple(exclude or ()))

    def __reduce__(self) -> tuple[type[TableFilter], tuple[tuple[str, ...], tuple[str, ...]]]:
        # Pickled into Spark tasks: the patterns only. (Compiled with mypyc, the default
        # pickling of this frozen class fails on unpickling.)
        return (TableFilter, (self.include, self.exclude))

    def wants(self, schema: str, table: str) -> bool:
        key = (schema, table)
        wanted = self._wanted.get(key)
        if wanted is None:
            wanted = self._wanted[key] = self._match(f"{schema}.{table}")
        return wanted

    def skips(self, table: TableSchema) -> bool:
        """Not wanted: `DecodeOptions.skip_rows` (a method, so a compiled build calls no
        interpreted closure per rows event)."""
        return not self.wants(table.schema, table.table)

    def _match(self, name: str) -> bool:
        if any(fnmatchcase(name, p) for p in self.exclude):
            return False
        return not self.include or any(fnmatchcase(name, p) for p in self.include)

    def wants_schema(self, schema: str) -> bool:
        """Could any table of `schema` be wanted? (for a DDL like CREATE DATABASE)."""
        if any(fnmatchcase(f"{schema}.*", p) and p.endswith(".*") for p in self.exclude):
            return False
        return not self.include or any(fnmatchcase(schema, p.split(".", 1)[0]) for p in self.include)


# --- DDL: a small tokenizer and parser, enough to know which tables a statement touches ----------

_TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<exec>/\*M?!\d*)                   # executable comment /*!50100 ... */: its body is code
    | (?P<comment>/\*.*?\*/|(?:--(?=\s|$)|\#)[^\n]*)
    | (?P<close>\*/)                        # the end of an executable comment
    | `(?P<quoted>(?:[^`]|``)*)`
    | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<word>[A-Za-z0-9_$\u0080-\uffff]+)
    | (?P<punct>.)
    """,
    re.S | re.X,
)
_SKIP = frozenset({"ws", "exec", "comment", "close"})


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # word | ident (backquoted, unquoted here) | string | punct
    text: str

    @property
    def up(self) -> str:
        return self.text.upper() if self.kind == "word" else ""

    def punct(self, char: str) -> bool:
        return self.kind == "punct" and self.text == char


def _tokens(sql: str) -> list[_Tok]:
    out: list[_Tok] = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "punct"
        if kind in _SKIP:
            continue
        if kind == "quoted":
            out.append(_Tok("ident", m.group("quoted").replace("``", "`")))
        elif kind != "punct" or m.group("punct") != ";":
            out.append(_Tok(kind, m.group(kind)))
    return out


class _Cursor:
    """A position in a statement's tokens, with the few moves the DDL grammar needs."""

    def __init__(self, toks: list[_Tok], default_schema: str) -> None:
        self.toks, self.i, self.schema = toks, 0, default_schema

    def peek(self, ahead: int = 0) -> _Tok:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else _Tok("end", "")

    def words(self, *words: str) -> bool:
        """Consume `words` if they come next (case-insensitive)."""
        if all(self.peek(k).up == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def ident(self) -> str | None:
        t = self.peek()
        if t.kind not in ("word", "ident"):
            return None
        self.i += 1
        return t.text

    def name(self) -> tuple[str, str] | None:
        """`table` or `schema.table`; either part may be backquoted (and hold dots)."""
        first = self.ident()
        if first is None:
            return None
        if self.peek().punct(".") and self.peek(1).kind in ("word", "ident"):
            self.i += 1
            second = self.ident()
            assert second is not None
            return first, second
        return self.schema, first

    def items(self) -> list[_Cursor]:
        """The rest of the statement split at top-level commas (outside parentheses)."""
        parts: list[list[_Tok]] = [[]]
        depth = 0
        for t in self.toks[self.i :]:
            depth += t.punct("(") - t.punct(")")
            if depth == 0 and t.punct(","):
                parts.append([])
            else:
                parts[-1].append(t)
        return [_Cursor(p, self.schema) for p in parts if p]

    @property
    def done(self) -> bool:
        return self.i >= len(self.toks)


# `RENAME x` clauses of ALTER TABLE that do not rename the table
_RENAME_NOT_TABLE = frozenset({"COLUMN", "INDEX", "KEY", "CONSTRAINT", "PARTITION"})
# words after ALTER DATABASE that mean "the default database" (no name given)
_DB_OPTIONS = frozenset({"DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT", "READ", "ENCRYPTION"})


def _alter_clauses(cur: _Cursor) -> tuple[list[tuple[str, str]], bool]:
    """ALTER TABLE's clauses: (the `RENAME [TO|AS] name` targets, whether there is any other clause)."""
    targets: list[tuple[str, str]] = []
    other = False
    for item in cur.items():
        target = None
        if item.words("RENAME") and item.peek().up not in _RENAME_NOT_TABLE:
            _ = item.words("TO") or item.words("AS")
            target = item.name()
        if target is not None and item.done:
            targets.append(target)
        else:
            other = True
    return targets, other


def _names(cur: _Cursor) -> list[tuple[str, str]]:
    """A comma-separated list of table names (trailing words such as RESTRICT are ignored)."""
    return [n for item in cur.items() if (n := item.name()) is not None]


def _parse(cur: _Cursor) -> tuple[str, list[tuple[str, str]], bool]:
    """(kind, tables, rename_only) of one statement."""
    if cur.words("CREATE"):
        cur.words("OR", "REPLACE")
        if cur.words("DATABASE") or cur.words("SCHEMA"):
            cur.words("IF", "NOT", "EXISTS")
            db = cur.ident()
            return ("create", [(db, "")], False) if db else ("other", [], False)
        cur.words("TEMPORARY")
        if cur.words("TABLE"):
            cur.words("IF", "NOT", "EXISTS")
            name = cur.name()  # CREATE TABLE t (...) | LIKE s | (LIKE s) | SELECT ...: t is touched
            return ("create", [name], False) if name else ("other", [], False)
        return "other", [], False
    if cur.words("ALTER"):
        if cur.words("DATABASE") or cur.words("SCHEMA"):
            if cur.peek().up in _DB_OPTIONS:
                return "alter", [(cur.schema, "")], False
            db = cur.ident()
            return ("alter", [(db, "")], False) if db else ("other", [], False)
        while cur.words("ONLINE") or cur.words("IGNORE"):
            pass
        if cur.words("TABLE"):
            cur.words("IF", "EXISTS")
            name = cur.name()
            if name is None:
                return "other", [], False
            targets, other = _alter_clauses(cur)
            return "alter", [name, *targets[-1:]], bool(targets) and not other
        return "other", [], False
    if cur.words("DROP"):
        if cur.words("DATABASE") or cur.words("SCHEMA"):
            cur.words("IF", "EXISTS")
            db = cur.ident()
            return ("drop", [(db, "")], False) if db else ("other", [], False)
        cur.words("TEMPORARY")
        if cur.words("TABLE") or cur.words("TABLES"):
            cur.words("IF", "EXISTS")
            return "drop", _names(cur), False
        return "other", [], False
    if cur.words("TRUNCATE"):
        cur.words("TABLE")
        name = cur.name()
        return ("truncate", [name], False) if name else ("other", [], False)
    if cur.words("RENAME") and (cur.words("TABLE") or cur.words("TABLES")):
        cur.words("IF", "EXISTS")
        pairs: list[tuple[str, str]] = []
        for item in cur.items():  # a [WAIT n | NOWAIT] TO b
            old = item.name()
            while not item.done and not item.words("TO"):
                item.i += 1
            new = item.name()
            if old is not None and new is not None:
                pairs += [old, new]
        return "rename", pairs, True
    return "other", [], False


def parse_ddl(schema: str, sql: str) -> Ddl:
    """Classify a schema-changing statement and name the (schema, table) pairs it touches.

    Database-level statements report `(database, "")`; RENAME TABLE reports (old, new) pairs in
    order; ALTER TABLE reports the table, then its new name when a clause renames it. Comments
    are skipped, the bodies of executable comments (`/*!50100 ... */`) are read. Anything not
    understood is kind "other" with no tables; callers that must be safe then treat the whole
    default schema as touched."""
    kind, tables, _ = _parse(_Cursor(_tokens(sql), schema))
    return Ddl(schema, sql, kind, tuple(tables))


def is_rename_only(sql: str) -> bool:
    """True for `ALTER TABLE a RENAME TO b` (rows unchanged) and RENAME TABLE; False when the
    ALTER has any other clause (`RENAME TO b, ADD COLUMN c ...` rewrites the rows)."""
    return _parse(_Cursor(_tokens(sql), ""))[2]


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
    _partial: list[int] = field(default_factory=list)
    _ddl: list[Ddl] = field(default_factory=list)
    _gtid: str | None = None
    _rolled_back: bool = False
    # transactions ended by a ROLLBACK and dropped so far (a caller that keeps rows of its own,
    # DecodeOptions.columnar's, drops the transaction's when this moves)
    dropped: int = 0

    @property
    def in_transaction(self) -> bool:
        return self.tracker.in_transaction

    def feed(self, event: Event) -> Transaction | None:
        was_open = self.tracker.in_transaction
        if isinstance(event, RowsEvent):
            table = event.table
            if not event.skipped and self.table_filter.wants(table.schema, table.table):
                self._add_changes(event.changes, len(table.columns))
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
        if self._rolled_back:
            self.dropped += 1
        else:
            # Positional: keywords cost 0.5 µs more (a dataclass __init__), once per transaction.
            txn = Transaction(
                self._stamped(),
                tuple(self._ddl) if self._ddl else (),
                self._gtid,
                end.ts,
                end,
                frozenset(self._partial) if self._partial else _NONE_PARTIAL,
            )
        if self._changes:
            self._changes = []
        if self._partial:
            self._partial = []
        if self._ddl:
            self._ddl = []
        self._gtid, self._rolled_back = None, False
        return txn

    def _add_changes(self, changes: list[RowChange], width: int) -> None:
        """Keep a rows event's changes, noting those with an image narrower than the table."""
        kept = self._changes
        for change in changes:
            before, after = change.before, change.after
            if (before is not None and len(before) < width) or (after is not None and len(after) < width):
                self._partial.append(len(kept))
            kept.append(change)

    def _stamped(self) -> tuple[RowChange, ...]:
        """The changes, each with the transaction's GTID (the decoder stamps them already when it
        saw the GTID event)."""
        gtid = self._gtid
        if gtid is None:
            return tuple(self._changes)
        return tuple(c if c.gtid is not None else replace(c, gtid=gtid) for c in self._changes)

    def _ddl_wanted(self, ddl: Ddl) -> bool:
        if not ddl.tables:
            return True
        return any(
            self.table_filter.wants_schema(s) if not t else self.table_filter.wants(s, t)
            for s, t in ddl.tables
        )
