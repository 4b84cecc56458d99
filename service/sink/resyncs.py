"""ResyncWriter: the writes of a table's resync (rows copied from the source, the rows read again,
the finish that removes rows the copy did not find) and the resync marks (`__resync`).

Every write carries the resync's generation: a statement that restarts, moves or ends the resync
moves it, and the script refuses the write (docs/mirror.md, "Resync")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from redis.asyncio import Redis

from service.checkpoint import BinlogPosition
from service.sink.chain import ApplyChain
from service.sink.checkpoint_store import as_str
from service.sink.codec import resync_finish_args, resync_reread_args, resync_rows_args
from service.sink.ir import ResyncHeader, TableKeys, WriteRow
from service.sink.keys import GENERATION_FIELD, KeyLayout, parse_mark
from service.sink.marks import TableMarks
from service.sink.plan import Planner
from service.sink.replies import map_redis_errors
from service.sink.scripts import RESYNC_FINISH, RESYNC_REREAD, RESYNC_ROWS

__all__ = ["ResyncWriter"]


class ResyncWriter:
    def __init__(
        self,
        redis: Redis,
        layout: KeyLayout,
        planner: Planner,
        marks: TableMarks,
        chain: ApplyChain,
        table_step: int,
    ) -> None:
        self.redis = redis
        self.layout = layout
        self.planner = planner  # row keys of the rows written
        self.marks = marks
        self.chain = chain  # its token is the writer's
        self.table_step = table_step  # stale rows removed per finishing call
        self.rows_script = redis.register_script(RESYNC_ROWS)
        self.finish_script = redis.register_script(RESYNC_FINISH)
        self.reread_script = redis.register_script(RESYNC_REREAD)
        self.route: list[str] = []  # KEYS of the resync calls: a Redis Cluster routes by them
        # table id -> (generation, marks.resyncs_planned) as its resync read them at its start
        self._planned_at: dict[str, tuple[int, int]] = {}

    async def generation(self, schema: str, table: str) -> int | None:
        """The generation of the table's resync in flight; None when none is, or its mark is
        fenced (the statement that restarts, moves or ends it is being applied: its call starts
        the next copy). A resync reads it before its first SELECT and passes it with every write:
        a change that restarts or ends the resync (TRUNCATE, DROP, RENAME, a newer ALTER) moves
        it, and the writes are refused."""
        tid = self.layout.table_id(schema, table)
        planned = self.marks.resyncs_planned(tid)
        with map_redis_errors(f"reading the resync mark of {schema}.{table}"):
            raw = await self.redis.hget(self.layout.resync_key, tid)
        generation = None if raw is None else parse_mark(as_str(raw))[0]
        if generation is None:
            return None
        self._planned_at[tid] = (generation, planned)
        return generation

    async def rows(
        self, schema: str, table: str, rows: Sequence[dict[str, Any]], generation: int
    ) -> int | None:
        """Write rows re-read from the source, except keys the stream wrote since the resync began.
        None: refused, `generation` is no longer the table's resync (nothing was written)."""
        cols = self.planner.key_columns(schema, table)
        if not cols:
            return 0
        t = self.planner.table_keys(schema, table)
        ops = []
        for row in rows:
            suffix = self.planner._suffix(cols, row)
            if suffix is not None:
                ops.append(WriteRow(t, suffix, row))
        stale = self.layout.stale_key(schema, table)
        args = resync_rows_args(self._header(t, generation), stale, ops)
        with map_redis_errors(f"resyncing {schema}.{table}"):
            written = int(await self.rows_script(keys=self.route, args=args))
        return None if written < 0 else written

    def _header(self, t: TableKeys, generation: int) -> ResyncHeader:
        lay = self.layout
        return ResyncHeader(lay.lease_key, self.chain.token, lay.resync_key, t, generation)

    async def finish(
        self,
        schema: str,
        table: str,
        generation: int,
        copied_at: Callable[[], Awaitable[BinlogPosition | None]] | None = None,
        reread: Callable[[list[tuple[str, str]]], Awaitable[bool]] | None = None,
    ) -> int | None:
        """Remove rows the resync did not find (and the stream did not write); end the resync.
        `reread` reads again the rows that partial images changed during the copy (`__partial`,
        (suffix, merges) in batches; False: refused) and `resync_reread`s them. `copied_at` reads
        the source's end of binlog, after the copy's (and each reread's) last SELECT; the table's
        updates carry whole rows until the stream passes it (TableMarks.settling).
        None: refused, `generation` is no longer the table's resync."""
        lay = self.layout
        tid = lay.table_id(schema, table)
        h = self._header(self.planner.table_keys(schema, table), generation)
        at = await copied_at() if copied_at else None
        stale = lay.stale_key(schema, table)
        args = resync_finish_args(h, stale, self.table_step, lay.settle_key, str(at or ""))
        removed, cursor = 0, 0
        while True:  # `table_step` stale rows per call: Redis serves other clients in between
            with map_redis_errors(f"finishing the resync of {schema}.{table}"):
                reply = await self.finish_script(keys=self.route, args=args)
            if not isinstance(reply, list):  # -1: refused
                return None
            removed += int(reply[0])
            if int(reply[1]) == 0 and int(reply[2]) > 0:
                if reread is None:
                    raise ValueError(f"rows of {schema}.{table} wait to be read again: pass `reread`")
                with map_redis_errors(f"listing the rows of {schema}.{table} to read again"):
                    cursor, raw = await self.redis.hscan(lay.partial_key(schema, table), cursor, count=500)
                entries = [(as_str(k), as_str(v)) for k, v in cast(dict[bytes, bytes], raw).items()]
                if entries and not await reread(entries):
                    return None
                if copied_at is not None:
                    at = await copied_at()
                    args[-1] = str(at or "")
                continue
            if int(reply[1]) == 0:
                # Whole rows no more (once settled), unless a newer resync was planned since this
                # one read its generation (its mark is set by a call not applied yet, or already)
                current = self._planned_at.pop(tid, None) == (generation, self.marks.resyncs_planned(tid))
                self.marks.resync_done(tid, at, current)
                return removed

    async def reread(
        self,
        schema: str,
        table: str,
        generation: int,
        entries: Sequence[tuple[str, str]],
        rows: Sequence[dict[str, Any]],
    ) -> int | None:
        """Write whole the rows of `entries` (from `__partial`) as read again (`rows`, those the
        source still has), each unless a merge came since its entry was read. Returns the entries
        done; None: refused, `generation` is no longer the table's resync."""
        cols = self.planner.key_columns(schema, table) or ()
        found = {self.planner._suffix(cols, row): row for row in rows}
        t = self.planner.table_keys(schema, table)
        read: list[tuple[str, str, WriteRow | None]] = []
        for suffix, merges in entries:
            row = found.get(suffix)
            read.append((suffix, merges, None if row is None else WriteRow(t, suffix, row)))
        args = resync_reread_args(self._header(t, generation), read)
        with map_redis_errors(f"resyncing {schema}.{table} (rows read again)"):
            done = int(await self.reread_script(keys=self.route, args=args))
        return None if done < 0 else done

    async def pending(self) -> dict[str, str]:
        """table_id -> reason for every resync in flight (survives restarts)."""
        with map_redis_errors("reading pending resyncs"):
            raw = await self.redis.hgetall(self.layout.resync_key)
        return {as_str(k): parse_mark(as_str(v))[1] for k, v in raw.items() if as_str(k) != GENERATION_FIELD}
