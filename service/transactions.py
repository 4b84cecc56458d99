"""Committed source transactions: the unit the mirror applies atomically."""

from __future__ import annotations

from dataclasses import dataclass

from service.binlog.rowchange import RowChange
from service.checkpoint import Checkpoint

__all__ = ["Ddl", "Transaction"]


@dataclass(frozen=True, slots=True)
class Ddl:
    """A statement that changes a schema (a unit of its own in the stream)."""

    schema: str  # the statement's default database
    sql: str
    kind: str  # create | alter | drop | rename | truncate | other
    tables: tuple[tuple[str, str], ...]  # (schema, table) pairs it touches, when parseable


@dataclass(frozen=True, slots=True)
class Transaction:
    changes: tuple[RowChange, ...]
    ddl: tuple[Ddl, ...]
    gtid: str | None
    ts: int
    end: Checkpoint  # where to resume after this transaction
