"""Column names and character sets when the binlog does not carry them (binlog_row_metadata != FULL).

Names and each column's character set (binary for BINARY/VARBINARY/BLOB) come from
information_schema over a second connection, cached per table and refreshed after DDL. They are
handed to the decoder synchronously through `DecodeOptions.column_names` and `column_charsets`,
so the cache is filled *before* events are decoded: at connect time for every table of the
wanted schemas, and again after each DDL. A definition is used only when its column count equals
the TABLE_MAP's (and, for charsets, every character column of the TABLE_MAP is a character
column in information_schema); otherwise the decoder keeps positional names (@1, @2, ...) and
renders text losslessly (str when valid UTF-8, else bytes), and a warning is logged once: a row
is never labelled with shifted names nor decoded with another column's charset. Such rows predate
a DDL that the stream meets later, and the DDL's resync re-reads the table.

A wanted table with a text column in a character set the decoder has no codec for is refused
(`PreflightError`, at start or after the DDL that made it): its values could not be mirrored
exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiomysql

from service.binlog.charsets import BINARY_COLLATION, collation_for_charset
from service.binlog.constants import ColumnType as T
from service.binlog.schema import TableSchema
from service.errors import PreflightError
from service.transactions import TableFilter
from service.transport.connection import fetch

__all__ = ["ColumnNames"]

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
# TABLE_MAP types whose values are bytes in a character set (VECTOR is floats; ENUM/SET indexes)
_CHARACTER = frozenset(
    {T.STRING, T.VAR_STRING, T.VARCHAR, T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB,
     T.VARCHAR_COMPRESSED, T.BLOB_COMPRESSED}
)  # fmt: skip
# information_schema DATA_TYPEs that cannot hold a TABLE_MAP character column: the definition is
# not the one the event was written with
_NOT_CHARACTER = frozenset(
    {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float", "double", "bit",
     "date", "time", "datetime", "timestamp", "year", "enum", "set", "geometry", "point",
     "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
     "geometrycollection", "vector"}
)  # fmt: skip
# information_schema DATA_TYPEs whose values the binlog writes as bytes in a character set
_TEXT = frozenset(
    {"char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext",
     "tinyblob", "blob", "mediumblob", "longblob"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    data_type: str  # information_schema DATA_TYPE, lower case
    charset: str | None  # CHARACTER_SET_NAME; None for binary and non-text types
    members: tuple[str, ...] | None = None  # ENUM/SET: the values, from COLUMN_TYPE


SCHEMA_FORMAT = "binlog-mirror-schema/1"


class ColumnNames:
    def __init__(self, table_filter: TableFilter, *, refuse_undecodable: bool = True) -> None:
        self._filter = table_filter
        self._refuse = refuse_undecodable
        self._columns: dict[tuple[str, str], tuple[_Column, ...]] = {}
        self._warned: set[tuple[str, str, int]] = set()
        self._warned_types: set[tuple[str, str]] = set()

    def __call__(self, table: TableSchema) -> Sequence[str] | None:
        columns = self._matching(table)
        return None if columns is None else [c.name for c in columns]

    def charsets(self, table: TableSchema) -> Sequence[int | None] | None:
        """The collation id to decode each character column with (the binary one for binary
        columns), None for the others; None for all when the definition is not the TABLE_MAP's."""
        columns = self._matching(table)
        if columns is None:
            return None
        return [
            None
            if col.type not in _CHARACTER
            else BINARY_COLLATION
            if info.charset is None
            else collation_for_charset(info.charset)
            for col, info in zip(table.columns, columns, strict=True)
        ]

    def members(self, table: TableSchema) -> Sequence[tuple[str, ...] | None] | None:
        """The values of each ENUM and SET column (None for the others); None for all when the
        definition is not the TABLE_MAP's. Without them such values decode as their index or
        bitmask, while a copy of the table reads the strings."""
        columns = self._matching(table)
        if columns is None:
            return None
        return [
            info.members
            if (col.type == T.ENUM and info.data_type == "enum")
            or (col.type == T.SET and info.data_type == "set")
            else None
            for col, info in zip(table.columns, columns, strict=True)
        ]

    def _matching(self, table: TableSchema) -> tuple[_Column, ...] | None:
        """The table's information_schema columns when they can be the TABLE_MAP's: as many,
        and text where the binlog has text. Else None (and a warning, once): the event is older
        than a DDL the stream has not reached, which will re-copy the table."""
        names = self._columns.get((table.schema, table.table))
        if names is None:
            return None
        if len(names) != len(table.columns):
            key = (table.schema, table.table, len(table.columns))
            if key not in self._warned:
                self._warned.add(key)
                log.warning(
                    "%s.%s: the binlog has %d columns, information_schema now has %d; using @N names",
                    table.schema,
                    table.table,
                    len(table.columns),
                    len(names),
                )
            return None
        for col, info in zip(table.columns, names, strict=True):
            text = col.type in _CHARACTER
            if (text and info.data_type in _NOT_CHARACTER) or (not text and info.data_type in _TEXT):
                if (table.schema, table.table) not in self._warned_types:
                    self._warned_types.add((table.schema, table.table))
                    log.warning(
                        "%s.%s: column %s is %s in information_schema but %s in the binlog; using @N names",
                        table.schema,
                        table.table,
                        info.name,
                        info.data_type,
                        "text" if text else col.type.name,
                    )
                return None
        return names

    async def refresh(self, conn: aiomysql.Connection, schemas: Sequence[str] | None = None) -> None:
        """Reload the columns of every wanted table (of `schemas` only, when given).

        Raises PreflightError when a wanted table has a text column in a character set without a
        codec (binlog_row_metadata=FULL would not help: the decoder cannot read that charset)."""
        sql = (
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, CHARACTER_SET_NAME, COLUMN_TYPE "
            "FROM information_schema.COLUMNS "
            f"WHERE TABLE_SCHEMA NOT IN ({','.join(['%s'] * len(SYSTEM_SCHEMAS))})"
        )
        args: list[str] = list(SYSTEM_SCHEMAS)
        if schemas:
            sql += f" AND TABLE_SCHEMA IN ({','.join(['%s'] * len(schemas))})"
            args += list(schemas)
        rows = await fetch(conn, sql + " ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION", args)
        found: dict[tuple[str, str], list[_Column]] = {}
        for schema, table, column, data_type, charset, column_type in rows:
            if self._filter.wants(schema, table):
                dtype = str(data_type).lower()
                members = _members(str(column_type)) if dtype in ("enum", "set") else None
                col = _Column(str(column), dtype, str(charset) if charset else None, members)
                found.setdefault((str(schema), str(table)), []).append(col)
        if schemas:
            for key in [k for k in self._columns if k[0] in schemas]:
                del self._columns[key]
        else:
            self._columns.clear()
        self._columns.update({k: tuple(v) for k, v in found.items()})
        undecodable = [
            f"{s}.{t}.{c.name} ({c.charset})"
            for (s, t), cols in sorted(found.items())
            for c in cols
            if c.charset is not None and collation_for_charset(c.charset) is None
        ]
        if undecodable and self._refuse:
            raise PreflightError(
                "cannot mirror text in a character set binlog-mirror has no decoder for: "
                + ", ".join(undecodable)
                + "; convert the column (ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4) or "
                "leave the table out (BINLOG_MIRROR_EXCLUDE_TABLES)"
            )

    # -- the schema file of `binlog-mirror schema export` / `decode --schema` ---------------------
    def export(self) -> dict[str, Any]:
        """The loaded definitions as a JSON-able document (docs/decoder.md, "Schema files")."""
        return {
            "format": SCHEMA_FORMAT,
            "tables": [
                {
                    "schema": schema,
                    "table": table,
                    "columns": [
                        {"name": c.name, "data_type": c.data_type, "charset": c.charset}
                        | ({"members": list(c.members)} if c.members is not None else {})
                        for c in cols
                    ],
                }
                for (schema, table), cols in sorted(self._columns.items())
            ],
        }

    @classmethod
    def from_export(cls, doc: Any) -> ColumnNames:
        """The definitions of an `export()` document; ValueError names what is malformed."""
        if not isinstance(doc, dict) or doc.get("format") != SCHEMA_FORMAT:
            raise ValueError(f'not a schema file (its "format" is not {SCHEMA_FORMAT!r})')
        out = cls(TableFilter.from_lists([], []), refuse_undecodable=False)
        try:
            for entry in doc["tables"]:
                cols = tuple(
                    _Column(
                        str(c["name"]),
                        str(c["data_type"]).lower(),
                        c["charset"] and str(c["charset"]),
                        tuple(str(m) for m in c["members"]) if c.get("members") is not None else None,
                    )
                    for c in entry["columns"]
                )
                out._columns[(str(entry["schema"]), str(entry["table"]))] = cols
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed schema file: {exc!r}") from None
        return out


def _members(column_type: str) -> tuple[str, ...] | None:
    """`enum('a','it''s','back\\\\slash')` -> ('a', "it's", 'back\\slash'): information_schema
    doubles a quote and a backslash inside a value."""
    start = column_type.find("(")
    if start < 0 or not column_type.endswith(")"):
        return None
    body = column_type[start + 1 : -1]
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        if body[i] != "'":
            return None
        i += 1
        value: list[str] = []
        while True:
            if i >= n:
                return None
            ch = body[i]
            if ch == "\\" and i + 1 < n:
                value.append(body[i + 1])
                i += 2
            elif ch == "'" and i + 1 < n and body[i + 1] == "'":
                value.append("'")
                i += 2
            elif ch == "'":
                i += 1
                break
            else:
                value.append(ch)
                i += 1
        out.append("".join(value))
        if i < n:
            if body[i] != ",":
                return None
            i += 1
    return tuple(out)
