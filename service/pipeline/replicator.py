"""The Replicator: source -> its bounded queue -> applier -> RedisMirror, with retry, lease,
resync and status. This module runs the loop and the session; the jobs live beside it:

    run()
      └── loop: wait for the writer lease (standby) ─> session ─> on a retriable error back off
          session (TaskGroup):
            source   BinlogSource's reader task fills ITS bounded queue (the only buffer)
            applier  source queue -> batches -> mirror.send -> on_applied hooks   (applier.py)
            lease    renew every ttl/3; LeaseLost ends the session, back to standby  (lease.py)
            resyncs  one task per table being re-read after a DDL                   (resyncs.py)
            stats    refresh bytes-behind every few seconds; check Redis may not evict keys
            verifier the background verifier, when on (verifier.py)
      status()      Progress + source counters -> ReplicatorStatus                  (report.py)

Every session starts from the checkpoint STORED in Redis, never from memory, so a failure at any
point resumes exactly after the last applied transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any, cast

from prometheus_client import Counter, Histogram
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from service.backoff import Backoff
from service.catalog import Catalog
from service.checkpoint import Checkpoint, StartPoint, parse_start
from service.errors import (
    ConfigError,
    HistoryMismatch,
    LeaseLost,
    PositionLost,
    ReplicatorError,
    SourceBehind,
)
from service.pipeline.applier import BATCH_MAX, BATCH_ROWS, AppliedHook, Applier
from service.pipeline.control import Control
from service.pipeline.documentwatch import DocumentWatch
from service.pipeline.entrycounts import with_entry_counts
from service.pipeline.failures import FailureLog
from service.pipeline.lease import LeaseKeeper, sleep_unless, watch
from service.pipeline.progress import Progress
from service.pipeline.report import PastSources, build_status
from service.pipeline.resyncs import Resyncs
from service.pipeline.sources import (
    DefinitionsFactory,
    SourceDefinitions,
    SourceFactory,
    TableDefinitions,
    TransactionSource,
    default_source,
)
from service.pipeline.status import ReplicatorStatus, State
from service.pipeline.unmatched import UnmatchedPatterns
from service.pipeline.verifier import BackgroundVerifier, drift_counter
from service.settings import Settings
from service.shaping import value_of
from service.sink.client import redis_client
from service.sink.cluster import ClusterMirror, cluster_layout
from service.sink.keys import KeyLayout, split_key
from service.sink.layoutversion import ensure_layout
from service.sink.mirror import MirrorOptions, RedisMirror
from service.sink.plan import ActionKind, TableAction
from service.transactions import TableFilter, Transaction

__all__ = ["BATCH_MAX", "BATCH_ROWS", "AppliedHook", "Replicator", "SourceFactory", "TransactionSource"]

log = logging.getLogger(__name__)


class Replicator:
    def __init__(
        self,
        settings: Settings,
        *,
        source_factory: SourceFactory | None = None,
        definitions_factory: DefinitionsFactory | None = None,
        on_applied: Sequence[AppliedHook] = (),
        backoff: Backoff | None = None,
    ) -> None:
        if settings.redis is None or settings.mysql is None:
            raise ConfigError("the replicator needs --mysql and --redis")
        self.settings = settings
        self.filter = TableFilter.from_lists(settings.tables, settings.exclude_tables)
        self.on_applied: list[AppliedHook] = list(on_applied)
        self._source_factory = source_factory or default_source
        self._definitions_factory = definitions_factory or SourceDefinitions
        self._backoff = backoff or Backoff(base=0.2, cap=5.0)
        self._failure_log = FailureLog(log)  # permanent errors: state failed, logged once a minute
        self._unmatched = UnmatchedPatterns(settings.tables)  # --tables patterns matching nothing
        self.control = Control()  # pause/resume, resync on request (POST /control/..., `ctl`)
        cluster = settings.redis.cluster  # applied per slot group (service/sink/cluster.py)
        self.layout = cluster_layout(settings.key_prefix) if cluster else KeyLayout(settings.key_prefix)
        self.catalog = Catalog(self.filter, settings.shapes())
        self.redis: Redis = redis_client(
            settings.redis.url.get_secret_value(),
            cluster_ok=True,
            socket_timeout=10,
            socket_connect_timeout=5,
        )
        options = MirrorOptions(
            json_mode=settings.value_mode == "json",
            chunk_size=settings.chunk_rows,
            table_step=settings.table_step_rows,
            changelog_maxlen=settings.changelog_maxlen or None,
            lease_ttl=settings.lease_ttl_seconds,
            plain_inserts=settings.plain_inserts,
        )
        key_columns, fks = self.catalog.key_columns, self.catalog.fk_graph  # cascades (fks.py)
        shapes = self.catalog.shapes
        self.mirror = (
            ClusterMirror(
                cast(RedisCluster, self.redis),
                settings.key_prefix,
                key_columns,
                options,
                foreign_keys=fks,
                shape_of=shapes.fingerprint,
                derive_of=self.catalog.derive_spec,
                place_of=shapes.placement,  # its slot group: its templates' or its documents' tag
                json_of=shapes.json_of,
            )
            if cluster
            else RedisMirror(
                self.redis,
                self.layout,
                key_columns,
                options,
                foreign_keys=fks,
                shape_of=shapes.fingerprint,
                derive_of=self.catalog.derive_spec,
                json_of=shapes.json_of,
            )  # fmt: skip
        )
        self._stop = asyncio.Event()
        self._recopy: str | None = None  # why the next session copies the selected tables again
        self._source: TransactionSource | None = None
        self._past = PastSources()
        self.progress = Progress()
        self._lease = LeaseKeeper(
            self.mirror, settings.lease_ttl_seconds, self.progress, self._stop, settings.redis.redacted()
        )
        self._resyncs = Resyncs(settings, self.mirror, self.catalog, self.progress)
        # Seconds per Redis apply call (one batch of transactions). Not registered anywhere: the
        # API registers it in its app registry (api/main.py), next to apply_delay_seconds.
        self.apply_seconds = Histogram(
            "binlog_mirror_apply_seconds",
            "Seconds from planning a batch of transactions (up to 1,000) to reading Redis' replies",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=None,
        )
        # the background verifier (off unless verify_rows_per_second > 0); its drift counter is
        # registered by the API as apply_seconds is
        self.drift_rows = drift_counter()
        self._verifier = (
            BackgroundVerifier(settings, self.progress, self.mirror.token, self.drift_rows)
            if settings.verify_rows_per_second > 0
            else None
        )
        self.ttl_swept = Counter(
            "binlog_mirror_ttl_swept_rows_total",
            "Expired rows of ttl tables whose index entries and bookkeeping the sweep removed",
            ["table"],
            registry=None,
        )  # registered by the API as apply_seconds is
        self.documents = DocumentWatch()
        self.documents_refused = self.documents.documents_refused
        self.documents_held = self.documents.documents_held
        self._applier = Applier(
            self.mirror, self.catalog, self.filter, self.progress, self._resyncs, self.on_applied,
            self.apply_seconds, self.control, self._unmatched,
        )  # fmt: skip

    # -- public ----------------------------------------------------------------------------------
    def add_applied_hook(self, hook: AppliedHook) -> None:
        """Call `hook(txn, first_seq)` after each applied transaction (sync; must never block)."""
        self.on_applied.append(hook)

    def unkeyed(self, schema: str, table: str) -> bool:
        """True for a table without a usable key, whose rows are never written to Redis (the
        websocket does not send them; docs/api.md)."""
        info = self.catalog.get(schema, table)
        return info is not None and not info.key

    def stop(self) -> None:
        """Ask run() to return after the transaction batch in flight (never half-applied)."""
        self._stop.set()

    def status(self) -> ReplicatorStatus:
        """A fresh snapshot (service/pipeline/report.py)."""
        return build_status(
            self.settings, self.progress, self.mirror, self.catalog, self._source, self._past,
            self._unmatched.current, self.control.paused,
        )  # fmt: skip

    async def counted_status(self) -> ReplicatorStatus:
        """`status()` with each shaped table's row copies and index entries, read from Redis."""
        return await with_entry_counts(self.mirror, self.catalog, self.status())

    async def run(self) -> None:
        """Replicate until stop(); raises on a non-retriable error (state FAILED)."""
        progress = self.progress
        failures = 0
        try:
            while not self._stop.is_set():
                applied_before = progress.txns_applied
                try:
                    await self._lease.wait()
                    if self._stop.is_set():
                        break
                    await self._session()
                except LeaseLost as exc:
                    # Say what happened: FLUSHALL, expiry, or another instance.
                    exc = await self.mirror.lease_lost(exc)
                    progress.error(exc)
                    progress.leader = False
                    log.warning("lost the writer lease (%s); back to standby", exc)
                except ReplicatorError as exc:
                    if isinstance(exc, PositionLost):
                        exc = self._position_lost(exc)
                    if isinstance(exc, HistoryMismatch):
                        if self.settings.on_history_mismatch == "recopy":
                            log.warning(
                                "%s: copying the selected tables again (on_history_mismatch=recopy)", exc
                            )
                            self._recopy = f"history mismatch ({exc})"
                            continue
                        exc = self._history_mismatch(exc)
                    progress.error(exc)
                    if not exc.retriable:
                        progress.set_state(State.FAILED)
                        log.error("replication stopped: %s", exc)
                        raise exc
                    failures = 1 if progress.txns_applied > applied_before else failures + 1
                    progress.restarts += 1
                    # Idle pooled connections may be dead too (a Redis restart kills them all):
                    # left in the pool, each would fail one more session, one backoff at a time.
                    # (The cluster client drops a failed node's connections and slot map itself.)
                    if not isinstance(self.redis, RedisCluster):
                        await self.redis.connection_pool.disconnect(inuse_connections=False)
                    progress.set_state(self._failure_log.state(exc))
                    delay = self._backoff.delay(failures)
                    self._failure_log.report(exc, delay)
                    await sleep_unless(self._stop, delay)
            progress.set_state(State.STOPPED)
            where = f"at {progress.applied.position}" if progress.applied else "before the first checkpoint"
            log.info("stopped cleanly %s", where)
        finally:
            await self._lease.release()
            await self.mirror.close()
            await self.redis.aclose()

    def _position_lost(self, exc: PositionLost) -> PositionLost:
        """The same error, with what it means for the mirror and the way out (docs/mirror.md)."""
        where = self.progress.applied.position if self.progress.applied else "?"
        lost = PositionLost(
            f"the stored checkpoint {where} is no longer on the source (binlog purged?): {exc}. "
            f"Way out: delete the mirror's keys ({self.layout.prefix}:*), copy the tables again with "
            "`binlog-mirror snapshot` (parallel, docs/pipeline.md; it stores the checkpoint `run` "
            "streams from), then start `binlog-mirror run` again; or, for small tables, just start "
            "again with on_no_checkpoint=now (the service copies them itself)"
        )
        lost.__cause__ = exc
        return lost

    def _history_mismatch(self, exc: HistoryMismatch) -> HistoryMismatch:
        """The same error, with what it means and the way out (docs/mirror.md, "History check")."""
        where = self.progress.applied.position if self.progress.applied else "?"
        if isinstance(exc, SourceBehind):
            behind = SourceBehind(
                f"the source does not hold the history the mirror applied (stored checkpoint {where}): "
                f"{exc}. Following it would lose those transactions and mix in the ones it wrote "
                "instead. Way out: point the mirror at a server that has them (the old primary, or "
                "a replica that caught up); or start again with --on-history-mismatch recopy "
                "(BINLOG_MIRROR_ON_HISTORY_MISMATCH=recopy) to copy the selected tables again from "
                "this source; or delete the mirror's keys "
                f"({self.layout.prefix}:*) and copy the tables with `binlog-mirror snapshot`"
            )
            behind.__cause__ = exc
            return behind
        mismatch = HistoryMismatch(
            f"the stored checkpoint {where} belongs to another history than this source's binlog "
            f"(a rebuilt or replaced server?): {exc}. Following it would mix two servers' rows. "
            "Way out: start again with --on-history-mismatch recopy (BINLOG_MIRROR_ON_HISTORY_"
            "MISMATCH=recopy) to copy the selected tables again from this source and stream from "
            f"its current position; or delete the mirror's keys ({self.layout.prefix}:*) and copy "
            "the tables with `binlog-mirror snapshot`"
        )
        mismatch.__cause__ = exc
        return mismatch

    # -- session ---------------------------------------------------------------------------------
    async def _start_point(self) -> tuple[Checkpoint | None, StartPoint]:
        await ensure_layout(self.mirror.redis, self.layout)  # a newer layout: refused; older: migrated
        checkpoint = await self.mirror.load_checkpoint()
        self._recopy = self._recopy or self.mirror.recopy
        if self._recopy is not None:
            # the stored checkpoint stays the chain head; the bootstrap's apply replaces it
            log.warning(
                "copying the selected tables again from the source's current position: %s", self._recopy
            )
            return None, "now"
        if checkpoint is not None:
            return checkpoint, checkpoint
        policy = self.settings.on_no_checkpoint
        if policy == "refuse":
            raise ConfigError(
                f"no checkpoint at {self.layout.checkpoint_key} and on_no_checkpoint=refuse: "
                "copy the tables first with `binlog-mirror snapshot` (parallel, docs/pipeline.md; "
                "it stores the checkpoint to stream from), or start once with --on-no-checkpoint "
                "now (mirror from the current position, after copying the tables) or start "
                "(replay all binlogs still on the source)"
            )
        return None, "start" if policy == "start" else parse_start(self.settings.start)

    async def _session(self) -> None:
        self.progress.set_state(State.STARTING)
        checkpoint, start = await self._start_point()
        _warn_if_behind(self.progress.applied, checkpoint)
        self.progress.applied = checkpoint
        source = self._source_factory(self.settings, start, self.filter)
        self._source = source
        definitions = self._definitions_factory(self.settings, self.catalog)
        # The lease is renewed from now on, also while the source connects and runs its preflight
        # (which may wait a few seconds for this mirror's previous dump thread to go away).
        lease = asyncio.create_task(self._lease.renew_loop(), name="lease")
        try:
            async with source:
                await definitions.open()
                self._applier.definitions = definitions
                await self._bootstrap(checkpoint, source, definitions)
                self.progress.set_state(State.STREAMING)
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(watch(lease), name="lease")
                    tg.create_task(self._stats_loop(source), name="stats")
                    if self._verifier is not None:  # its own connections; never raises
                        tg.create_task(self._verifier.run(), name="verifier")
                    if self.catalog.shapes.expire:
                        tg.create_task(self._sweep_loop(), name="ttl sweep")
                    self._resyncs.attach(tg, source.source_position)
                    for tid in await self.mirror.pending_resyncs():
                        parts = split_key(tid)
                        self._resyncs.start((parts[0], parts[1]))
                    await self._applier.run(source, self._stop)
                    raise _Stopped()
        except BaseExceptionGroup as group:
            exc = _first(group)
            if not isinstance(exc, _Stopped):
                raise exc from None
        finally:
            self._resyncs.detach()
            self._applier.definitions = None
            definitions.close()
            self._past.fold(source)
            self.progress.received = source.received or self.progress.received
            self._source = None
            lease.cancel()
            await asyncio.wait({lease})  # never raises the task's error; outer cancellation still does
            if not lease.cancelled():
                lease.exception()  # retrieved (a LeaseLost already ended the session via watch)

    async def _bootstrap(
        self, checkpoint: Checkpoint | None, source: TransactionSource, definitions: TableDefinitions
    ) -> None:
        """Reconcile the mirrored tables with the table selection, atomically with the checkpoint."""
        mirrored = self.progress.mirrored
        mirrored.clear()
        mirrored.update(_tables(await self.mirror.mirrored_tables()))
        wanted = set(await definitions.wanted_tables())
        shapes = self.catalog.shapes
        if shapes:  # a [table."…"] or [document] section that cannot apply stops the run here
            for s, t in sorted(wanted):
                if shapes.matches(s, t):
                    await definitions.load(s, t)
            shapes.check_documents(wanted)
            state = self.catalog.fk_state()  # read to check them only: the applier reads its own
            await definitions.foreign_keys()
            self.catalog.restore_fk_state(state)
        # rows a cut-short RENAME moved to a name that is not selected (now): nobody mirrors them.
        # Selected, not existing: a mirrored name the source does not have now is left to the
        # statements still to replay (`RENAME TABLE a TO tmp, b TO a, tmp TO b` cut short holds
        # rows under `tmp`, which the replay moves on; dropping them here lost them).
        moved = _tables(await self.mirror.moved_to_tables(checkpoint))
        dropped = {(s, t) for s, t in mirrored | moved if not self.filter.wants(s, t)}
        actions = [
            TableAction(ActionKind.DROP, s, t, reason="no longer selected") for s, t in sorted(dropped)
        ]
        recopy = self._recopy
        actions += [
            TableAction(ActionKind.RESYNC, s, t, reason="recopy" if recopy else "newly selected")
            for s, t in sorted(wanted if recopy else wanted - mirrored)
        ]
        if not recopy:  # (on a cluster each group records its table's shape)
            actions += await self._reshaped(wanted & mirrored)
        self._unmatched.check(wanted, "bootstrap")
        end = checkpoint or source.start_checkpoint
        if end is None:
            raise ConfigError("the source did not report its start position")
        if not actions and checkpoint is not None:
            return
        for s, t in wanted:
            await definitions.load(s, t)
        log.info(
            "bootstrap at %s: %d table(s) to copy, %d to drop",
            end.position,
            len(actions) - len(dropped),
            len(dropped),
        )
        await self.mirror.apply([(Transaction((), (), None, end.ts, end), actions)])
        self._applier.note_actions(actions)
        self.progress.applied = end
        self._recopy = None  # the checkpoint just stored cleared the marker, the resyncs are marked

    async def _reshaped(self, tables: set[tuple[str, str]]) -> list[TableAction]:
        """A RESYNC of each mirrored table whose rows were written in another shape than its
        section asks for now (a section added, changed or removed since): copied again into the
        new shape, ordered with the stream as any resync."""
        assert isinstance(self.mirror, RedisMirror)
        stored = await self.mirror.table_shapes()
        shapes, out = self.catalog.shapes, []
        for s, t in sorted(tables):
            was, now = stored.get(self.layout.table_id(s, t), ""), shapes.fingerprint(s, t)
            if was != now:
                why = "section changed" if was and now else "section added" if now else "section removed"
                log.info("%s.%s: %s: its rows are copied again into the new shape", s, t, why)
                if value_of(was, shapes.json_mode) != value_of(now, shapes.json_mode):
                    # rows in the other form (hash/json): no row op may meet one, emptied first
                    out.append(TableAction(ActionKind.TRUNCATE, s, t, reason=f"value: {why}"))
                out.append(TableAction(ActionKind.RESYNC, s, t, reason=f"shape: {why}"))
        return out

    async def _stats_loop(self, source: TransactionSource) -> None:
        while True:
            # a maxmemory-policy changed at runtime to allkeys-*: stop (and mark for a re-copy
            # when keys were evicted) now, not at the next start
            await self.mirror.check_server()
            if self.catalog.shapes.documents:  # refused documents: a log line and a metric
                with contextlib.suppress(ReplicatorError):
                    await self.documents.check(self.mirror, self.catalog.shapes)
            # measured from the APPLIED checkpoint: what is still to read plus what is read
            # and not yet in Redis (the source's end of binlog is the other end)
            applied = self.progress.applied
            if applied is not None:
                with contextlib.suppress(ReplicatorError):
                    self.progress.binlog_room = await source.binlog_room(applied.position)
            await asyncio.sleep(2.0)

    async def _sweep_loop(self) -> None:
        """Expired rows of ttl tables leave their index entries (service/sink/ttlsweep.py)."""
        while True:
            for schema, table in sorted(self.progress.mirrored):
                shape = self.catalog.shape(schema, table)
                if shape is not None and shape.derivation is not None and shape.derivation.ttl:
                    swept = await self.mirror.sweep_expired(schema, table)
                    if swept:
                        self.ttl_swept.labels(f"{schema}.{table}").inc(swept)
            await asyncio.sleep(self.settings.ttl_sweep_seconds)


