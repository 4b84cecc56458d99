"""The Replicator's own logic, fast: recorded transactions through the `source_factory` seam into
a real redis-server (no MariaDB): batching, DDL carry-over, lease loss and resume.

The transactions are decoded from binlogs a real MariaDB 10.11 wrote
(tests/fixtures/binlog/mariadb-10.11, see its README): 01-setup (CREATE DATABASE and four
CREATE TABLEs), 02-full (rows of all_types, big_enum, wide), 07-statement-events (CREATE TABLEs
between rows), and, after the lease is lost, 10-compressed-columns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis as redis_sync

from service.binlog import BinlogDecoder, read_binlog_file
from service.catalog import Catalog
from service.checkpoint import BinlogPosition, Checkpoint, CheckpointTracker, StartPoint
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.settings import Settings, load_settings
from service.sink.checkpoints import decode_checkpoint
from service.sink.fks import ForeignKeys
from service.sink.keys import KeyLayout
from service.table_info import TableInfo
from service.transactions import TableFilter, Transaction, TransactionAssembler
from service.transport.connection import BinlogRoom, ServerInfo
from service.transport.source import SourceStats
from tests.integration.mirror_helpers import until

pytestmark = pytest.mark.redis  # redis_url: a redis-server alone, no mariadbd

FIXTURES = Path(__file__).parents[1] / "fixtures" / "binlog" / "mariadb-10.11"
KEYS: dict[str, tuple[str, ...] | None] = {  # the tables' keys, as information_schema would say
    "all_types": ("id",),
    "big_enum": ("id",),
    "wide": None,  # no primary or unique key: its rows are skipped
    "blobs": ("id",),
    "stmt_log": ("id",),
    "loaded": ("id",),
    "loaded_myisam": ("id",),
    "frac": ("id",),
    "comp": ("id",),
}


def recorded(name: str) -> list[Transaction]:
    """The committed transactions of one fixture binlog, as BinlogSource would hand them out."""
    path = FIXTURES / name
    decoder = BinlogDecoder(file=path.name)
    assembler = TransactionAssembler(CheckpointTracker(BinlogPosition(path.name, 4)), TableFilter())
    out = []
    for raw in read_binlog_file(path):
        event = decoder.feed(raw)
        if event is not None and (txn := assembler.feed(event)) is not None:
            out.append(txn)
    return out


class ReplaySource:
    """A `TransactionSource` over recorded transactions: every one is queued when the session
    enters (so the applier's batches are deterministic); a resumed session starts after the
    stored checkpoint. Waits for more at the end, as a live source does."""

    def __init__(self, txns: list[Transaction], start: StartPoint) -> None:
        self.all = txns
        first = Checkpoint(BinlogPosition(txns[0].end.position.file, 4))
        skip = 0
        if isinstance(start, Checkpoint):
            skip = next(i + 1 for i, t in enumerate(txns) if t.end.position == start.position)
        self.start_checkpoint: Checkpoint | None = start if isinstance(start, Checkpoint) else first
        self.info: ServerInfo | None = None
        self.stats = SourceStats()
        self.received: Transaction | None = None
        self._queue: deque[Transaction] = deque(txns[skip:])
        self.served = 0

    async def __aenter__(self) -> ReplaySource:
        self.stats.connected = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stats.connected = False

    def __aiter__(self) -> AsyncIterator[Transaction]:
        return self

    async def __anext__(self) -> Transaction:
        txn = self.take_nowait()
        if txn is None:
            await asyncio.Event().wait()  # the end of the recording: nothing more, ever
        assert txn is not None
        return txn

    def take_nowait(self) -> Transaction | None:
        if not self._queue:
            return None
        self.served += 1
        self.received = txn = self._queue.popleft()
        return txn

    def waiting(self) -> tuple[int, int]:
        return len(self._queue), sum(len(t.changes) for t in self._queue)

    async def binlog_room(self, since: BinlogPosition) -> BinlogRoom:
        return BinlogRoom(None, True, None)

    async def source_position(self) -> Checkpoint:
        return self.all[-1].end

    def decoder_totals(self) -> tuple[dict[str, int], int, int]:
        return {}, 0, 0


class FixedDefinitions:
    """`TableDefinitions` from KEYS instead of information_schema."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.catalog = catalog

    async def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def wanted_tables(self) -> list[tuple[str, str]]:
        return []  # the recording creates every table it fills

    async def load(self, schema: str, table: str) -> TableInfo:
        key = KEYS[table]
        info = TableInfo(schema, table, key, "primary" if key else "none", ())
        self.catalog.put(info)
        return info

    async def foreign_keys(self) -> ForeignKeys:
        self.catalog.foreign_keys = ForeignKeys()  # the recording has none
        return self.catalog.foreign_keys


def _final_ids(txns: list[Transaction], table: str) -> set[str]:
    """The ids of `table` after the recorded changes (inserts add, deletes remove)."""
    ids: set[str] = set()
    for ch in (c for t in txns for c in t.changes if c.table == table):
        if ch.before is not None:
            ids.discard(str(ch.before["id"]))
        if ch.after is not None:
            ids.add(str(ch.after["id"]))
    return ids


def _batches(rep: Replicator) -> int:
    """Redis apply calls so far: one per batch (the apply_seconds histogram's count)."""
    for metric in rep.apply_seconds.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                return int(sample.value)
    return 0


async def test_batches_ddl_carry_over_lease_loss_and_resume(redis_url: str) -> None:
    first = recorded("01-setup.000001") + recorded("02-full.000002") + recorded("07-statement-events.000007")
    later = recorded("10-compressed-columns.000010")
    stream = list(first)
    sources: list[ReplaySource] = []
    starts: list[StartPoint] = []

    def source_factory(settings: Settings, start: StartPoint, flt: TableFilter) -> ReplaySource:
        starts.append(start)
        sources.append(ReplaySource(stream, start))
        return sources[-1]

    prefix = "replay"
    settings = load_settings(
        None,
        mysql="mysql://nobody:x@127.0.0.1:9",  # never connected: source and definitions are replaced
        redis=redis_url,
        key_prefix=prefix,
        on_no_checkpoint="start",
        lease_ttl_seconds=0.6,
    )
    applied: list[Transaction] = []
    rep = Replicator(
        settings,
        source_factory=source_factory,
        definitions_factory=FixedDefinitions,
        on_applied=[lambda txn, seq: applied.append(txn)],
    )
    layout = KeyLayout(prefix)
    r = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    task = asyncio.create_task(rep.run())
    try:
        await until("the recording applied", lambda: applied and applied[-1].end == first[-1].end)
        # Batching: everything was queued before the applier began. A DDL is a batch of its own;
        # the transactions queued behind one batch go with it up to the next DDL, which is
        # carried over to start the next batch: 01-setup's five DDLs; its rotation with 02-full's
        # nine transactions; then 07's DDLs, each alone, between the four runs of rows.
        assert _batches(rep) == 14
        assert starts == ["start"]
        # Every transaction with rows or DDL was applied, in order; the empty ones (no rows:
        # statement-format events, rotations) only moved the checkpoint within their batch.
        kept = [t for t in first if t.changes or t.ddl]
        assert [t.end for t in applied if t.changes or t.ddl] == [t.end for t in kept]
        stored = decode_checkpoint(r.hgetall(layout.checkpoint_key))
        assert stored is not None and stored.checkpoint.position == first[-1].end.position
        # the rows are in Redis under their keys; the keyless table's are skipped and counted
        ids = set(r.smembers(layout.index_key("mt", "all_types")))
        assert ids == _final_ids(first, "all_types") and len(ids) == 5
        assert r.scard(layout.index_key("mt", "frac")) > 0
        status = rep.status()
        wide = next(t for t in status.tables if t.table == "wide")
        assert wide.skipped_rows == 3 and not wide.mirrored
        assert status.state is State.STREAMING and status.leader

        # Lease loss: another instance takes the lease; this one stops writing and waits.
        r.set(layout.lease_key, "someone-else", px=60_000)
        await until("the lease loss", lambda: not rep.status().leader)
        assert "LeaseLost" in (rep.status().errors.last or "")
        stream.extend(later)  # written on the source meanwhile
        await asyncio.sleep(1.0)  # a standby applies nothing, whatever it waits for
        assert len(sources) == 1 and applied[-1].end == first[-1].end
        # The other instance goes away: this one takes over and resumes at the STORED checkpoint.
        r.delete(layout.lease_key)
        await until("the takeover", lambda: applied[-1].end == later[-1].end)
        assert len(sources) == 2
        assert isinstance(starts[1], Checkpoint) and starts[1].position == first[-1].end.position
        assert sources[1].served == len(later)  # nothing of the first recording again
        assert r.scard(layout.index_key("mt", "comp")) > 0
        assert rep.status().leader
    finally:
        rep.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        r.close()
