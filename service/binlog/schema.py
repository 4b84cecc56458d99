"""Table schema as described by a TABLE_MAP event and its optional metadata."""

from __future__ import annotations

from dataclasses import dataclass

from service.binlog.constants import ColumnType

__all__ = ["Column", "TableSchema"]


@dataclass(frozen=True, slots=True)
class Column:
    index: int
    name: str  # from COLUMN_NAME metadata, DecodeOptions.column_names, or "@N" (1-based)
    type: ColumnType  # real type: STRING metadata resolved to ENUM/SET/STRING
    meta: int  # TABLE_MAP metadata as MySQL's table_def holds it
    nullable: bool
    unsigned: bool = False
    charset: int | None = None  # collation id; None when the binlog carries none
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    geometry_type: int | None = None
    visible: bool = True
    binlog_type: ColumnType | None = None  # type code as written in TABLE_MAP, when != type
    max_length: int = 0  # CHAR/BINARY/VARCHAR byte length; ENUM/SET pack length; BLOB length bytes
    vector_dimension: int | None = None


@dataclass(frozen=True, slots=True)
class TableSchema:
    table_id: int
    schema: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[int, ...]  # column indexes; () when unknown or no PK
    primary_key_prefixes: tuple[int, ...] = ()  # prefix length per PK column, 0 = whole column
    flags: int = 0
    has_names: bool = False  # True when column names came from the binlog or column_names()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"