def _warn_if_behind(applied: Checkpoint | None, stored: Checkpoint | None) -> None:
    """Say so when Redis lost transactions this instance applied: they are applied again."""
    if applied is not None and stored is not None and stored.position < applied.position:
        log.warning(
            "the checkpoint stored in Redis (%s) is behind the last one applied (%s): Redis lost "
            "acknowledged writes (a restart that lost the end of its append-only file, or a "
            "failover to a replica that lagged); the transactions since %s are applied again",
            stored.position, applied.position, stored.position,
        )  # fmt: skip


class _Stopped(Exception):
    """Internal: ends the session's TaskGroup on a clean stop."""


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The exception that matters in a TaskGroup failure: non-retriable first, then any error."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup[Any]) -> None:
        for e in g.exceptions:
            if isinstance(e, BaseExceptionGroup):
                walk(e)
            else:
                leaves.append(e)

    walk(group)
    for e in leaves:
        if isinstance(e, ReplicatorError) and not e.retriable:
            return e
    for e in leaves:
        if not isinstance(e, _Stopped | asyncio.CancelledError):
            return e
    return leaves[0]


def _tables(table_ids: Iterable[str]) -> set[tuple[str, str]]:
    """(schema, table) of each `schema:table` id."""
    return {(p[0], p[1]) for p in map(split_key, table_ids) if len(p) == 2}
