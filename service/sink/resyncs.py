"""ResyncWriter: the writes of a table's resync (rows copied from the source, the rows read again,
the finish that removes rows the copy did not find) and the resync marks (`__resync`).

Every write carries the resync's generation: a statement that restarts, moves or ends the resync
moves it, and the script refuses the write (docs/mirror.md, "Resync")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from redis.asyncio import Redis

from service.checkpoint import BinlogPosition
from service.sink.chain import ApplyChain
from service.sink.checkpoint_store import as_str
from service.sink.keys import KeyLayout
from service.sink.marks import TableMarks
from service.sink.plan import Arg, Planner
from service.sink.replies import map_redis_errors
from service.sink.scripts import RESYNC_FINISH, RESYNC_REREAD, RESYNC_ROWS
from service.sink.values import field_value, json_document

__all__ = ["ResyncWriter", "parse_mark"]


class ResyncWriter:
    def __init__(
        self,
        redis: Redis,
        layout: KeyLayout,
        planner: Planner,
        marks: TableMarks,
        chain: ApplyChain,
        json_mode: bool,
        table_step: int,
    ) -> None:
        self.redis = redis
        self.layout = layout
        self.planner = planner  # row keys of the rows written
        self.marks = marks
        self.chain = chain  # its token is the writer's
        self.json_mode = json_mode
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
        lay = self.layout
        args: list[Arg] = [
            lay.lease_key,
            self.chain.token,
            lay.resync_key,
            lay.table_id(schema, table),
            generation,
        ]
        args.append(lay.touched_key(schema, table))
        args += [lay.stale_key(schema, table), lay.index_key(schema, table), lay.table_base(schema, table)]
        args.append("1" if self.json_mode else "0")
        for row in rows:
            suffix = self.planner._suffix(cols, row)
            if suffix is not None:
                args.append(suffix)
                args += self._row_args(row)
        with map_redis_errors(f"resyncing {schema}.{table}"):
            written = int(await self.rows_script(keys=self.route, args=args))
        return None if written < 0 else written

    def _row_args(self, row: Mapping[str, Any]) -> list[Arg]:
        """A row read from the source, for RESYNC_ROWS / RESYNC_REREAD: count f v ..."""
        if self.json_mode:
            return [1, "", json_document(row)]
        out: list[Arg] = [0]
        for k, v in row.items():
            if v is not None:
                out += [k, field_value(v)]
        out[0] = len(out) // 2
        return out

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
        args: list[Arg] = [lay.lease_key, self.chain.token, lay.resync_key, tid]
        args += [lay.touched_key(schema, table), lay.stale_key(schema, table)]
        args += [lay.index_key(schema, table), lay.table_base(schema, table), generation]
        at = await copied_at() if copied_at else None
        args += [self.table_step, lay.settle_key, str(at or "")]
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
        lay = self.layout
        cols = self.planner.key_columns(schema, table) or ()
        found = {self.planner._suffix(cols, row): row for row in rows}
        args: list[Arg] = [
            lay.lease_key,
            self.chain.token,
            lay.resync_key,
            lay.table_id(schema, table),
            generation,
        ]
        args += [lay.touched_key(schema, table), lay.index_key(schema, table), lay.table_base(schema, table)]
        args.append("1" if self.json_mode else "0")
        for suffix, merges in entries:
            row = found.get(suffix)
            args += [suffix, merges, 0, 0] if row is None else [suffix, merges, 1, *self._row_args(row)]
        with map_redis_errors(f"resyncing {schema}.{table} (rows read again)"):
            done = int(await self.reread_script(keys=self.route, args=args))
        return None if done < 0 else done

    async def pending(self) -> dict[str, str]:
        """table_id -> reason for every resync in flight (survives restarts)."""
        with map_redis_errors("reading pending resyncs"):
            raw = await self.redis.hgetall(self.layout.resync_key)
        return {as_str(k): parse_mark(as_str(v))[1] for k, v in raw.items() if as_str(k) != "__gen"}


def parse_mark(value: str) -> tuple[int | None, str]:
    """A `__resync` value "{generation} {reason}" (a mark without a generation counts as 0), or
    "- {reason}": fenced by a statement whose call is not applied yet (generation None)."""
    gen, sep, reason = value.partition(" ")
    if not sep:
        return 0, value
    return (int(gen), reason) if gen.isdigit() else (None, reason) if gen == "-" else (0, value)
