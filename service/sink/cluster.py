"""ClusterMirror: the mirror on a Redis Cluster, applied per slot group (docs/mirror.md, "Redis Cluster").

A script call may only touch keys of one hash slot, so a transaction is split by table:

  * every mirrored table is a **slot group**: its rows, its `__keys` (and resync sets) and its own
    checkpoint, progress, table-work record and resync marks share the hash tag `{schema:table}`
    (`keys.GroupLayout`). `GroupMirror` is the single-node `RedisMirror` on those keys: the part of
    each transaction that touches the table is one atomic script call on the node owning the slot,
    with the group's checkpoint chain, chunking and table work exactly as on one node;
  * a shaped table with key templates or indexes is in the slot of its templates' literal hash tag
    instead (`{prefix}:{{tag}}:__table:{schema}:{table}`, shaping.section_tag): its rows, entries
    and the application's keys it writes are one call;
  * the tables of documents whose keys carry one hash tag share one group in that slot
    (`{prefix}:{{tag}}:__docs`, id `__docs:{tag}`): a transaction's rows, the documents and the
    cascades between their tables are one call. `{prefix}:__groups` records each table's
    placement (shaping.Shapes.placement): a start that finds it changed drops the table in its
    old group and copies it into the new one (`_regroup`);
  * the **global group** (`KeyLayout("{prefix}")`, one slot) holds the writer lease, the fencing
    counter, the checkpoint a restart resumes from, `__seq`, the change log `__changes`, the
    mirrored `__tables` and `__heads` (each group's last applied transaction). Its call for a batch
    is written only after every group part of the batch was applied, so it never runs ahead of one.

A restart resumes from the global checkpoint (or from a group that is behind what `__heads` says:
its node lost writes, e.g. a failover), and each group skips the transactions its own checkpoint
covers, so every row change is applied once per group. The lease lives on one node: each group
call carries the writer's fencing number (drawn when it took the lease) and the script refuses it
when a newer writer already wrote that group (common.lua `fence`).

RENAME moves rows between slots, which no script can do atomically: here it is a DROP of the old
name and a resync (a copy from the source) of the new one. FK cascades (child rows in other slots)
are not applied across groups (within a document group they are).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from service.binlog.rowchange import RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink.checkpoints import checkpoint_fields, decode_checkpoint
from service.sink.clusterfks import check_cluster_cascades, group_foreign_keys
from service.sink.clustergroup import ClusterChannel, GroupMirror, as_text
from service.sink.fks import ForeignKeys
from service.sink.ir import (
    AddMember,
    AppendChange,
    ApplyCall,
    RemoveMember,
    SetFields,
    SkipSequence,
    Text,
)
from service.sink.keys import DOCREC_SUFFIX, DOCS_MARK, DOCUMENT_GROUP, KeyLayout, placed_layout, split_key
from service.sink.mirror import MirrorOptions, RedisMirror
from service.sink.plan import ActionKind, IrOp, KeyColumns, TableAction, checkpoint_op
from service.sink.replies import SentBatch, map_redis_errors
from service.sink.scripts import APPLY, FENCE
from service.sink.server import check_info
from service.sink.values import json_document
from service.transactions import Transaction

__all__ = ["ClusterChannel", "ClusterMirror", "cluster_layout"]

log = logging.getLogger(__name__)

Unit = tuple[Transaction, Sequence[TableAction]]


def cluster_layout(prefix: str) -> KeyLayout:
    """The global group's keys: `{prefix}:__checkpoint`, `{prefix}:__changes`, ... (one slot)."""
    return KeyLayout(f"{{{prefix}}}")


@dataclass(slots=True)
class _ClusterSent(SentBatch):
    """The global call of a batch; `applied[i]`: whether unit i was in it (else it was applied
    before a crash, and its first sequence number is unknown here: 0)."""

    applied: list[bool] = field(default_factory=list)

    async def replies(self) -> list[int]:
        firsts = iter(await SentBatch.replies(self))
        return [next(firsts) if a else 0 for a in self.applied]


