"""RedisMirror: applies committed transactions to Redis atomically, with the checkpoint and a fence.

Every transaction runs within one Lua script call (atomic in Redis) that
  1. checks the writer lease (`{prefix}:__lease` == this instance's token), else LeaseLost;
  2. checks the checkpoint chain (the stored checkpoint is the one this call follows), so no
     transaction is ever applied twice or out of order, even by a confused second writer;
  3. applies the rows, the table actions of its DDL, the optional change-log entries, and
  4. stores the new checkpoint.
Consecutive small transactions share a call (all or none, up to `chunk_size` changes). Calls are
written as soon as they are planned, before earlier replies are read (service/sink/channel.py).
A transaction with more than `chunk_size` row changes is applied in ordered chunks; only the last
moves the checkpoint, and `{prefix}:__progress` records how many changes of each table are done,
so a crash in between resumes the same transaction and skips exactly those, even with another
chunk size or table selection after the restart (see docs/mirror.md).
Work on whole tables (the rows of a DROP, TRUNCATE or RENAME, the copy a resync starts with) runs
before its transaction's call, in bounded calls waited for one by one (tablerun.py).

Redis errors become SinkError in service/sink/replies.py (map_redis_errors) and only there.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import LeaseLost
from service.sink.batches import BatchWriter
from service.sink.chain import ApplyChain
from service.sink.channel import PlainSetup, ScriptChannel
from service.sink.checkpoint_store import CheckpointStore, as_str
from service.sink.codec import CallEncoder
from service.sink.fks import ForeignKeys
from service.sink.keys import DOCHELD_SUFFIX, DOCKIDS_SUFFIX, DOCREFUSED_SUFFIX, KeyLayout
from service.sink.lease import WriterLease, ping
from service.sink.marks import TableMarks
from service.sink.plan import KeyColumns, Planner, SkipCounter, TableAction
from service.sink.replies import SentBatch, map_redis_errors, redis_access_denied
from service.sink.resyncs import ResyncWriter
from service.sink.scripts import APPLY
from service.sink.server import check_server
from service.sink.tablerun import TableWorkRunner
from service.sink.ttlsweep import TtlSweep
from service.transactions import Transaction

__all__ = ["MirrorOptions", "RedisMirror", "SentBatch", "map_redis_errors", "redis_access_denied"]


@dataclass(frozen=True, slots=True)
class MirrorOptions:
    json_mode: bool = False  # one JSON document per row instead of a hash
    full_images: bool = True  # the source logs FULL row images (binlog_row_image=FULL)
    chunk_size: int = 1000  # row changes per atomic script call
    table_step: int = 500  # rows per call of whole-table work (DROP/TRUNCATE/RENAME, resync start/end)
    changelog_maxlen: int | None = None  # keep a change-log stream of about this many entries
    lease_ttl: float = 3.0  # seconds
    plain_inserts: bool = True  # insert-only calls as plain commands in MULTI/EXEC (plain.py)


class RedisMirror:
    """The writer of one Redis: composes its parts (docs/mirror.md, "Parts of the writer")."""

    def __init__(
        self,
        redis: Redis,
        layout: KeyLayout,
        key_columns: KeyColumns,
        options: MirrorOptions | None = None,
        token: str | None = None,
        *,
        foreign_keys: Callable[[], ForeignKeys] | None = None,
        skipped: SkipCounter | None = None,
        shape_of: Callable[[str, str], str] | None = None,
        derive_of: Callable[[str, str], str] | None = None,
        json_of: Callable[[str, str], bool] | None = None,
    ) -> None:
        """`foreign_keys`: the constraints between mirrored tables, as the catalog last read them
        (their cascades are applied, service/sink/cascades.py); `skipped`: the counter of rows
        without a usable key, when another mirror shares it (a Redis Cluster's slot groups);
        `shape_of`: each table's shape fingerprint, recorded in `__shapes` by its table actions;
        `derive_of`: each table's derived entries' spec (service/sink/derive.py); `json_of`:
        whether a table's rows are JSON documents (its section's `value`; None: `json_mode`)."""
        self.redis = redis
        self.layout = layout
        self.options = opts = options or MirrorOptions()
        self.ping_error: str | None = None  # why the last ping() failed (for the log)
        values = "json" if opts.json_mode else "hash"  # the value mode, as the checkpoint says
        self.marks = marks = TableMarks()
        self.planner = Planner(
            layout,
            key_columns,
            json_mode=opts.json_mode,
            full_images=opts.full_images,
            changelog_maxlen=opts.changelog_maxlen,
            skipped=skipped or SkipCounter(),
            marks=marks,
            foreign_keys=foreign_keys,
            shape_of=shape_of,
            derive_of=derive_of,
            json_of=json_of,
        )
        plain_rows = opts.plain_inserts and not opts.json_mode
        self.encoder = CallEncoder(layout, plain_rows=plain_rows)
        plain = None
        if plain_rows:  # not json rows: one MSET per 500 already (op WJN)
            plain = PlainSetup(layout.guard_key, layout.fence_key, layout.tables_key, lambda: marks.resyncs)
        channel = ScriptChannel(redis, APPLY, plain, self.encoder)
        self.chain = ApplyChain(
            layout, self.planner, channel, token or secrets.token_hex(8), values, opts.chunk_size
        )
        self.checkpoints = CheckpointStore(redis, layout, values)
        self.lease = WriterLease(redis, layout, self.chain, opts.lease_ttl)
        self.table_work = TableWorkRunner(redis, layout, self.chain, opts.table_step)
        self.batches = BatchWriter(redis, self.planner, self.chain, self.table_work, opts.chunk_size)
        self.resyncs = ResyncWriter(redis, layout, self.planner, marks, self.chain, opts.table_step)
        self.sweeper = TtlSweep(redis, layout)
        self._warned_aof = False
        # why the selected tables must be copied again (the checkpoint hash's recopy marker, read
        # by load_checkpoint; cleared in Redis by the next apply's checkpoint)
        self.recopy: str | None = None

    @property
    def token(self) -> str:
        """This writer's token: the lease's value while it holds it (the chain's calls carry it)."""
        return self.chain.token

    @token.setter
    def token(self, value: str) -> None:
        self.chain.token = value

    @property
    def plain_counts(self) -> tuple[int, int]:
        """Apply calls sent in the plain form since start, and those sent again as the script."""
        channel = self.chain.channel
        return channel.plain_calls, channel.plain_redone

    # -- checkpoint --------------------------------------------------------------------------------
    async def load_checkpoint(self) -> Checkpoint | None:
        """The stored checkpoint (and the chain head for the next apply), after `check_server`.
        Drops the apply connection: replies of calls sent before are never read as replies to
        later ones."""
        await self.chain.channel.close()
        await self.check_server()
        loaded = await self.checkpoints.load()
        self.marks.restore(loaded.resyncing, loaded.settling)
        self.batches.resume = loaded.resume
        self.recopy = loaded.recopy
        self.chain.prev = loaded.chain_id
        return loaded.checkpoint

    def check_foreign_keys(self, fks: ForeignKeys) -> None:
        """Raise ConfigError for constraints this mirror cannot apply (one Redis: any)."""

    async def check_server(self) -> None:
        """Refuse a Redis Cluster node or a Redis that may evict keys (marking the mirror for a
        re-copy when it did), warn once without an append-only file (service/sink/server.py)."""
        self._warned_aof = await check_server(
            self.redis, self.layout.checkpoint_key, warned_aof=self._warned_aof
        )

    # -- lease (lease.py) ----------------------------------------------------------------------------
    async def acquire_lease(self) -> bool:
        """Take the lease if free (or already ours); True if this instance is now the writer."""
        return await self.lease.acquire()

    @property
    def probe_timeout(self) -> float:
        """How long a lease renewal or a ping may take (half the lease's TTL)."""
        return self.lease.probe_timeout

    async def renew_lease(self) -> None:
        if not await self.lease.renew():
            raise await self.lease_lost(
                LeaseLost("the writer lease expired or was taken by another instance")
            )

    async def lease_lost(self, exc: LeaseLost) -> LeaseLost:
        """`exc` saying what happened to the lease, as Redis shows it now."""
        return await self.lease.lost(exc)

    async def release_lease(self) -> bool:
        """Delete the lease if this instance holds it; False if not held or Redis is unreachable."""
        return await self.lease.release()

    async def ping(self) -> bool:
        """True when Redis answers; else False, with why in `ping_error`. Refused credentials
        raise SinkAccessDenied (permanent: waiting cannot help)."""
        # at least 1 s: a very short lease TTL must not make a loaded Redis look unreachable
        ok, self.ping_error = await ping(self.redis, max(self.probe_timeout, 1.0))
        return ok

    # -- apply (batches.py, chain.py, tablerun.py) ---------------------------------------------------
    async def apply(self, batch: Sequence[tuple[Transaction, Sequence[TableAction]]]) -> list[int]:
        """Apply transactions in order and wait; returns the first change sequence number of each.
        On any error, what was applied is exactly a prefix of `batch` (the stored checkpoint says
        which); callers resume from the stored checkpoint."""
        return await (await self.send(batch)).replies()

    async def send(self, batch: Sequence[tuple[Transaction, Sequence[TableAction]]]) -> SentBatch:
        """Plan and write the script calls of `batch` without waiting for Redis to run them;
        `replies()` of the result waits. Batches sent one after another apply in order."""
        return await self.batches.send(batch)

    async def close(self) -> None:
        """Close the apply connection (replies of calls in flight are dropped)."""
        await self.chain.channel.close()

    def reset_chain(self, checkpoint_id: str) -> None:
        self.chain.prev = checkpoint_id

    # -- resync (resyncs.py) ---------------------------------------------------------------------
    async def resync_generation(self, schema: str, table: str) -> int | None:
        """The generation of the table's resync in flight; None when none is, or its mark is fenced."""
        return await self.resyncs.generation(schema, table)

    async def resync_rows(
        self, schema: str, table: str, rows: Sequence[dict[str, Any]], generation: int
    ) -> int | None:
        """Write rows re-read from the source, except keys the stream wrote since the resync began.
        None: refused, `generation` is no longer the table's resync (nothing was written)."""
        return await self.resyncs.rows(schema, table, rows, generation)

    async def resync_finish(
        self,
        schema: str,
        table: str,
        generation: int,
        copied_at: Callable[[], Awaitable[BinlogPosition | None]] | None = None,
        reread: Callable[[list[tuple[str, str]]], Awaitable[bool]] | None = None,
    ) -> int | None:
        """Remove rows the resync did not find (and the stream did not write); end the resync.
        None: refused, `generation` is no longer the table's resync (ResyncWriter.finish)."""
        return await self.resyncs.finish(schema, table, generation, copied_at, reread)

    async def resync_reread(
        self,
        schema: str,
        table: str,
        generation: int,
        entries: Sequence[tuple[str, str]],
        rows: Sequence[dict[str, Any]],
    ) -> int | None:
        """Write whole the rows of `entries` as read again; None: refused (ResyncWriter.reread)."""
        return await self.resyncs.reread(schema, table, generation, entries, rows)

    async def sweep_expired(self, schema: str, table: str) -> int:
        """Remove what points at the ttl table's expired rows (service/sink/ttlsweep.py)."""
        return await self.sweeper.sweep(schema, table)

    async def derived_counts(self, schema: str, table: str) -> dict[bytes, bytes]:
        """A shaped table's `__derivedcounts` (derive.counts_field -> count, derive.lua keeps it)."""
        with map_redis_errors("reading the index entry counts"):
            raw = await self.redis.hgetall(self.layout.derived_counts_key(schema, table))
        return cast("dict[bytes, bytes]", raw)

    async def document_counts(
        self, schema: str, table: str, roles: list[tuple[str, int, str | None]]
    ) -> list[int]:
        """Per place of the table in documents (Documents.roles): a child's held rows (whose
        parent row is not there), a root's refused documents (lua/document.lua's sets)."""
        base = self.layout.table_base(schema, table)
        out = []
        with map_redis_errors("reading the documents' counts"):
            for doc, node, field in roles:
                if field is None:
                    out.append(int(await self.redis.scard(f"{base}:{DOCREFUSED_SUFFIX}:{doc}")))
                    continue
                kids = f"{base}:{DOCKIDS_SUFFIX}:{doc}.{node}:"
                parents = await self.redis.smembers(f"{base}:{DOCHELD_SUFFIX}:{doc}.{node}")
                async with self.redis.pipeline(transaction=False) as pipe:
                    for p in parents:
                        pipe.scard(kids.encode() + (p if isinstance(p, bytes) else p.encode()))
                    out.append(sum(await pipe.execute()) if parents else 0)
        return out

    async def fk_mirror(self, schema: str, table: str) -> RedisMirror:
        """The mirror whose keys hold the table's foreign-key sets (on a Redis Cluster: its slot
        group's, service/sink/cluster.py)."""
        return self

    async def fk_mirrors(self) -> list[RedisMirror]:
        """The mirrors whose keys hold foreign-key sets."""
        return [self]

    async def pending_resyncs(self) -> dict[str, str]:
        """table_id -> reason for every resync in flight (survives restarts)."""
        return await self.resyncs.pending()

    async def mirrored_tables(self) -> set[str]:
        with map_redis_errors("reading the mirrored tables"):
            raw = await self.redis.smembers(self.layout.tables_key)
        return {as_str(m) for m in raw}

    async def table_shapes(self) -> dict[str, str]:
        """Table id -> the shape fingerprint its rows were written in (`__shapes`; none: unshaped)."""
        with map_redis_errors("reading the tables' shapes"):
            raw = await self.redis.hgetall(self.layout.shapes_key)
        return {as_str(k): as_str(v) for k, v in raw.items()}

    async def moved_to_tables(self, applied: Checkpoint | None) -> set[str]:
        """The tables the RENAME cut short after `applied` (its table work done, its own call not)
        moved rows to, as `__tableops` records them: if such a table is no longer selected, those
        rows belong to no mirrored table."""
        txn, moves = await self.table_work.record()
        with contextlib.suppress(ValueError):  # not a position: keep its tables, dropping is harmless
            if applied is not None and BinlogPosition.parse(txn) <= applied.position:
                return set()  # that statement was applied: its tables are in `__tables` if mirrored
        skip = len(self.layout.prefix) + 1  # a row-key base is `{prefix}:{table id}`
        return {base[skip:] for base in moves.values()}
