"""Which columns key each mirrored table, and what its columns are, from information_schema.

The mirror needs a key for every row: the PRIMARY KEY, else the first UNIQUE index whose columns
are all NOT NULL, else none (the table's rows are skipped with a warning and counted).
Lookups are cached per table and dropped when a DDL touching the table is applied, so rows that
follow the DDL in the stream are keyed by the new definition.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

import aiomysql

from service.errors import CatalogMiss, SourceError
from service.shaping import Shape, ShapeError, Shapes, section_for
from service.sink.fks import ForeignKey, ForeignKeys
from service.table_info import ColumnStatus, TableInfo
from service.transactions import TableFilter
from service.transport.columns import SYSTEM_SCHEMAS
from service.transport.connection import fetch, quote_ident

__all__ = ["Catalog"]

log = logging.getLogger(__name__)


class Catalog:
    def __init__(self, table_filter: TableFilter, shapes: Shapes | None = None) -> None:
        self.filter = table_filter
        # the tables' shapes ([table."…"] sections): resolved each time a definition is read, so
        # a DDL that breaks a section stops the run with its message (ShapeError)
        self.shapes = shapes if shapes is not None else Shapes({})
        self._tables: dict[tuple[str, str], TableInfo] = {}
        self._warned: set[tuple[str, str]] = set()
        # The foreign keys between wanted tables as last read (None: never); `fk_stale`: to be read
        # again (a DDL may have added, dropped or retargeted a constraint), used until then
        self.foreign_keys: ForeignKeys | None = None
        self.fk_stale = True
        self._forgets = 0

    def fk_graph(self) -> ForeignKeys:
        """The foreign keys as last read (none before the first read)."""
        return self.foreign_keys or _NO_FKS

    def key_columns(self, schema: str, table: str) -> tuple[str, ...] | None:
        """The key columns, or None when the table has no usable key (its rows are skipped)."""
        info = self._tables.get((schema, table))
        if info is None:
            raise CatalogMiss(f"no definition loaded for {schema}.{table} when its rows were planned")
        return info.key

    def get(self, schema: str, table: str) -> TableInfo | None:
        return self._tables.get((schema, table))

    def forget(self, schema: str, table: str | None = None) -> None:
        self.fk_stale = True  # a DDL may add, drop or retarget any constraint
        self._forgets += 1
        for k in [k for k in self._tables if k[0] == schema and (table is None or k[1] == table)]:
            del self._tables[k]

    def put(self, info: TableInfo) -> None:
        """Use `info` for its table (what `load` does after reading information_schema)."""
        if self.shapes and self.shapes.resolve(info) is not None and self.foreign_keys is not None:
            self._check_shapes(self.foreign_keys)
        self._tables[(info.schema, info.table)] = info

    def fk_state(self) -> tuple[ForeignKeys | None, bool]:
        """The foreign keys as read and whether they are stale: `restore_fk_state` puts them back
        after a read made only to check the sections (the start: the applier's first read then
        writes `__fkdefs` as it always did)."""
        return self.foreign_keys, self.fk_stale

    def restore_fk_state(self, state: tuple[ForeignKeys | None, bool]) -> None:
        self.foreign_keys, self.fk_stale = state

    def derive_spec(self, schema: str, table: str) -> str:
        """The table's derived entries' spec for the scripts ("": none; service/sink/derive.py)."""
        return self.shapes.derive_spec(schema, table)

    def shape(self, schema: str, table: str) -> Shape | None:
        """The table's shape (None: unshaped, every column as is), as of its loaded definition."""
        return self.shapes.get(schema, table)

    def _check_shapes(self, fks: ForeignKeys) -> None:
        shapes = self.shapes
        for fk in fks.keys:
            if (child := shapes.get(fk.schema, fk.table)) is not None:
                child.refuse_foreign_key(fk.name, fk.columns)
            if (parent := shapes.get(fk.ref_schema, fk.ref_table)) is not None:
                parent.refuse_foreign_key(fk.name, fk.ref_columns)
            for s, t in ((fk.schema, fk.table), (fk.ref_schema, fk.ref_table)):
                if shapes.json_of(s, t) != shapes.json_mode:  # (cascade.lua: one form per graph)
                    mode = "json" if shapes.json_mode else "hash"
                    raise ShapeError(
                        f'table {s}.{t} [table."{section_for(shapes.sections, s, t)}"]: value: its '
                        f"rows are in another form than value_mode={mode}, and foreign key {fk.name} "
                        "joins it to another mirrored table (cascades apply in one form); remove "
                        "`value`, or set value_mode"
                    )

    def known(self, schema: str, table: str) -> bool:
        return (schema, table) in self._tables

    async def load(self, conn: aiomysql.Connection, schema: str, table: str) -> TableInfo:
        rows = await fetch(
            conn,
            "SELECT INDEX_NAME, COLUMN_NAME, NULLABLE FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
            "ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        indexes: dict[str, list[tuple[str, bool]]] = {}
        for name, column, nullable in rows:
            indexes.setdefault(str(name), []).append((str(column), str(nullable or "") == "YES"))
        key: tuple[str, ...] | None = None
        source = "none"
        for name, cols in indexes.items():
            if name == "PRIMARY":
                key, source = tuple(c for c, _ in cols), "primary"
                break
            if not any(n for _, n in cols):
                key, source = tuple(c for c, _ in cols), "unique"
                break
        crow = await fetch(
            conn,
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, "
            "COALESCE(CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, DATETIME_PRECISION), "
            "COLUMN_DEFAULT, EXTRA "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        columns = tuple(
            ColumnStatus(
                name=str(name),
                type=str(dtype).upper(),
                nullable=str(nullable) == "YES",
                unsigned=("unsigned" in str(ctype).lower()) if dtype in _NUMERIC else None,
                charset=str(charset) if charset else None,
                name_source="information_schema",
                length=int(length) if length is not None else None,
            )
            for name, dtype, ctype, nullable, charset, length, _, _ in crow
        )
        defaults, unknown = await self._defaults(conn, schema, table, crow)
        uniques = tuple(tuple(c for c, _ in cols) for cols in indexes.values())
        info = TableInfo(schema, table, key, source, columns, bool(crow), defaults, unknown, uniques)
        if crow and key is None and (schema, table) not in self._warned:
            self._warned.add((schema, table))
            log.warning(
                "%s.%s has no primary key and no unique NOT NULL key: its rows are skipped", schema, table
            )
        self.put(info)
        return info

    @staticmethod
    async def _defaults(
        conn: aiomysql.Connection, schema: str, table: str, crow: list[tuple[Any, ...]]
    ) -> tuple[dict[str, Any], frozenset[str]]:
        """Constant defaults read back through `DEFAULT(col)`, so they come typed exactly as the
        values of a SELECT (the connection's time_zone must be +00:00, as for a resync), and the
        NOT NULL columns whose default could not be read.

        `DEFAULT(t.col)` needs a row of `t`: with none, the row of an outer join stands in, but
        MariaDB then gives NULL for every NOT NULL column (`a INT NOT NULL DEFAULT 5` reads as
        NULL), so those are left unknown."""
        out: dict[str, Any] = {}
        constant: list[tuple[str, str]] = []
        not_null: set[str] = set()
        for name, dtype, _, nullable, _, _, default, extra in crow:
            if str(nullable) != "YES":
                not_null.add(str(name))
            if "GENERATED" in str(extra or "").upper():
                continue  # generated, or an expression default (MySQL DEFAULT_GENERATED)
            text = None if default is None else str(default)
            if text is None or text.upper() == "NULL":
                if str(nullable) == "YES":
                    out[str(name)] = None
            elif not _EXPRESSION.match(text):
                constant.append((str(name), str(dtype).lower()))
        if not constant:
            return out, frozenset()
        picks = ", ".join(f"DEFAULT(t.{quote_ident(c)})" for c, _ in constant)
        t = quote_ident(schema, table)
        try:
            rows = await fetch(conn, f"SELECT {picks} FROM {t} AS t LIMIT 1")
            empty = not rows
            if empty:
                rows = await fetch(conn, f"SELECT {picks} FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON FALSE")
        except SourceError as exc:
            log.warning("%s.%s: cannot read column defaults (%s)", schema, table, exc)
            return out, frozenset()
        unknown: set[str] = set()
        for (name, dtype), value in zip(constant, rows[0] if rows else (), strict=False):
            if value is None and empty and name in not_null:
                unknown.add(name)
                continue
            if dtype == "timestamp" and isinstance(value, dt.datetime):
                value = value.replace(tzinfo=dt.UTC)  # as the binlog decodes TIMESTAMP
            out[name] = value
        return out, frozenset(unknown)

    async def load_foreign_keys(self, conn: aiomysql.Connection) -> ForeignKeys:
        """The foreign keys whose child and parent tables are both wanted, with their rules; none
        when the source logs its cascades' rows itself (MySQL 9.6 and later)."""
        (version,) = (await fetch(conn, "SELECT VERSION()"))[0]
        forgets = self._forgets  # a DDL applied while this reads makes what it read stale
        if _logs_cascades(str(version)):
            return self._fks_read(ForeignKeys(logged=True), forgets)
        # KEY_COLUMN_USAGE is readable with SELECT; MariaDB shows REFERENTIAL_CONSTRAINTS (the
        # rules) only to users with more than SELECT on the table: SHOW CREATE TABLE then says them
        # One query per wanted schema, each `TABLE_SCHEMA = %s`: MariaDB then opens that schema's
        # tables only (an unrestricted information_schema query opens every table of the server,
        # seconds on a server with many, after every DDL)
        schemas = [
            str(name)
            for (name,) in await fetch(conn, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
            if str(name) not in SYSTEM_SCHEMAS and self.filter.wants_schema(str(name))
        ]
        rows = []
        for schema in schemas:
            rows += await fetch(
                conn,
                "SELECT TABLE_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, COLUMN_NAME, REFERENCED_TABLE_SCHEMA, "
                "REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
                "WHERE TABLE_SCHEMA = %s AND REFERENCED_TABLE_NAME IS NOT NULL "
                "ORDER BY TABLE_NAME, CONSTRAINT_NAME, ORDINAL_POSITION",
                (schema,),
            )
        found: dict[tuple[str, str, str], tuple[tuple[str, str], list[str], list[str]]] = {}
        for schema, table, name, col, rschema, rtable, rcol in rows:
            child, parent = (str(schema), str(table)), (str(rschema), str(rtable))
            if not (self.filter.wants(*child) and self.filter.wants(*parent)):
                continue  # a cascade into (or from) a table that is not mirrored: nothing to apply
            entry = found.setdefault((*child, str(name)), (parent, [], []))
            entry[1].append(str(col))
            entry[2].append(str(rcol))
        if not found:
            return self._fks_read(ForeignKeys(), forgets)
        rules: dict[tuple[str, str, str], tuple[str, str]] = {}
        for schema in sorted({s for s, _, _ in found}):
            for s, t, n, u, d in await fetch(
                conn,
                "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, UPDATE_RULE, DELETE_RULE "
                "FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s",
                (schema,),
            ):
                rules[(str(s), str(t), str(n))] = (str(u), str(d))
        for schema, table in sorted({(s, t) for s, t, n in found if (s, t, n) not in rules}):
            ((_, ddl),) = await fetch(conn, f"SHOW CREATE TABLE {quote_ident(schema, table)}")
            for m in _FK_CLAUSE.finditer(str(ddl)):
                clauses = dict(_FK_RULE.findall(m[2]))
                name = m[1].replace("``", "`")
                rules[(schema, table, name)] = (
                    clauses.get("UPDATE", "RESTRICT"),
                    clauses.get("DELETE", "RESTRICT"),
                )
        parents = sorted({parent[0] for parent, _, _ in found.values()})
        indexes: dict[tuple[str, str, str], set[str]] = {}
        for schema in parents:
            for s, t, index, col in await fetch(
                conn,
                "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
                "WHERE TABLE_SCHEMA = %s AND NON_UNIQUE = 0",
                (schema,),
            ):
                indexes.setdefault((str(s), str(t), str(index)), set()).add(str(col))
        unique = {(s, t, frozenset(cols)) for (s, t, _), cols in indexes.items()}
        keys = tuple(
            ForeignKey(
                name,
                schema,
                table,
                tuple(cols),
                parent[0],
                parent[1],
                tuple(rcols),
                *rules.get((schema, table, name), ("RESTRICT", "RESTRICT")),
                unique=(*parent, frozenset(rcols)) in unique,
            )  # fmt: skip
            for (schema, table, name), (parent, cols, rcols) in found.items()
        )
        return self._fks_read(ForeignKeys(keys), forgets)

    def _fks_read(self, fks: ForeignKeys, forgets: int) -> ForeignKeys:
        if self.shapes:
            self._check_shapes(fks)
        self.foreign_keys = fks
        self.fk_stale = forgets != self._forgets
        return fks

    async def wanted_tables(self, conn: aiomysql.Connection) -> list[tuple[str, str]]:
        rows = await fetch(
            conn,
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            f"AND TABLE_SCHEMA NOT IN ({','.join(['%s'] * len(SYSTEM_SCHEMAS))})",
            SYSTEM_SCHEMAS,
        )
        return sorted((str(s), str(t)) for s, t in rows if self.filter.wants(str(s), str(t)))


_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float", "double"}
# function-call defaults (current_timestamp(), uuid(), nextval(s)) and CURRENT_TIMESTAMP: evaluated
# per row by the server, which then logs the column even in a MINIMAL image
_EXPRESSION = re.compile(r"^(?:\w+\s*\(.*\)|CURRENT_TIMESTAMP|NOW|LOCALTIME(?:STAMP)?)$", re.I | re.S)


_NO_FKS = ForeignKeys()
# SHOW CREATE TABLE's foreign keys: the constraint's name, then its ON DELETE / ON UPDATE rules
_FK_CLAUSE = re.compile(r"CONSTRAINT `((?:[^`]|``)+)` FOREIGN KEY \(.*?\) REFERENCES [^(]*\(.*?\)([^\n]*)")
_FK_RULE = re.compile(r"ON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT|RESTRICT|NO ACTION)")


def _logs_cascades(version: str) -> bool:
    """MySQL 9.6 moved foreign-key actions out of InnoDB: its binlog has the cascaded rows."""
    if "mariadb" in version.lower():
        return False
    m = re.match(r"(\d+)\.(\d+)", version)
    return m is not None and (int(m[1]), int(m[2])) >= (9, 6)
