"""What the source says a table is: its key and its columns (from information_schema, with what
the latest TABLE_MAP adds). Plain values: `service.catalog` reads them, the pipeline, the
single-process verify and the batch jobs use them, the status report shows them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ColumnStatus", "TableInfo"]


@dataclass(frozen=True, slots=True)
class ColumnStatus:
    name: str
    type: str  # source column type name, e.g. "VARCHAR", "DECIMAL", "INT"
    # the column's metadata word in the latest TABLE_MAP of the table, as MySQL's table_def holds
    # it (max byte length, precision/scale, fsp...); None before a TABLE_MAP with the column is read
    metadata: int | None = None
    nullable: bool | None = None  # None: unknown
    unsigned: bool | None = None  # None: not numeric, or unknown
    charset: str | None = None  # collation/charset name for character columns
    # where the name the rows carry comes from: binlog (TABLE_MAP column names, FULL row
    # metadata) | information_schema (the TABLE_MAP has none, or no TABLE_MAP with the column
    # was read yet) | position (@1, @2...: the rows carry positional names)
    name_source: str = "binlog"
    # information_schema: CHARACTER_MAXIMUM_LENGTH, else NUMERIC_PRECISION, else DATETIME_PRECISION
    length: int | None = None


@dataclass(frozen=True, slots=True)
class TableInfo:
    schema: str
    table: str
    key: tuple[str, ...] | None  # None: no usable key
    key_source: str  # primary | unique | none
    columns: tuple[ColumnStatus, ...]
    exists: bool = True
    # What a column the source left out of a partial INSERT image (binlog_row_image=MINIMAL)
    # holds: its constant default, or None for a nullable column without one. Columns with
    # expression defaults (the server logs those) and generated columns are not here.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # NOT NULL columns whose constant default could not be read: the table was empty (read again
    # when a partial INSERT needs one: the table then has that row)
    unknown_defaults: frozenset[str] = frozenset()
    # the columns of each UNIQUE index (the primary key's included), for shaping's unique keys
    uniques: tuple[tuple[str, ...], ...] = ()
