"""What a websocket subscriber asked for: tables (globs), ops and a column projection."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from service.binlog.rowchange import Op, RowChange

__all__ = ["EventFilter", "FilterError"]


class FilterError(ValueError):
    """A subscribe request whose filter cannot be used; the message says why."""


_TABLE_PATTERN = re.compile(r"^[^.\s]+\.[^.\s]+$")


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which changes a subscriber wants. Empty `tables`/`ops` mean everything."""

    tables: tuple[str, ...] = ()  # "schema.table" glob patterns (fnmatch, case-sensitive)
    ops: frozenset[Op] = frozenset()
    columns: tuple[str, ...] | None = None  # projection of before/after; None = all columns
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    _cache: dict[tuple[str, str], bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        tables: Iterable[str] | str | None = None,
        ops: Iterable[str] | str | None = None,
        columns: Iterable[str] | str | None = None,
    ) -> EventFilter:
        """Build a filter from user input (lists or comma-separated strings); raise FilterError."""
        table_list = _split(tables, "tables")
        for pattern in table_list:
            if not _TABLE_PATTERN.match(pattern):
                raise FilterError(f"table pattern {pattern!r} must be schema.table (globs allowed: db.*)")
        op_set: set[Op] = set()
        for name in _split(ops, "ops"):
            try:
                op_set.add(Op(name.lower()))
            except ValueError:
                raise FilterError(f"unknown op {name!r}; expected insert, update or delete") from None
        column_list = _split(columns, "columns") if columns is not None else None
        if column_list is not None and not column_list:
            raise FilterError("columns must name at least one column (omit it for all columns)")
        regex = re.compile("|".join(fnmatch.translate(p) for p in table_list)) if table_list else None
        return cls(tuple(table_list), frozenset(op_set), tuple(column_list) if column_list else None, regex)

    @property
    def exact_tables(self) -> tuple[tuple[str, str], ...]:
        """The (schema, table) pairs named without any glob character."""
        exact = (p for p in self.tables if not any(ch in p for ch in "*?["))
        return tuple((s, t) for s, _, t in (p.partition(".") for p in exact))

    def wants_table(self, schema: str, table: str) -> bool:
        if self._regex is None:
            return True
        key = (schema, table)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            hit = self._cache[key] = self._regex.match(f"{schema}.{table}") is not None
        return hit

    def matches(self, change: RowChange) -> bool:
        return (not self.ops or change.op in self.ops) and self.wants_table(change.schema, change.table)

    def describe(self) -> dict[str, Any]:
        return {
            "tables": list(self.tables),
            "ops": sorted(op.value for op in self.ops),
            "columns": list(self.columns) if self.columns is not None else None,
        }


def _split(value: Iterable[str] | str | None, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    items: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise FilterError(f"{name} must be strings, got {type(item).__name__}")
        if item.strip():
            items.append(item.strip())
    return items
