"""What a verify found: the differences per table, and the rows suspected of differing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Difference", "Suspect", "TableReport", "VerifyReport"]


@dataclass(frozen=True, slots=True)
class Difference:
    schema: str
    table: str
    kind: str  # differs | missing | extra | entries (a shaped table's index entries: `fields` their keys)
    key: str  # the row's Redis key
    fields: tuple[str, ...] = ()  # differs: the columns whose stored value is not the source's


@dataclass(slots=True)
class TableReport:
    schema: str
    table: str
    rows: int = 0  # source rows compared
    keyed: bool = True  # False: no usable key, the table is not mirrored (nothing compared)
    expired: int = 0  # source rows of a ttl table absent because they expired (not differences)
    differences: list[Difference] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for d in self.differences if d.kind == kind)


@dataclass(slots=True)
class VerifyReport:
    tables: list[TableReport] = field(default_factory=list)
    repaired: int = 0  # rows rewritten or deleted by --repair

    @property
    def differences(self) -> list[Difference]:
        return [d for t in self.tables for d in t.differences]

    @property
    def equal(self) -> bool:
        return not self.differences


@dataclass(slots=True)
class Suspect:
    """A row that differed when read: read again before it counts as a difference."""

    key_values: tuple[Any, ...] | None  # typed values for a SELECT by key; None: no such source row
    source: dict[str, Any] | None  # the source row last read (None: absent)
