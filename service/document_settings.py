"""The config file's `[document.NAME]` sections (docs/mirror.md, "Documents"): a root table and
its children, any depth, kept as one key per root row. Read here; checked against the tables'
definitions by service/documents.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.templates import parse_template

__all__ = ["DocumentChildSettings", "DocumentSettings", "DOCUMENT_NAME"]

DOCUMENT_NAME = r"^[A-Za-z0-9_-]+$"  # a document's name: part of its bookkeeping keys' names


class _Fields(BaseModel):
    """columns/exclude/rename, as in `[table]`: the fields of a table's rows in the document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    columns: list[str] | None = None
    exclude: list[str] = []
    rename: dict[str, str] = {}
    standalone: bool = True  # false: no [table."…"] shape of its own (its rows stay under the prefix)

    @model_validator(mode="after")
    def _one_list(self) -> _Fields:
        if self.columns is not None and self.exclude:
            raise ValueError("columns and exclude: give one of them")
        for col, to in self.rename.items():
            if not to:
                raise ValueError(f"rename: {col} gets an empty name")
        return self


class DocumentChildSettings(_Fields):
    """A `[[document.NAME.child]]` (or a child's `child`): rows of `table` whose `on` columns
    equal their parent's key columns, under the parent's `field`."""

    table: str  # schema.table
    on: dict[str, str]  # child column -> parent column (the parent's primary key, every column)
    field: str  # where the children go in the parent
    shape: Literal["map", "array"] = "map"
    child: list[DocumentChildSettings] = []

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        return _qualified(value)

    @field_validator("on")
    @classmethod
    def _on(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("on: give at least one pair, child column = parent column")
        return value

    @field_validator("field")
    @classmethod
    def _field(cls, value: str) -> str:
        if not value or ":" in value or value.startswith("\0"):
            raise ValueError(f"field {value!r}: give a non-empty name without ':'")
        return value


class DocumentSettings(_Fields):
    """A `[document.NAME]` section."""

    root: str  # schema.table
    key: str  # the document's key template (placeholders of root columns)
    format: Literal["json", "hash"] = "json"
    max_document_bytes: int = Field(default=1 << 20, ge=1024)
    child: list[DocumentChildSettings] = []

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        return _qualified(value)

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        try:
            parse_template(value, True)
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
        return value


def _qualified(name: str) -> str:
    if name.count(".") != 1 or any(c in name for c in "*?["):
        raise ValueError(f"{name!r}: name one table as schema.table (no globs)")
    return name
