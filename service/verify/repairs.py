"""Writing a verify's fixes through the sink (`RedisMirror.apply`), under the writer lease and the
checkpoint chain: rows written whole from the source, keys the source does not have deleted."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.checkpoint import Checkpoint
from service.errors import SinkError
from service.rowcompare import at_span, key_delete, key_values
from service.sink.checkpoints import decode_checkpoint
from service.sink.keys import KeyLayout
from service.sink.mirror import RedisMirror, map_redis_errors
from service.sqltext import rows_by_key
from service.table_info import TableInfo
from service.transactions import Transaction
from service.verify.reading import SourceReader, as_str, binary_key_columns, utc_columns
from service.verify.report import Suspect

__all__ = ["LeaseHeld", "Repairer"]

log = logging.getLogger(__name__)


class LeaseHeld(SinkError):
    """--repair could not take the writer lease: a running instance holds it."""

    retriable = False


class Repairer:
    def __init__(
        self, mirror: RedisMirror, redis: Redis, layout: KeyLayout, source: SourceReader, chunk_rows: int
    ) -> None:
        self.mirror = mirror
        self.redis = redis
        self.layout = layout
        self.source = source
        self.chunk_rows = chunk_rows  # row changes per apply
        self._leased = False
        self._renewed = 0.0  # time.monotonic() of the last taking or renewal of the lease

    async def keep_lease(self) -> None:
        """Once --repair took the lease, renew it during the long reads between repairs (the
        next table's check, a settle wait): a third of its TTL at the latest."""
        if self._leased and time.monotonic() - self._renewed > self.mirror.options.lease_ttl / 3:
            await self.mirror.renew_lease()
            self._renewed = time.monotonic()

    async def _lease(self) -> Checkpoint:
        if not self._leased:
            if not await self.mirror.acquire_lease():
                raise LeaseHeld(
                    "cannot repair: the writer lease is held by a running binlog-mirror instance "
                    f"({self.layout.lease_key}); stop it, run verify --repair, then start it again"
                )
            self._leased = True
        else:
            await self.mirror.renew_lease()
        self._renewed = time.monotonic()
        with map_redis_errors("reading the mirror's progress"):
            if await self.redis.exists(self.layout.progress_key):
                raise SinkError(
                    "cannot repair: a transaction is half applied (the mirror's __progress key); "
                    "start the service to finish it, then repair"
                )
        cp = await self.mirror.load_checkpoint()
        if cp is None:
            raise SinkError("cannot repair: the mirror has no checkpoint (it was never started)")
        return cp

    async def _apply(self, units: list[list[RowChange]]) -> int:
        """Apply the changes of `units` (each a row's, kept in one call) as transactions that end
        at the stored checkpoint, which they rewrite with the same position and the same last
        GTID. Returns the rows repaired (units)."""
        size = max(1, self.chunk_rows)
        for start in range(0, len(units), size):
            changes = [c for unit in units[start : start + size] for c in unit]
            cp = await self._lease()
            with map_redis_errors("reading the checkpoint"):
                stored = decode_checkpoint(await self.redis.hgetall(self.layout.checkpoint_key))
            gtid = stored.gtid if stored else None
            span = EventSpan(cp.position.file, cp.position.pos, cp.position.pos)
            part = tuple(at_span(c, span) for c in changes)
            # the checkpoint's own time: the stored hash is rewritten exactly as it was
            txn = Transaction(part, (), gtid, cp.ts, cp)
            await self.mirror.apply([(txn, ())])
        return len(units)

    async def repair(self, t: TableInfo, suspects: Mapping[str, Suspect], derived: bool = False) -> int:
        """Rewrite (or delete) the suspect rows; `derived`: a shaped table's rows are deleted
        first in the same call, so that every derived entry is written again (lua/derive.lua
        skips entries it recorded as they are)."""
        assert t.key is not None
        units: list[list[RowChange]] = []
        span = EventSpan("", 0, 0)
        now = int(time.time())
        for suffix, s in sorted(suspects.items()):
            gone = key_delete(t.schema, t.table, t.key, suffix, span, now)
            if s.source is not None:
                put = RowChange(Op.INSERT, t.schema, t.table, None, s.source, span, now, 0)
                units.append([gone, put] if derived else [put])
            else:
                units.append([gone])
        done = await self._apply(units)
        log.info("repaired %d rows of %s.%s", done, t.schema, t.table)
        return done

    async def repair_live(self, t: TableInfo, suffixes: Sequence[str], derived: bool = False) -> int:
        """Repair rows while the service applies (the background verifier, which shares its
        writer lease): the checkpoint C is read first, then the rows from the source (at or past
        C: the source is never behind its mirror), and the call is fenced by the chain check on C.
        The transactions after C the service applies next lead to the source's rows again; when
        it applied one meanwhile, the call writes nothing (SinkError) and the rows wait for the
        next pass."""
        assert t.key is not None
        key, utc = t.key, utc_columns(t)
        binary = binary_key_columns(t, key)
        done = 0
        size = max(1, self.chunk_rows)
        for start in range(0, len(suffixes), size):
            part = list(suffixes[start : start + size])
            cp = await self._lease()  # the chain head is now C
            with map_redis_errors("reading the checkpoint"):
                stored = decode_checkpoint(await self.redis.hgetall(self.layout.checkpoint_key))
            if stored is None or stored.checkpoint != cp:
                raise SinkError("the checkpoint moved while repairing: retried at the next pass")
            lookup = {sfx: kv for sfx in part if (kv := key_values(sfx, binary)) is not None}
            rows: dict[str, dict[str, Any]] = {}
            if lookup:
                sql = rows_by_key(t.schema, t.table, key, list(lookup.values()))
                for r in await self.source.select(sql, f"repair of {t.schema}.{t.table}"):
                    rows[self.layout.row_suffix([r[c] for c in key])] = self.source.stored_form(t, r, utc)
            span = EventSpan(cp.position.file, cp.position.pos, cp.position.pos)
            now = int(time.time())
            changes: list[RowChange] = []
            for sfx in part:
                if sfx not in rows or derived:  # (derived: every entry written again, as `repair`)
                    changes.append(key_delete(t.schema, t.table, key, sfx, span, now))
                if sfx in rows:
                    changes.append(RowChange(Op.INSERT, t.schema, t.table, None, rows[sfx], span, now, 0))
            await self.mirror.apply([(Transaction(tuple(changes), (), stored.gtid, cp.ts, cp), ())])
            done += len(part)
        return done

    async def repair_orphans(self, schema: str, table: str, extras: Sequence[str]) -> int:
        """Delete the row keys of a mirrored table the source does not have. Not through the
        planner (the table has no definition to key it by): one MULTI/EXEC under WATCH of the
        lease, so it writes nothing unless this run still holds the lease."""
        await self._lease()
        lay = self.layout
        base = lay.table_base(schema, table)
        keys = [f"{base}:{s}" for s in extras]
        with map_redis_errors(f"repairing {schema}.{table}"):
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(lay.lease_key)
                if as_str(await pipe.get(lay.lease_key) or b"") != self.mirror.token:
                    raise LeaseHeld("cannot repair: the writer lease was lost during the repair")
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.delete(*keys)
                pipe.srem(lay.index_key(schema, table), *extras)
                pipe.srem(lay.tables_key, lay.table_id(schema, table))
                await pipe.execute()
        return len(keys)
