"""aiomysql I/O: the replication connection, preflight, and `BinlogSource` (committed transactions)."""

from __future__ import annotations

from service.transport.source import BinlogSource, SourceStats

__all__ = ["BinlogSource", "SourceStats"]
