"""What the replicator needs from its source of transactions, and from the tables' definitions.

`TransactionSource` is everything the replicator reads of `service.transport.source.BinlogSource`
(no `getattr`): the source owns the one bounded queue between the binlog reader and the applier.
`TableDefinitions` is where a session reads table definitions and the selected tables
(information_schema on the source, by default). Both are seams: a test passes its own factories
(`Replicator(source_factory=..., definitions_factory=...)`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import aiomysql

from service.catalog import Catalog
from service.checkpoint import BinlogPosition, Checkpoint, StartPoint
from service.settings import Settings
from service.sink.fks import ForeignKeys
from service.table_info import TableInfo
from service.transactions import TableFilter, Transaction
from service.transport.connection import BinlogRoom, ServerInfo, connect, map_errors
from service.transport.source import SourceStats

__all__ = [
    "DefinitionsFactory",
    "SourceDefinitions",
    "SourceFactory",
    "TableDefinitions",
    "TransactionSource",
    "default_source",
]


class TransactionSource(Protocol):
    """Committed transactions in order, each once; see `BinlogSource`."""

    start_checkpoint: Checkpoint | None  # the resolved start, once entered
    info: ServerInfo | None  # the server, once connected
    stats: SourceStats  # counters of the reader (read live by status())
    received: Transaction | None  # the last transaction put in the queue

    async def __aenter__(self) -> Any: ...
    async def __aexit__(self, *exc: object) -> None: ...
    def __aiter__(self) -> AsyncIterator[Transaction]: ...
    async def __anext__(self) -> Transaction: ...

    def take_nowait(self) -> Transaction | None:
        """The next queued transaction, or None when none is ready (never waits)."""
        ...

    def waiting(self) -> tuple[int, int]:
        """(transactions, rows) in the queue."""
        ...

    async def binlog_room(self, since: BinlogPosition) -> BinlogRoom: ...
    async def source_position(self) -> Checkpoint: ...
    def decoder_totals(self) -> tuple[dict[str, int], int, int]: ...


SourceFactory = Callable[[Settings, StartPoint, TableFilter], TransactionSource]


def default_source(settings: Settings, start: StartPoint, flt: TableFilter) -> TransactionSource:
    from service.transport.source import BinlogSource

    # what the mirror, the websocket and the change log write of a row is its Redis text or
    # its canonical JSON: DecodeOptions.stored_text builds no Decimal or datetime only for that
    # A Redis Cluster mirror's slot groups order transactions by binlog position (a group skips
    # one not past its own checkpoint: service/sink/cluster.py), which another server's binlog
    # does not continue: it stops at a source failover (HistoryMismatch) instead of following it
    cluster = settings.redis is not None and settings.redis.cluster
    return BinlogSource(settings, start, table_filter=flt, stored_text=True, follow_failover=not cluster)


class TableDefinitions(Protocol):
    """Table definitions for one session: `load` puts what it reads in the catalog."""

    async def open(self) -> None: ...
    def close(self) -> None: ...
    async def wanted_tables(self) -> list[tuple[str, str]]: ...
    async def load(self, schema: str, table: str) -> TableInfo: ...
    async def foreign_keys(self) -> ForeignKeys: ...


DefinitionsFactory = Callable[[Settings, Catalog], TableDefinitions]


class SourceDefinitions:
    """information_schema of the source, on a side connection of its own (UTC session)."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings, self.catalog = settings, catalog
        self._conn: aiomysql.Connection | None = None

    async def open(self) -> None:
        self._conn = await connect(self.settings)
        with map_errors("preparing the catalog session"):
            async with self._conn.cursor() as cur:  # TIMESTAMP defaults in UTC, as decoded
                await cur.execute("SET SESSION time_zone = '+00:00'")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def wanted_tables(self) -> list[tuple[str, str]]:
        assert self._conn is not None
        with map_errors("listing the source's tables"):
            return await self.catalog.wanted_tables(self._conn)

    async def load(self, schema: str, table: str) -> TableInfo:
        assert self._conn is not None
        with map_errors(f"reading the definition of {schema}.{table}"):
            return await self.catalog.load(self._conn, schema, table)

    async def foreign_keys(self) -> ForeignKeys:
        assert self._conn is not None
        with map_errors("reading the foreign keys of the source's tables"):
            return await self.catalog.load_foreign_keys(self._conn)
