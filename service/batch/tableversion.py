"""A table version: the column list of a TABLE_MAP as the change log types it (pure, no Spark)."""

from __future__ import annotations

import orjson

from service.binlog.constants import ColumnType as T
from service.binlog.schema import Column, TableSchema

__all__ = ["column_kind", "table_version"]


def column_kind(c: Column) -> str:
    """The Spark type a column's values are stored with in the change log; `text` is the mirror's
    text form (docs/mirror.md, "Values") for what Spark has no lossless type for."""
    t = c.type
    if t in (T.TINY, T.SHORT, T.INT24, T.LONG, T.YEAR):
        return "bigint"
    if t == T.LONGLONG:
        return "decimal(20,0)" if c.unsigned else "bigint"
    if t == T.BIT:
        return "decimal(20,0)"
    if t in (T.FLOAT, T.DOUBLE):
        return "double"
    if t == T.NEWDECIMAL:
        precision, scale = c.meta >> 8, c.meta & 0xFF
        return f"decimal({precision},{scale})" if precision <= 38 else "text"
    if t in (T.DATE, T.NEWDATE):
        return "date"
    if t in (T.DATETIME, T.DATETIME2):
        return "timestamp_ntz"
    if t in (T.TIMESTAMP, T.TIMESTAMP2):
        return "timestamp_utc"  # stored as timestamp_ntz: the UTC wall time, as the mirror has it
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING, T.VARCHAR_COMPRESSED):
        return "binary" if c.charset == 63 else "string"
    if t in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.BLOB_COMPRESSED):
        return "binary" if c.charset in (63, None) else "string"
    return "text"  # TIME, JSON, ENUM, SET, GEOMETRY, VECTOR, ...


def table_version(table: TableSchema) -> str:
    """The version document (JSON): columns (name, kind, MySQL type, unsigned) and key columns."""
    cols = [
        {"name": c.name, "kind": column_kind(c), "type": c.type.name, "unsigned": c.unsigned}
        for c in table.columns
    ]
    key = [table.columns[i].name for i in table.primary_key]
    return orjson.dumps({"columns": cols, "key": key}).decode()
