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
before its transaction's call, in bounded calls waited for one by one (`_run_table_work`).

Redis errors become SinkError in service/sink/replies.py (map_redis_errors) and only there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from redis import exceptions as rexc
from redis.asyncio import Redis

from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import ConfigError, LeaseLost, SinkError
from service.sink.channel import PlainSetup, ScriptChannel
from service.sink.checkpoints import checkpoint_fields, decode_checkpoint, recopy_reason
from service.sink.codec import Arg, CallEncoder
from service.sink.diagnose import lease_loss
from service.sink.fks import ForeignKeys
from service.sink.ir import ApplyCall, ApplyHeader, SetFields
from service.sink.keys import KeyLayout
from service.sink.plan import IrOp, KeyColumns, Planner, TableAction, checkpoint_op
from service.sink.replies import SentBatch, map_redis_errors, redis_access_denied
from service.sink.scripts import ACQUIRE, APPLY, RELEASE, RENEW, RESYNC_FINISH, RESYNC_REREAD, RESYNC_ROWS
from service.sink.server import check_server
from service.sink.tablework import TableWork, unit_ids, work_op
from service.sink.values import field_value, json_document
from service.transactions import Transaction

__all__ = ["MirrorOptions", "RedisMirror", "SentBatch", "map_redis_errors", "redis_access_denied"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MirrorOptions:
    json_mode: bool = False  # one JSON document per row instead of a hash
    full_images: bool = True  # the source logs FULL row images (binlog_row_image=FULL)
    chunk_size: int = 1000  # row changes per atomic script call
    table_step: int = 500  # rows per call of whole-table work (DROP/TRUNCATE/RENAME, resync start/end)
    changelog_maxlen: int | None = None  # keep a change-log stream of about this many entries
    lease_ttl: float = 3.0  # seconds
    plain_inserts: bool = True  # insert-only calls as plain commands in MULTI/EXEC (plain.py)


@dataclass(slots=True)
class _Progress:
    """`{prefix}:__progress`: the chunked transaction a crash interrupted."""

    txn: str  # its id (end position)
    rows: int  # row changes applied (in the selection of the run that applied them)
    first: int  # sequence number of its first change
    tables: dict[str, int] = field(default_factory=dict)  # table_id -> its changes applied

    @classmethod
    def parse(cls, raw: dict[str, str]) -> _Progress | None:
        if "txn" not in raw or "rows" not in raw:  # none, or an older format: start the txn over
            return None
        tables = {k[2:]: int(v) for k, v in raw.items() if k.startswith("t:")}
        return cls(raw["txn"], int(raw["rows"]), int(raw.get("first", -1)), tables)


class RedisMirror:
    def __init__(
        self,
        redis: Redis,
        layout: KeyLayout,
        key_columns: KeyColumns,
        options: MirrorOptions | None = None,
        token: str | None = None,
    ) -> None:
        self.redis = redis
        self.layout = layout
        self.options = opts = options or MirrorOptions()
        self.token = token or secrets.token_hex(8)
        self.ping_error: str | None = None  # why the last ping() failed (for the log)
        self._values = "json" if opts.json_mode else "hash"  # the value mode, as the checkpoint says
        self.planner = Planner(
            layout,
            key_columns,
            json_mode=opts.json_mode,
            full_images=opts.full_images,
            changelog_maxlen=opts.changelog_maxlen,
        )
        plain_rows = opts.plain_inserts and not opts.json_mode
        self.encoder = CallEncoder(layout, json_mode=opts.json_mode, plain_rows=plain_rows)
        plain = None
        if plain_rows:  # not json rows: one MSET per 500 already (op WJN)
            plain = PlainSetup(
                layout.guard_key, layout.fence_key, layout.tables_key, lambda: self.planner.resyncing
            )
        self._channel = ScriptChannel(redis, APPLY, plain, self.encoder)
        self._resync_rows = redis.register_script(RESYNC_ROWS)
        self._resync_finish = redis.register_script(RESYNC_FINISH)
        self._resync_reread = redis.register_script(RESYNC_REREAD)
        self._acquire = redis.register_script(ACQUIRE)
        self._renew = redis.register_script(RENEW)
        self._release = redis.register_script(RELEASE)
        self._route: list[str] = []  # KEYS of the resync calls: a Redis Cluster routes by them
        self._prev = ""  # id of the checkpoint the next transaction must follow
        self._resume: _Progress | None = None  # a chunked transaction to resume (from load)
        self._warned_aof = False
        # why the selected tables must be copied again (the checkpoint hash's recopy marker, read
        # by load_checkpoint; cleared in Redis by the next apply's checkpoint)
        self.recopy: str | None = None
        # table id -> (generation, planner.resyncs_planned) as its resync read them at its start
        self._resync_planned_at: dict[str, tuple[int, int]] = {}

    @property
    def plain_counts(self) -> tuple[int, int]:
        """Apply calls sent in the plain form since start, and those sent again as the script."""
        return self._channel.plain_calls, self._channel.plain_redone

    # -- checkpoint --------------------------------------------------------------------------------
    async def load_checkpoint(self) -> Checkpoint | None:
        """The stored checkpoint (and the chain head for the next apply), after `check_server`.
        Drops the apply connection: replies of calls sent before are never read as replies to
        later ones."""
        await self._channel.close()
        await self.check_server()
        with map_redis_errors("loading the checkpoint"):
            raw = await self.redis.hgetall(self.layout.checkpoint_key)
            progress = await self.redis.hgetall(self.layout.progress_key)
            marks = await self.redis.hkeys(self.layout.resync_key)
            settle = await self.redis.hgetall(self.layout.settle_key)
        self.planner.resyncing = {_s(k) for k in marks} - {"__gen"}
        self.planner.settling = {_s(k): BinlogPosition.parse(_s(v)) for k, v in settle.items()}
        self._resume = _Progress.parse({_s(k): _s(v) for k, v in progress.items()})
        stored = decode_checkpoint(raw)
        self.recopy = recopy_reason(raw)
        if stored is None:
            self._prev = ""
            return None
        if not stored.marked:
            log.info(
                "the checkpoint %s was stored without its event (written by an older version): "
                "resuming without the history check this once; the next apply stores it",
                stored.id,
            )
        mode = self._values
        if stored.values not in (None, mode):
            # the script would meet keys of the other type in the middle of a call
            raise ConfigError(
                f"the rows under key prefix {self.layout.prefix!r} were written with "
                f"value_mode={stored.values}, and value_mode={mode} is set: keep value_mode="
                f"{stored.values}, or mirror into a new key_prefix (copy the tables there with "
                "`binlog-mirror snapshot`)"
            )
        self._prev = stored.id
        return stored.checkpoint

    def _fields(self, txn: Transaction) -> dict[str, str]:
        return checkpoint_fields(txn.end, txn.gtid, self._values, txn.ts)

    def check_foreign_keys(self, fks: ForeignKeys) -> None:
        """Raise ConfigError for constraints this mirror cannot apply (one Redis: any)."""

    async def check_server(self) -> None:
        """Refuse a Redis Cluster node or a Redis that may evict keys (marking the mirror for a
        re-copy when it did), warn once without an append-only file (service/sink/server.py)."""
        self._warned_aof = await check_server(
            self.redis, self.layout.checkpoint_key, warned_aof=self._warned_aof
        )

    # -- lease ---------------------------------------------------------------------------------------
    async def acquire_lease(self) -> bool:
        """Take the lease if free (or already ours); True if this instance is now the writer.
        Each taking counts in `__fence`, which the plain apply calls of a writer before watch."""
        ttl = int(self.options.lease_ttl * 1000)
        keys = [self.layout.lease_key, self.layout.fence_key]
        with map_redis_errors("taking the writer lease"):
            return bool(await self._acquire(keys=keys, args=[self.token, ttl]))

    @property
    def probe_timeout(self) -> float:
        """How long a lease renewal or a ping may take: half the lease's TTL, so a Redis that went
        silent ends the session (and readiness) before the lease could expire, not after the
        client's socket timeout."""
        return self.options.lease_ttl / 2

    async def renew_lease(self) -> None:
        ttl = int(self.options.lease_ttl * 1000)
        with map_redis_errors("renewing the writer lease"):
            async with asyncio.timeout(self.probe_timeout):
                ok = await self._renew(keys=[self.layout.lease_key], args=[self.token, ttl])
        if not ok:
            raise await self.lease_lost(
                LeaseLost("the writer lease expired or was taken by another instance")
            )

    async def lease_lost(self, exc: LeaseLost) -> LeaseLost:
        """`exc` saying what happened to the lease, as Redis shows it now: another instance holds
        it, it expired, or Redis lost the mirror's keys (FLUSHALL, a restart without persistence)."""
        why = await lease_loss(self.redis, self.layout, self.token, had_checkpoint=bool(self._prev))
        return exc if why is None else LeaseLost(why)

    async def release_lease(self) -> bool:
        """Delete the lease if this instance holds it; False if not held or Redis is unreachable."""
        with contextlib.suppress(SinkError), map_redis_errors("releasing the writer lease"):
            async with asyncio.timeout(self.probe_timeout):  # a stop must not wait for a silent Redis
                return bool(await self._release(keys=[self.layout.lease_key], args=[self.token]))
        return False

    async def ping(self) -> bool:
        """True when Redis answers; else False, with why in `ping_error`. Refused credentials
        raise SinkAccessDenied (permanent: waiting cannot help)."""
        try:
            # at least 1 s: a very short lease TTL must not make a loaded Redis look unreachable
            async with asyncio.timeout(max(self.probe_timeout, 1.0)):
                ok = bool(await self.redis.ping())
        except (rexc.AuthenticationError, rexc.AuthorizationError, rexc.NoPermissionError) as exc:
            raise redis_access_denied("ping", exc) from exc
        except rexc.ResponseError as exc:
            if str(exc).startswith(("WRONGPASS", "NOAUTH", "NOPERM")):
                raise redis_access_denied("ping", exc) from exc
            self.ping_error = f"{type(exc).__name__}: {exc}"
            return False
        except (rexc.RedisError, OSError, TimeoutError) as exc:
            self.ping_error = f"{type(exc).__name__}: {exc}"
            return False
        self.ping_error = None
        return ok

    # -- apply ---------------------------------------------------------------------------------------
    def _header(self, txn_id: str, chunk: int, final: bool, nseq: int, done: int = 0) -> ApplyHeader:
        lay = self.layout
        return ApplyHeader(
            lay.lease_key,
            self.token,
            lay.checkpoint_key,
            self._prev,
            lay.progress_key,
            txn_id,
            chunk,
            final,
            lay.seq_key,
            nseq,
            lay.resync_key,
            done,
        )

    async def apply(self, batch: Sequence[tuple[Transaction, Sequence[TableAction]]]) -> list[int]:
        """Apply transactions in order and wait; returns the first change sequence number of each.
        On any error, what was applied is exactly a prefix of `batch` (the stored checkpoint says
        which); callers resume from the stored checkpoint."""
        return await (await self.send(batch)).replies()

    async def send(self, batch: Sequence[tuple[Transaction, Sequence[TableAction]]]) -> SentBatch:
        """Plan and write the script calls of `batch` without waiting for Redis to run them;
        `replies()` of the result waits. Batches sent one after another apply in order.

        Consecutive small transactions share one call (up to `chunk_size` changes), which applies
        them all or none and stores the last one's checkpoint; a larger one is sent chunk by chunk.
        Each call is written as soon as it is planned, so Redis runs it while the next is planned.
        """
        sent = SentBatch(self._channel, self._channel.epoch, self.planner, redis=self.redis)
        limit = self.options.chunk_size
        group: list[IrOp] = []  # ops of the call being planned
        offsets: list[int] = []  # of its transactions' first changes
        size = 0
        last: Transaction | None = None  # its last transaction
        try:
            for txn, actions in batch:
                fence, work = self.planner.table_work(actions) if actions else ([], [])
                if work:
                    if last is not None:
                        await self._send_group(sent, group, offsets, size, last)
                        group, offsets, size, last = [], [], 0, None
                    await self._run_table_work(str(txn.end.position), fence, work)
                n = len(txn.changes)
                resume = self._resume
                if resume is not None and resume.txn != str(txn.end.position):
                    resume = None
                if resume is None and n <= limit:
                    if last is not None and size + n > limit:
                        await self._send_group(sent, group, offsets, size, last)
                        group, offsets, size, last = [], [], 0, None
                    if last is None:
                        self.planner.begin_call()
                    offsets.append(size)
                    self.planner.transaction(group, txn, actions)
                    size += n
                    last = txn
                    continue
                if last is not None:
                    await self._send_group(sent, group, offsets, size, last)
                    group, offsets, size, last = [], [], 0, None
                await self._send_chunked(sent, txn, actions, resume)
            if last is not None:
                await self._send_group(sent, group, offsets, size, last)
        except Exception:
            # The calls already written run anyway: wait for them, so that when the caller sees
            # the error, Redis holds exactly the prefix they applied.
            with contextlib.suppress(SinkError):
                await sent.replies()
            raise
        return sent

    async def _send_group(
        self, sent: SentBatch, ops: list[IrOp], offsets: list[int], size: int, last: Transaction
    ) -> None:
        txn_id = str(last.end.position)
        tail = [checkpoint_op(self.layout, self._fields(last))]
        call = ApplyCall(self._header(txn_id, 0, True, size), ops, tail)
        many = f"{len(offsets)} transactions up to " if len(offsets) > 1 else "transaction "
        await self._send(sent, call, f"applying {many}{txn_id}", offsets)
        self._prev = txn_id

    async def _send_chunked(
        self, sent: SentBatch, txn: Transaction, actions: Sequence[TableAction], resume: _Progress | None
    ) -> None:
        """A big (or resumed) transaction, chunk by chunk; each chunk but the last records in
        `__progress` how many changes of each table are done. Planned one chunk ahead, never
        whole: a transaction of millions of rows would otherwise hold every row's arguments."""
        txn_id = str(txn.end.position)
        cp = [checkpoint_op(self.layout, self._fields(txn))]
        size = self.options.chunk_size
        todo: Sequence[int] = range(len(txn.changes))
        if resume is not None:  # its table actions went with its first chunk
            todo = self.planner.remaining(txn, resume.tables)
            chunks = self.planner.chunks(txn, [], size, todo)
            skipped = len(txn.changes) - len(todo)
            log.info("resuming transaction %s after a crash: %d row changes were applied", txn_id, skipped)
        else:
            chunks = self.planner.chunks(txn, actions, size)
        done = dict(resume.tables) if resume else {}
        rows = resume.rows if resume else 0
        tids = self.planner.table_ids(txn)
        at = i = 0
        ahead = next(chunks, None)
        while ahead is not None:
            ops, n = ahead
            ahead = next(chunks, None)
            i += 1
            final = ahead is None
            tail = cp
            if not final:
                for tid, k in Counter(map(tids.__getitem__, todo[at : at + n])).items():
                    done[tid] = done.get(tid, 0) + k
                tail = [
                    SetFields(self.layout.progress_key, tuple((f"t:{t}", str(k)) for t, k in done.items()))
                ]
            call = ApplyCall(self._header(txn_id, i, final, n, rows), ops, tail)
            what = f"applying chunk {i} (to change {at + n} of {len(todo)}) of transaction {txn_id}"
            # every chunk returns the transaction's first sequence number: keep the last's
            await self._send(sent, call, what, (0,) if final else ())
            rows += n
            at += n
        self._resume = None
        self._prev = txn_id

    async def _run_table_work(self, txn_id: str, fence: list[IrOp], work: Sequence[TableWork]) -> None:
        """The whole-table work of a transaction's DROP/TRUNCATE/RENAME and resync starts, before
        the transaction's own call: `table_step` rows per call, each call waited for before the
        next is written, so Redis serves its other clients in between (one script over a table of
        millions of rows blocked it for seconds, and its other clients got BUSY). The first call
        also stops the resyncs in flight of those tables from writing (`fence`). The checkpoint
        does not move until the transaction's call, so a crash in between replays the
        transaction: `__tableops` records the units done, the others resume (docs/mirror.md,
        "Table operations")."""
        step = self.options.table_step
        # A "transaction" that ends at the stored checkpoint is the session start's reconciliation
        # with the table selection (drops, resync starts): its units are repeatable, so they are
        # not recorded, and the record of a statement cut short before it stays for its replay.
        key = self.layout.table_ops_key if txn_id != self._prev else ""
        orphans = await self._orphans(txn_id, work) if key else []
        ids = [f"CU {w.index} (moved by an earlier plan)" for w in orphans] + unit_ids(work)
        work = [*orphans, *work]
        header = self._header(txn_id, 0, True, 0)
        calls = 0
        ops = list(fence)
        noted = started = time.monotonic()
        for uid, w in zip(ids, work, strict=True):
            cursor = ""
            while True:
                ops += work_op(key, uid, w, step, cursor)
                calls += 1
                with map_redis_errors(f"table work (DROP/TRUNCATE/RENAME/resync) of {txn_id}, call {calls}"):
                    reply = await self._channel.call(ApplyCall(header, ops))
                ops = []
                if reply == 0 or reply == b"0":
                    break
                cursor = (
                    reply.decode() if isinstance(reply, bytes) else str(reply)
                )  # CopyMembers: its SSCAN's next
                if time.monotonic() - noted > 10:  # a table of millions of rows: show progress
                    noted = time.monotonic()
                    left = "" if w.op == "CP" else f", {int(reply):,} rows left"
                    log.info("transaction %s: table work %s of %s%s", txn_id, w.op, w.index, left)
        if calls > len(work):
            took = time.monotonic() - started
            log.info("transaction %s: table work done in %d calls, %.1fs", txn_id, calls, took)

    async def _orphans(self, txn_id: str, work: Sequence[TableWork]) -> list[TableWork]:
        """When `txn_id`'s table work was cut short and is now planned differently (another table
        selection), the rows it moved to a name that `work` no longer moves rows to: units that
        remove them, or they would stay under a name nobody mirrors."""
        txn, moves = await self._table_ops_record()
        if txn != txn_id:
            return []
        kept = {w.to_index for w in work if w.op == "MU"}
        return [TableWork("CU", index, base) for index, base in moves.items() if index not in kept]

    async def _table_ops_record(self) -> tuple[str, dict[str, str]]:
        """`__tableops`: its transaction id, and the `__keys` set -> row-key base of each name its
        moves took rows to."""
        with map_redis_errors("reading the table work record (__tableops)"):
            raw = await self.redis.hgetall(self.layout.table_ops_key)
        record = {_s(k): _s(v) for k, v in raw.items()}
        return record.get("txn", ""), {f[3:]: base for f, base in record.items() if f.startswith("to ")}

    async def _send(self, sent: SentBatch, call: ApplyCall, what: str, offsets: Sequence[int]) -> None:
        with map_redis_errors(what):
            await self._channel.send(call)
        sent.calls.append((what, offsets))

    async def close(self) -> None:
        """Close the apply connection (replies of calls in flight are dropped)."""
        await self._channel.close()

    def reset_chain(self, checkpoint_id: str) -> None:
        self._prev = checkpoint_id

    # -- resync ----------------------------------------------------------------------------------
    async def resync_generation(self, schema: str, table: str) -> int | None:
        """The generation of the table's resync in flight; None when none is, or its mark is
        fenced (the statement that restarts, moves or ends it is being applied: its call starts
        the next copy). A resync reads it before its first SELECT and passes it with every write:
        a change that restarts or ends the resync (TRUNCATE, DROP, RENAME, a newer ALTER) moves
        it, and the writes are refused."""
        tid = self.layout.table_id(schema, table)
        planned = self.planner.resyncs_planned[tid]
        with map_redis_errors(f"reading the resync mark of {schema}.{table}"):
            raw = await self.redis.hget(self.layout.resync_key, tid)
        generation = None if raw is None else _mark(_s(raw))[0]
        if generation is None:
            return None
        self._resync_planned_at[tid] = (generation, planned)
        return generation

    async def resync_rows(
        self, schema: str, table: str, rows: Sequence[dict[str, Any]], generation: int
    ) -> int | None:
        """Write rows re-read from the source, except keys the stream wrote since the resync began.
        None: refused, `generation` is no longer the table's resync (nothing was written)."""
        cols = self.planner.key_columns(schema, table)
        if not cols:
            return 0
        lay = self.layout
        args: list[Arg] = [lay.lease_key, self.token, lay.resync_key, lay.table_id(schema, table), generation]
        args.append(lay.touched_key(schema, table))
        args += [lay.stale_key(schema, table), lay.index_key(schema, table), lay.table_base(schema, table)]
        args.append("1" if self.options.json_mode else "0")
        for row in rows:
            suffix = self.planner._suffix(cols, row)
            if suffix is not None:
                args.append(suffix)
                args += self._row_args(row)
        with map_redis_errors(f"resyncing {schema}.{table}"):
            written = int(await self._resync_rows(keys=self._route, args=args))
        return None if written < 0 else written

    def _row_args(self, row: Mapping[str, Any]) -> list[Arg]:
        """A row read from the source, for RESYNC_ROWS / RESYNC_REREAD: count f v ..."""
        if self.options.json_mode:
            return [1, "", json_document(row)]
        out: list[Arg] = [0]
        for k, v in row.items():
            if v is not None:
                out += [k, field_value(v)]
        out[0] = len(out) // 2
        return out

    async def resync_finish(
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
        updates carry whole rows until the stream passes it (`Planner.settling`).
        None: refused, `generation` is no longer the table's resync."""
        lay = self.layout
        tid = lay.table_id(schema, table)
        args: list[Arg] = [lay.lease_key, self.token, lay.resync_key, tid]
        args += [lay.touched_key(schema, table), lay.stale_key(schema, table)]
        args += [lay.index_key(schema, table), lay.table_base(schema, table), generation]
        at = await copied_at() if copied_at else None
        args += [self.options.table_step, lay.settle_key, str(at or "")]
        removed, cursor = 0, 0
        while True:  # `table_step` stale rows per call: Redis serves other clients in between
            with map_redis_errors(f"finishing the resync of {schema}.{table}"):
                reply = await self._resync_finish(keys=self._route, args=args)
            if not isinstance(reply, list):  # -1: refused
                return None
            removed += int(reply[0])
            if int(reply[1]) == 0 and int(reply[2]) > 0:
                if reread is None:
                    raise ValueError(f"rows of {schema}.{table} wait to be read again: pass `reread`")
                with map_redis_errors(f"listing the rows of {schema}.{table} to read again"):
                    cursor, raw = await self.redis.hscan(lay.partial_key(schema, table), cursor, count=500)
                entries = [(_s(k), _s(v)) for k, v in cast(dict[bytes, bytes], raw).items()]
                if entries and not await reread(entries):
                    return None
                if copied_at is not None:
                    at = await copied_at()
                    args[-1] = str(at or "")
                continue
            if int(reply[1]) == 0:
                planner = self.planner
                if at is not None:  # as the script stored it
                    planner.settling[tid] = at
                # Whole rows no more (once settled), unless a newer resync was planned since this
                # one read its generation (its mark is set by a call not applied yet, or already)
                if self._resync_planned_at.pop(tid, None) == (generation, planner.resyncs_planned[tid]):
                    planner.resyncing.discard(tid)
                    planner.gaps.discard(tid)  # every row was read again
                return removed

    async def resync_reread(
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
        args: list[Arg] = [lay.lease_key, self.token, lay.resync_key, lay.table_id(schema, table), generation]
        args += [lay.touched_key(schema, table), lay.index_key(schema, table), lay.table_base(schema, table)]
        args.append("1" if self.options.json_mode else "0")
        for suffix, merges in entries:
            row = found.get(suffix)
            args += [suffix, merges, 0, 0] if row is None else [suffix, merges, 1, *self._row_args(row)]
        with map_redis_errors(f"resyncing {schema}.{table} (rows read again)"):
            done = int(await self._resync_reread(keys=self._route, args=args))
        return None if done < 0 else done

    async def pending_resyncs(self) -> dict[str, str]:
        """table_id -> reason for every resync in flight (survives restarts)."""
        with map_redis_errors("reading pending resyncs"):
            raw = await self.redis.hgetall(self.layout.resync_key)
        return {_s(k): _mark(_s(v))[1] for k, v in raw.items() if _s(k) != "__gen"}

    async def mirrored_tables(self) -> set[str]:
        with map_redis_errors("reading the mirrored tables"):
            raw = await self.redis.smembers(self.layout.tables_key)
        return {_s(m) for m in raw}

    async def moved_to_tables(self, applied: Checkpoint | None) -> set[str]:
        """The tables the RENAME cut short after `applied` (its table work done, its own call not)
        moved rows to, as `__tableops` records them: if such a table is no longer selected, those
        rows belong to no mirrored table."""
        txn, moves = await self._table_ops_record()
        with contextlib.suppress(ValueError):  # not a position: keep its tables, dropping is harmless
            if applied is not None and BinlogPosition.parse(txn) <= applied.position:
                return set()  # that statement was applied: its tables are in `__tables` if mirrored
        skip = len(self.layout.prefix) + 1  # a row-key base is `{prefix}:{table id}`
        return {base[skip:] for base in moves.values()}


def _mark(value: str) -> tuple[int | None, str]:
    """A `__resync` value "{generation} {reason}" (a mark without a generation counts as 0), or
    "- {reason}": fenced by a statement whose call is not applied yet (generation None)."""
    gen, sep, reason = value.partition(" ")
    if not sep:
        return 0, value
    return (int(gen), reason) if gen.isdigit() else (None, reason) if gen == "-" else (0, value)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
