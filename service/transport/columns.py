"""Column names when the binlog does not carry them (binlog_row_metadata != FULL).

Names come from information_schema over a second connection, cached per table and refreshed
after DDL. They are handed to the decoder synchronously through `DecodeOptions.column_names`,
so the cache is filled *before* events are decoded: at connect time for every table of the
wanted schemas, and again after each DDL. A name list is used only when its length equals the
column count of the TABLE_MAP; otherwise the decoder keeps positional names (@1, @2, ...) and a
warning is logged once: a row is never labelled with shifted names.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import aiomysql

from service.binlog.schema import TableSchema
from service.transactions import TableFilter
from service.transport.connection import fetch

__all__ = ["ColumnNames"]

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


class ColumnNames:
    def __init__(self, table_filter: TableFilter) -> None:
        self._filter = table_filter
        self._names: dict[tuple[str, str], tuple[str, ...]] = {}
        self._warned: set[tuple[str, str, int]] = set()

    def __call__(self, table: TableSchema) -> Sequence[str] | None:
        names = self._names.get((table.schema, table.table))
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
        return names

    async def refresh(self, conn: aiomysql.Connection, schemas: Sequence[str] | None = None) -> None:
        """Reload names of every wanted table (of `schemas` only, when given)."""
        sql = (
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
            f"WHERE TABLE_SCHEMA NOT IN ({','.join(['%s'] * len(SYSTEM_SCHEMAS))})"
        )
        args: list[str] = list(SYSTEM_SCHEMAS)
        if schemas:
            sql += f" AND TABLE_SCHEMA IN ({','.join(['%s'] * len(schemas))})"
            args += list(schemas)
        rows = await fetch(conn, sql + " ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION", args)
        found: dict[tuple[str, str], list[str]] = {}
        for schema, table, column in rows:
            if self._filter.wants(schema, table):
                found.setdefault((schema, table), []).append(column)
        if schemas:
            for key in [k for k in self._names if k[0] in schemas]:
                del self._names[key]
        else:
            self._names.clear()
        self._names.update({k: tuple(v) for k, v in found.items()})