class ClusterMirror(RedisMirror):
    def __init__(
        self,
        cluster: RedisCluster,
        prefix: str,
        key_columns: KeyColumns,
        options: MirrorOptions | None = None,
        token: str | None = None,
        foreign_keys: Callable[[], ForeignKeys] | None = None,
        *,
        shape_of: Callable[[str, str], str] | None = None,
        derive_of: Callable[[str, str], str] | None = None,
        place_of: Callable[[str, str], str | None] | None = None,
        json_of: Callable[[str, str], bool] | None = None,
    ) -> None:
        """`shape_of`, `derive_of`, `json_of`: as RedisMirror's, for each group's table; `place_of`:
        a table's placement (shaping.Shapes.placement): the slot group its keys are in."""
        layout = cluster_layout(prefix)
        super().__init__(
            cast(Redis, cluster),
            layout,
            key_columns,
            options,
            token,
            # the constraints inside document groups (their sets are in the groups: fk_mirror)
            foreign_keys=group_foreign_keys(foreign_keys, None, self._group_of),
            json_of=json_of,
        )
        self.cluster = cluster
        self.prefix = prefix
        self.chain.channel = ClusterChannel(cluster, APPLY, self.layout.checkpoint_key, self.encoder)
        self.resyncs.route = [self.layout.checkpoint_key]
        self.sweeper.route = [self.layout.checkpoint_key]
        self._fence_script = cluster.register_script(FENCE)
        self._fence: int | None = None  # this writer's fencing number, while it holds the lease
        self._groups: dict[str, GroupMirror] = {}  # by table id, loaded this session
        self._global: Checkpoint | None = None  # the global checkpoint as stored
        self._global_gtid = ""
        self._tids: dict[tuple[str, str], str] = {}
        self._loading = asyncio.Lock()
        self._shape_of, self._derive_of, self._json_of = shape_of, derive_of, json_of
        self._place_of = place_of or (lambda schema, table: None)
        self._foreign_keys = foreign_keys
        self._recorded: dict[str, str] = {}  # `__groups` as this session wrote or found it
        self._gids: dict[str, str] = {}  # table id -> its group's id
        self._placed: set[str] = set()  # the tables whose placement this session recorded

    @property
    def groups_key(self) -> str:
        """Hash: table id -> the hash tag of its slot group, for the tables in a tagged group.
        Written before the group's first call of a session, and kept after a DROP (a stale entry
        costs one DROP of an empty group): a start that finds a table's tag changed knows where
        its keys are, even after a crash before the global call."""
        return f"{self.layout.prefix}:__groups"

    def _placement(self, tid: str) -> str | None:
        parts = split_key(tid)
        if len(parts) != 2:
            raise ValueError(f"not a table id: {tid!r}")
        return self._place_of(parts[0], parts[1])

    def _gid(self, tid: str) -> str:
        gid = self._gids.get(tid)
        if gid is None:
            gid = self._gids[tid] = _group_id(tid, self._placement(tid))
        return gid

    def _group_of(self, table: tuple[str, str]) -> str:
        return self._gid(self._tid(*table))

    @property
    def heads_key(self) -> str:
        return f"{self.layout.prefix}:__heads"

    def check_foreign_keys(self, fks: ForeignKeys) -> None:
        check_cluster_cascades(fks, self._group_of)

    # -- server, lease ---------------------------------------------------------------------------
    async def check_server(self) -> None:
        """Every master: the eviction and persistence checks of a single node."""
        with map_redis_errors("reading the Redis Cluster's settings"):
            await self.cluster.initialize()
            for node in self.cluster.get_primaries():
                info = await self.cluster.info("memory", "persistence", "stats", target_nodes=node)
                self._warned_aof = await check_info(
                    cast(Redis, self.cluster), self.layout.checkpoint_key, info, warned_aof=self._warned_aof
                )

    async def acquire_lease(self) -> bool:
        """The lease (as on one node), and a new fencing number each time it is taken afresh."""
        ttl = int(self.options.lease_ttl * 1000)
        lease = self.layout.lease_key
        with map_redis_errors("taking the writer lease"):
            fresh = await self.redis.set(lease, self.token, nx=True, px=ttl)
            if not fresh and not await self.lease.renew_script(keys=[lease], args=[self.token, ttl]):
                self._fence = None
                return False
            if fresh or self._fence is None:
                number = int(await self._fence_script(keys=[lease, self.layout.fence_key], args=[self.token]))
                if number == 0:  # expired in between
                    self._fence = None
                    return False
                self._fence = number
                for g in self._groups.values():
                    g.token = f"#{number}"
        return True

    async def renew_lease(self) -> None:
        try:
            await super().renew_lease()
        except BaseException:
            self._fence = None
            raise

    # -- checkpoint ------------------------------------------------------------------------------
    async def _group(self, tid: str) -> GroupMirror:
        g = self._groups.get(self._gid(tid))
        if g is not None and tid in self._placed:
            return g
        # one instance per group: the applier and a resync task may ask for it at once
        async with self._loading:
            return await self._load_group(tid)

    async def _load_group(self, tid: str) -> GroupMirror:
        place, gid = self._placement(tid), self._gid(tid)
        if place is not None and self._recorded.get(tid) != place:
            with map_redis_errors(f"recording the slot group of {tid}"):
                await self.redis.hset(self.groups_key, tid, place)
            self._recorded[tid] = place
        self._placed.add(tid)
        g = self._groups.get(gid)
        if g is None:
            fks = group_foreign_keys(self._foreign_keys, gid, self._group_of)
            g = self._groups[gid] = await self._open_group(tid, place, fks)
        return g

    async def _open_group(
        self, tid: str, place: str | None, fks: Callable[[], ForeignKeys] | None
    ) -> GroupMirror:
        parts = split_key(tid)
        layout = placed_layout(self.prefix, parts[0], parts[1], place)
        g = GroupMirror(
            self.cluster,
            layout,
            self.planner.key_columns,
            self.options,
            self.planner.skipped,
            self._shape_of,
            self._derive_of,
            self._json_of,
            fks,
        )
        g.token = f"#{self._fence or 0}"
        g.at = await g.load_checkpoint()
        return g

    async def _regroup(self) -> None:
        """Tables whose section now places their keys in another slot group than the one they
        are in (a hash tag added, changed or removed): no call can move keys between slots, so
        the old group's keys (rows, entries, the application's keys) are dropped there, in its own
        call, and the table leaves `__tables`: the session's bootstrap copies it into its new
        group. A crash in between drops again (the record goes last). A table recorded but no
        longer mirrored (dropped) is dropped again in its old group: an empty drop."""
        with map_redis_errors("reading the tables' slot groups"):
            raw = await self.redis.hgetall(self.groups_key)
        recorded = {as_text(k): as_text(v) for k, v in raw.items()}
        self._recorded = dict(recorded)
        for tid in sorted(set(recorded) | await self.mirrored_tables()):
            was, now = recorded.get(tid), self._placement(tid)
            if was == now:
                continue
            schema, table = split_key(tid)
            old = await self._open_group(tid, was, None)
            old.planner.cascades.always_clear = _group_id(tid, was) != tid  # (its sets, if any)
            log.warning(
                "table %s: its [table] section moved its keys from slot group %s to %s: its keys "
                "there are removed and it is copied again",
                tid,
                old.layout.prefix,
                placed_layout(self.prefix, schema, table, now).prefix,
            )
            if old.at is not None:
                drop = TableAction(ActionKind.DROP, schema, table, reason="slot group changed")
                await (await old.send([(Transaction((), (), None, old.at.ts, old.at), [drop])])).replies()
            await old.close()
            with map_redis_errors(f"forgetting the slot group of {tid}"):
                await self.redis.delete(f"{old.layout.table_base(schema, table)}:{DOCREC_SUFFIX}")  # (roles)
                await self.redis.srem(self.layout.tables_key, tid)
                await self.redis.hdel(self.heads_key, tid)
                await self.redis.hdel(self.groups_key, tid)
            self._recorded.pop(tid, None)

    async def fk_mirror(self, schema: str, table: str) -> RedisMirror:
        return await self._group(self._tid(schema, table))

    async def fk_mirrors(self) -> list[RedisMirror]:  # the document groups with constraints
        out: dict[str, RedisMirror] = {}
        for fk in self.planner.cascades.foreign_keys().keys:
            tid = self._tid(*fk.child)
            out.setdefault(self._gid(tid), await self._group(tid))
        return list(out.values())

    async def _mirrored_groups(self) -> list[GroupMirror]:
        out: dict[str, GroupMirror] = {}
        for tid in sorted(await self.mirrored_tables()):
            out.setdefault(self._gid(tid), await self._group(tid))
        return list(out.values())

    async def table_shapes(self) -> dict[str, str]:
        """Each group's `__shapes` (a group records its own tables' shapes, in its slot)."""
        out: dict[str, str] = {}
        for g in await self._mirrored_groups():
            out.update(await g.table_shapes())
        return out

    def _tid(self, schema: str, table: str) -> str:
        tid = self._tids.get((schema, table))
        if tid is None:
            tid = self._tids[schema, table] = self.layout.table_id(schema, table)
        return tid

    async def load_checkpoint(self) -> Checkpoint | None:
        """Where to resume: the global checkpoint, or the checkpoint of a group that is behind the
        transaction `__heads` says it applied (its node lost writes: a failover, or a restart
        that lost the last second of its append-only file). A group that lost all its keys leaves
        `__tables`, so the session's bootstrap copies its table again."""
        for g in self._groups.values():
            await g.close()
        self._groups.clear()
        checkpoint = await super().load_checkpoint()
        await self._regroup()
        with map_redis_errors("loading the slot groups' checkpoints"):
            stored = decode_checkpoint(await self.redis.hgetall(self.layout.checkpoint_key))
            raw_heads = await self.redis.hgetall(self.heads_key)
        self._global = checkpoint
        self._global_gtid = stored.gtid or "" if stored else ""
        heads = {as_text(k): BinlogPosition.parse(as_text(v)) for k, v in raw_heads.items()}
        resume = checkpoint
        members: dict[str, list[str]] = {}  # group id -> its mirrored tables
        for tid in sorted(await self.mirrored_tables()):
            members.setdefault(self._gid(tid), []).append(tid)
        for gid in sorted(set(heads) | set(members)):
            tids = members.get(gid, [gid])
            head = heads.get(gid)
            if gid not in members and gid.startswith(DOCS_MARK):  # no table of it is placed there now
                with map_redis_errors(f"forgetting the slot group {gid}"):
                    await self.redis.hdel(self.heads_key, gid)
                continue
            g = await self._group(tids[0])
            if head is None or (g.at is not None and not g.at.position < head):
                continue
            if g.at is None:
                log.warning("slot group %s lost its keys (its node lost its data): copying it again", gid)
                with map_redis_errors(f"forgetting the lost slot group {gid}"):
                    await self.redis.srem(self.layout.tables_key, *tids)
                    await self.redis.hdel(self.heads_key, gid)
                continue
            log.warning(
                "slot group %s is at %s, behind %s, which it had applied (its node lost writes): "
                "resuming from there; the other groups skip what they hold",
                gid,
                g.at.position,
                head,
            )
            if resume is None or g.at.position < resume.position:
                resume = g.at
        return resume

    async def pending_resyncs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for g in await self._mirrored_groups():
            out.update(await g.pending_resyncs())
        return out

    async def moved_to_tables(self, applied: Checkpoint | None) -> set[str]:
        return set()  # a RENAME moves no rows here (it is a DROP and a resync)

    async def close(self) -> None:
        for g in self._groups.values():
            await g.close()
        await super().close()

    # -- apply -----------------------------------------------------------------------------------
    async def send(self, batch: Sequence[Unit]) -> SentBatch:
        """Apply each group's part of `batch` (the groups concurrently, each in order), then write
        the global call; `replies()` waits for that one."""
        units = [(txn, _without_renames(actions)) for txn, actions in batch]
        parts: dict[str, list[Unit]] = {}  # by group id
        tables: dict[str, str] = {}  # group id -> a table of it, to find it by
        for txn, actions in units:
            for gid, (tid, part) in self._split(txn, actions).items():
                tables.setdefault(gid, tid)
                parts.setdefault(gid, []).append(part)
        results = await asyncio.gather(
            *(self._apply_group(tables[gid], part) for gid, part in parts.items()), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return await self._send_global(units, list(parts))

    def _split(self, txn: Transaction, actions: Sequence[TableAction]) -> dict[str, tuple[str, Unit]]:
        """The part of `txn` (and its table actions) of each slot group, by group id, with a
        table of the group: changes of tables without a usable key are counted as skipped and go
        nowhere."""
        acts: dict[str, list[TableAction]] = {}
        first: dict[str, str] = {}
        for a in actions:
            tid = self._tid(a.schema, a.table)
            first.setdefault(self._gid(tid), tid)
            acts.setdefault(self._gid(tid), []).append(a)
        rows: dict[str, list[int]] = {}
        keyed: dict[tuple[str, str], bool] = {}
        for i, ch in enumerate(txn.changes):
            key = (ch.schema, ch.table)
            k = keyed.get(key)
            if k is None:
                k = keyed[key] = bool(self.planner.key_columns(*key))
            if not k:
                self.planner.skipped.add(*key)
                continue
            tid = self._tid(*key)
            first.setdefault(self._gid(tid), tid)
            rows.setdefault(self._gid(tid), []).append(i)
        out: dict[str, tuple[str, Unit]] = {}
        for gid in dict.fromkeys([*acts, *rows]):
            idx = rows.get(gid, [])
            partial = frozenset(j for j, i in enumerate(idx) if i in txn.partial)
            changes = tuple(txn.changes[i] for i in idx)
            part = Transaction(changes, txn.ddl, txn.gtid, txn.ts, txn.end, partial)
            out[gid] = (first[gid], (part, acts.get(gid, [])))
        return out

    async def _apply_group(self, tid: str, part: Sequence[Unit]) -> None:
        g = await self._group(tid)
        todo: list[Unit] = []
        for txn, actions in part:
            at = g.at
            if at is not None and not at.position < txn.end.position:
                if txn.changes or txn.ddl:
                    continue  # this group applied it before a crash
                # the session's reconciliation (or a requested resync) at a point the group is
                # past: its actions, at the group's own checkpoint (which must not move back)
                txn = Transaction((), (), None, at.ts, at)
            todo.append((txn, actions))
        if not todo:
            return
        sent = await g.send(todo)
        await sent.replies()
        g.at = todo[-1][0].end

    async def _send_global(self, units: Sequence[Unit], groups: Sequence[str]) -> SentBatch:
        """The global calls: sequence numbers and change-log entries of the transactions not
        applied before (a resume from a group behind the global checkpoint replays some), the
        mirrored tables, each touched group's head, and the global checkpoint. Consecutive
        transactions share a call up to `chunk_size` changes with the change log on (a bigger one
        is a call of its own)."""
        channel = self.chain.channel
        sent = _ClusterSent(channel, channel.epoch, self.planner, redis=self.redis)
        done = self._global
        # without the change log a change adds nothing to the call: one call per batch
        logged = self.options.changelog_maxlen is not None
        limit = self.options.chunk_size if logged else math.inf
        ops: list[IrOp] = []
        offsets: list[int] = []
        size = 0
        last: tuple[Checkpoint, str, int] | None = None  # end, gtid and ts of the call's last txn
        tables = self.layout.tables_key
        registered: set[str] = set()
        for txn, actions in units:
            again = done is not None and not done.position < txn.end.position
            if again and (txn.changes or txn.ddl):
                sent.applied.append(False)
                continue
            n = len(txn.changes)
            if last is not None and size + n > limit:
                await self._global_call(sent, ops, offsets, size, last, ())
                ops, offsets, size, last, registered = [], [], 0, None, set()
            sent.applied.append(True)
            offsets.append(size)
            size += n
            if again and done is not None:  # the reconciliation at the point the groups resumed from
                last = (done, self._global_gtid, done.ts)
            else:
                last = (txn.end, txn.gtid or "", txn.ts)
            for a in actions:
                tid = self._tid(a.schema, a.table)
                registered.discard(tid)
                if a.kind is ActionKind.DROP:
                    ops.append(RemoveMember(tables, tid))
                elif a.kind in (ActionKind.REGISTER, ActionKind.RESYNC):
                    ops.append(AddMember(tables, tid))
            for i, ch in enumerate(txn.changes):
                self._global_ops(ops, ch, i in txn.partial, registered)
        if last is not None:
            await self._global_call(sent, ops, offsets, size, last, groups)
        return sent

    async def _global_call(
        self,
        sent: SentBatch,
        ops: list[IrOp],
        offsets: Sequence[int],
        size: int,
        last: tuple[Checkpoint, str, int],
        groups: Sequence[str],
    ) -> None:
        end, gtid, ts = last
        heads: list[tuple[str, Text]] = []
        for gid in groups:
            at = self._groups[gid].at
            if at is not None:
                heads.append((gid, str(at.position)))
        tail: list[IrOp] = [SetFields(self.heads_key, tuple(heads))] if heads else []
        txn_id = str(end.position)
        values = "json" if self.options.json_mode else "hash"
        tail.append(checkpoint_op(self.layout, checkpoint_fields(end, gtid, values, ts)))
        what = f"applying the global part of {len(offsets)} transaction(s) up to {txn_id}"
        await self.chain.send(
            sent, ApplyCall(self.chain.header(txn_id, 0, True, size), ops, tail), what, offsets
        )
        self.chain.prev = txn_id
        self._global, self._global_gtid = end, gtid

    def _global_ops(self, out: list[IrOp], ch: RowChange, partial: bool, registered: set[str]) -> None:
        """A change's part in the global call: its table in `__tables` (once per call), its
        change-log entry (or just its sequence number, for a row without a usable key)."""
        suffix = self.planner.change_key(ch, partial)
        maxlen = self.options.changelog_maxlen
        if suffix is None:
            if maxlen is not None:
                out.append(SkipSequence())
            return
        tid = self._tid(ch.schema, ch.table)
        if tid not in registered:
            registered.add(tid)
            out.append(AddMember(self.layout.tables_key, tid))
        if maxlen is not None:
            fields: tuple[tuple[str, Text], ...] = (
                ("op", ch.op.value),
                ("schema", ch.schema),
                ("table", ch.table),
                ("key", suffix),
                ("ts", str(ch.ts)),
                ("before", json_document(ch.before)),
                ("after", json_document(ch.after)),
            )
            out.append(AppendChange(self.layout.changes_key, maxlen, fields))

    # -- resync: each table's calls go to its group ----------------------------------------------
    async def resync_generation(self, schema: str, table: str) -> int | None:
        return await (await self._group(self._tid(schema, table))).resync_generation(schema, table)

    async def resync_rows(
        self, schema: str, table: str, rows: Sequence[dict[str, Any]], generation: int
    ) -> int | None:
        g = await self._group(self._tid(schema, table))
        return await g.resync_rows(schema, table, rows, generation)

    async def resync_finish(
        self, schema: str, table: str, generation: int, *args: Any, **kw: Any
    ) -> int | None:
        g = await self._group(self._tid(schema, table))
        return await g.resync_finish(schema, table, generation, *args, **kw)

    async def resync_reread(
        self,
        schema: str,
        table: str,
        generation: int,
        entries: Sequence[tuple[str, str]],
        rows: Sequence[dict[str, Any]],
    ) -> int | None:
        g = await self._group(self._tid(schema, table))
        return await g.resync_reread(schema, table, generation, entries, rows)

    async def sweep_expired(self, schema: str, table: str) -> int:
        return await (await self._group(self._tid(schema, table))).sweep_expired(schema, table)

    async def derived_counts(self, schema: str, table: str) -> dict[bytes, bytes]:
        return await (await self._group(self._tid(schema, table))).derived_counts(schema, table)

    async def document_counts(
        self, schema: str, table: str, roles: list[tuple[str, int, str | None]]
    ) -> list[int]:
        return await (await self._group(self._tid(schema, table))).document_counts(schema, table, roles)


def _group_id(tid: str, place: str | None) -> str:
    """A slot group's id (`__heads`, `_groups`): its table's id, or `__docs:{tag}` for a document
    group (no table id starts with `__`)."""
    if place is not None and place.startswith(DOCUMENT_GROUP):
        return f"{DOCS_MARK}:{place[1:]}"
    return tid


def _without_renames(actions: Sequence[TableAction]) -> list[TableAction]:
    """A RENAME becomes a DROP of the old name and a resync of the new one: its rows would move
    between slots (docs/mirror.md, Redis Cluster)."""
    out: list[TableAction] = []
    for a in actions:
        if a.kind is ActionKind.RENAME and a.new_schema is not None and a.new_table is not None:
            out.append(TableAction(ActionKind.DROP, a.schema, a.table, reason=a.reason))
            out.append(TableAction(ActionKind.RESYNC, a.new_schema, a.new_table, reason=a.reason or "rename"))
        else:
            out.append(a)
    return out
