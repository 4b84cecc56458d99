"""The one module that owns replication positions.

Value types for binlog positions, GTID sets and the checkpoint stored with the mirror.
A checkpoint only ever names a transaction boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BinlogPosition", "Checkpoint"]


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    file: str  # "mysql-bin.000042"
    pos: int  # offset of the NEXT event

    @property
    def key(self) -> tuple[str, int, int]:
        """Order by base name, then numeric suffix (never string order), then offset."""
        base, _, suffix = self.file.rpartition(".")
        return base, int(suffix) if suffix.isdigit() else -1, self.pos

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The resume point after a committed transaction."""

    position: BinlogPosition
    gtid_set: str = ""  # executed set after the transaction: "uuid:1-5,..." or MariaDB "0-1-100,..."
    ts: int = 0  # source timestamp of the transaction's commit event
