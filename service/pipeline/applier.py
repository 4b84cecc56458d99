"""The applier: transactions from the source's queue, in batches, to Redis, two in flight.

    source queue ──> batch (≤ BATCH_MAX txns, ≤ BATCH_ROWS rows; a DDL alone) ──> plan (table
    actions, catalog, partial INSERTs completed) ──> mirror.send ──> replies ──> progress,
    table actions followed (resyncs), on_applied hooks (in order)

Batch N+1 is planned and written while Redis runs batch N (safe: every call checks the
checkpoint chain, so after a failure the later calls apply nothing). A batch is finished
(replies read, hooks run) as soon as nothing else is queued; a DDL batch before and after it is
sent, as the table actions and catalog of the batches after it depend on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from prometheus_client import Histogram

from service.binlog.rowchange import Op
from service.catalog import Catalog
from service.pipeline.control import Control
from service.pipeline.ddl import ddl_actions
from service.pipeline.progress import Progress, TableCounters
from service.pipeline.resync import fk_sets_missing, write_fk_defs
from service.pipeline.resyncs import Resyncs
from service.pipeline.sources import TableDefinitions, TransactionSource
from service.pipeline.unmatched import UnmatchedPatterns
from service.sink.fks import ForeignKeys
from service.sink.mirror import RedisMirror, SentBatch
from service.sink.plan import ActionKind, TableAction
from service.transactions import TableFilter, Transaction, op_counts

__all__ = ["BATCH_MAX", "BATCH_ROWS", "AppliedHook", "Applier"]

log = logging.getLogger(__name__)

AppliedHook = Callable[[Transaction, int], None]
# A batch takes up to BATCH_MAX transactions but stops adding once it holds BATCH_ROWS rows. Its
# small transactions share script calls of up to `chunk_rows` changes (RedisMirror.send).
BATCH_MAX = 1000
BATCH_ROWS = 10_000


@dataclass(slots=True)
class _Flight:
    """A batch written to Redis whose replies are not read yet."""

    units: list[tuple[Transaction, list[TableAction]]]
    started: float  # perf_counter when its planning began
    sent: SentBatch
    counts: list[dict[tuple[str, str], list[int]]]  # op_counts of each unit's changes

    @property
    def ddl(self) -> bool:
        return any(txn.ddl for txn, _ in self.units)


class Applier:
    def __init__(
        self,
        mirror: RedisMirror,
        catalog: Catalog,
        table_filter: TableFilter,
        progress: Progress,
        resyncs: Resyncs,
        hooks: list[AppliedHook],
        apply_seconds: Histogram,
        control: Control,
        unmatched: UnmatchedPatterns,
    ) -> None:
        self.mirror, self.catalog, self.filter = mirror, catalog, table_filter
        self.progress, self.resyncs, self.hooks = progress, resyncs, hooks
        self.apply_seconds = apply_seconds
        self.control, self.unmatched = control, unmatched
        self.definitions: TableDefinitions | None = None  # the session's, set by the replicator
        self._fk_unfilled: list[tuple[str, str]] = []  # child tables whose sets no copy filled
        self._fk_seen: ForeignKeys | None = None  # the graph those were found for

    async def load(self, schema: str, table: str) -> None:
        assert self.definitions is not None
        await self.definitions.load(schema, table)

    async def run(self, source: TransactionSource, stop: asyncio.Event) -> None:
        """Until stop is set (after finishing the batch in flight) or the source ends; raises the
        source's error."""
        self.progress.in_flight = (0, 0)
        flight: _Flight | None = None
        carry: Transaction | None = None  # taken from the queue, starts the next batch
        control = self.control
        while not stop.is_set():
            if flight is not None and (
                flight.ddl or control.wanted or carry is None and not source.waiting()[0]
            ):
                await self._finish(flight)
                flight = None
                continue
            if control.wanted:  # operator requests are served with nothing in flight
                await control.serve(self._resync_on_request, stop)
                continue
            if carry is None:
                carry = source.take_nowait()
            if carry is None:
                get = asyncio.ensure_future(anext(source))
                halt = asyncio.ensure_future(stop.wait())
                asked = asyncio.ensure_future(control.requested())  # wakes an idle applier
                try:
                    await asyncio.wait({get, halt, asked}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    halt.cancel()
                    asked.cancel()
                if not get.done():
                    get.cancel()  # the queue is left as it was (RowQueue.get)
                    continue
                try:
                    carry = get.result()
                except StopAsyncIteration:  # a non-blocking source reached the end of the binlog
                    break
                except BaseException:  # the source failed: what Redis already has is finished first
                    if flight is not None:
                        await self._finish(flight)
                    raise
            batch, carry = self._next_batch(carry, source)
            if batch[0].ddl and flight is not None:
                await self._finish(flight)
                flight = None
            sent = await self._send(batch)
            if flight is not None:
                await self._finish(flight)
            flight = sent
        if flight is not None:  # stopping: wait for the batch in flight, never abandon it half-read
            await self._finish(flight)

    @staticmethod
    def _next_batch(
        first: Transaction, source: TransactionSource
    ) -> tuple[list[Transaction], Transaction | None]:
        """`first` and what is queued behind it, up to BATCH_MAX transactions or BATCH_ROWS rows;
        a DDL transaction is a batch of its own (returned second when it ends the batch)."""
        batch = [first]
        rows = len(first.changes)
        while len(batch) < BATCH_MAX and rows < BATCH_ROWS and not first.ddl:
            nxt = source.take_nowait()
            if nxt is None:
                break
            if nxt.ddl:
                return batch, nxt
            rows += len(nxt.changes)
            batch.append(nxt)
        return batch, None

    async def _send(self, batch: list[Transaction]) -> _Flight:
        # Empty transactions (all rows filtered out) only move the checkpoint: keep the last one.
        batch = [t for i, t in enumerate(batch) if t.changes or t.ddl or i == len(batch) - 1]
        counts = [op_counts(txn.changes) for txn in batch]  # filling in inserts changes no count
        for schema, table in {key for c in counts for key in c}:
            if not self.catalog.known(schema, table):
                await self.load(schema, table)
        inserted = {
            (c.schema, c.table) for t in batch for i in t.partial if (c := t.changes[i]).op is Op.INSERT
        }
        for schema, table in inserted:
            info = self.catalog.get(schema, table)
            if info is not None and info.unknown_defaults:  # read when the table was empty
                await self.load(schema, table)
        batch = [self._complete_inserts(t) if t.partial else t for t in batch]
        if self.catalog.shapes:  # from here on (Redis, change log, hooks) only the kept fields
            batch = [self._images(t) for t in batch]
        if any(t.changes for t in batch):
            await self._load_foreign_keys()
        mirrored = self.progress.mirrored
        units = [(txn, [a for d in txn.ddl for a in ddl_actions(d, self.filter, mirrored)]) for txn in batch]
        if self.catalog.shapes:
            units = [(txn, self._reshape_renames(actions)) for txn, actions in units]
        if self.catalog.fk_graph().tables:
            units = [(txn, actions + self._cascade_resyncs(txn, actions)) for txn, actions in units]
        if self._fk_unfilled:
            txn, actions = units[0]
            units[0] = (txn, actions + self._fill_fk_sets())
        flight = _Flight(units, time.perf_counter(), await self.mirror.send(units), counts)
        txns, rows = self.progress.in_flight
        self.progress.in_flight = (txns + len(batch), rows + sum(len(t.changes) for t in batch))
        return flight

    async def _load_foreign_keys(self) -> None:
        """Read the foreign keys (at start, after a DDL), and the definitions of the tables they
        link that are not loaded (the planner keys the child rows a cascade reaches)."""
        assert self.definitions is not None
        fks = self.catalog.foreign_keys
        if fks is None or self.catalog.fk_stale:
            fks = await self.definitions.foreign_keys()
        self.mirror.check_foreign_keys(fks)
        for schema, table in sorted(fks.tables):
            if not self.catalog.known(schema, table):
                await self.load(schema, table)
        if fks is not self._fk_seen:  # read here, or by a resync
            self._fk_seen = fks
            await write_fk_defs(self.mirror)
            self._fk_unfilled = await fk_sets_missing(self.mirror)

    def _fill_fk_sets(self) -> list[TableAction]:
        """RESYNC actions for the mirrored child tables whose sets no copy filled (rows copied by
        `binlog-mirror snapshot`, or before cascades were kept): copied again, once. A table in
        resync is left to it (its copy fills them)."""
        tables, self._fk_unfilled = self._fk_unfilled, []
        resyncing = self.mirror.marks.resyncs
        out = [
            TableAction(ActionKind.RESYNC, s, t, reason="filling its foreign-key sets")
            for s, t in tables
            if (s, t) in self.progress.mirrored and self.mirror.layout.table_id(s, t) not in resyncing
            if self.catalog.key_columns(s, t)  # a table without a usable key has no rows in Redis
        ]
        if out:
            names = ", ".join(f"{a.schema}.{a.table}" for a in out)
            log.info("copying %s again to fill their foreign-key sets", names)
        return out

    def _cascade_resyncs(self, txn: Transaction, actions: list[TableAction]) -> list[TableAction]:
        """RESYNC actions for the mirrored tables `txn`'s cascades reach but the apply script cannot
        update from its sets (CascadePlan.resyncs), and for the new name of a renamed table with
        foreign keys (its rows left the sets under the old name): copied again, as after an ALTER."""
        mirrored, children = self.progress.mirrored, self.catalog.fk_graph().by_child
        out = [
            TableAction(ActionKind.RESYNC, a.new_schema, a.new_table, reason="renamed, with foreign keys")
            for a in actions
            if a.kind is ActionKind.RENAME and a.new_schema is not None and a.new_table is not None
            # the catalog reads the source's present: the new name may already be the one it knows
            if (a.schema, a.table) in children or (a.new_schema, a.new_table) in children
        ]
        out += [
            TableAction(ActionKind.RESYNC, s, t, reason="foreign-key cascade the mirror cannot apply")
            for s, t in self.mirror.planner.cascades.resyncs(txn)
            if (s, t) in mirrored
        ]
        return out

    async def _finish(self, flight: _Flight) -> None:
        units = flight.units
        firsts = await flight.sent.replies()
        self.apply_seconds.observe(time.perf_counter() - flight.started)
        progress = self.progress
        txns, rows = progress.in_flight
        progress.in_flight = (txns - len(units), rows - sum(len(t.changes) for t, _ in units))
        progress.redis_ok = True
        tables = progress.tables
        for (txn, actions), first, counts in zip(units, firsts, flight.counts, strict=True):
            progress.applied, progress.applied_ts = txn.end, txn.ts
            progress.txns_applied += 1
            progress.rows_applied += len(txn.changes)
            for key, (inserts, updates, deletes, ts) in counts.items():
                c = tables.get(key)
                if c is None:
                    c = tables[key] = TableCounters()
                c.inserts += inserts
                c.updates += updates
                c.deletes += deletes
                c.last_change_ts = ts
            if txn.ddl:
                for d in txn.ddl:
                    for s, t in d.tables:
                        self.catalog.forget(s, t or None)
                self.note_actions(actions)
                self.unmatched.check(self.progress.mirrored, f"after the DDL at {txn.end.position}")
            elif actions:  # cascades copied again (_cascade_resyncs)
                self.note_actions(actions)
            if self.hooks and self.catalog.shapes:
                txn = self._images(txn, hidden=True)
            for hook in self.hooks:
                try:
                    hook(txn, first)
                except Exception:  # a broken hook must not stop replication
                    log.exception("on_applied hook %r failed", hook)

    async def _resync_on_request(self, keys: list[tuple[str, str]]) -> None:
        """Copy tables again on request, marked at the applied checkpoint as a newly selected
        table is at bootstrap; the resync tasks then run as after an ALTER."""
        end = self.progress.applied
        if end is None:
            log.warning("resync of %s not started: nothing applied yet", keys)
            return
        for s, t in keys:
            await self.load(s, t)
        actions = [TableAction(ActionKind.RESYNC, s, t, reason="requested") for s, t in keys]
        await self.mirror.apply([(Transaction((), (), None, end.ts, end), actions)])
        self.note_actions(actions)
        log.info("resync requested for %s", ", ".join(f"{s}.{t}" for s, t in keys))

    def _complete_inserts(self, txn: Transaction) -> Transaction:
        """A partial INSERT image (MINIMAL) omits the columns the statement left at their default:
        fill them from the catalog, so the row in Redis equals the row on the source. (Partial
        UPDATE/DELETE images need nothing: the planner merges the present columns.)"""
        changes = list(txn.changes)
        for i in txn.partial:
            ch = changes[i]
            if ch.op is not Op.INSERT or ch.after is None:
                continue
            info = self.catalog.get(ch.schema, ch.table)
            missing = {k: v for k, v in info.defaults.items() if k not in ch.after} if info else {}
            if missing:
                changes[i] = ch.with_images(ch.before, {**missing, **ch.after})
        return replace(txn, changes=tuple(changes))

    def _images(self, txn: Transaction, hidden: bool = False) -> Transaction:
        """The images of shaped tables' changes with only their stored fields, renamed (service/
        shaping.py): excluded columns never reach Redis, the change log or the websocket.
        `hidden`: of those stored images, what the hooks (the websocket) see: less the hidden
        fields, which only the mirror's own rows hold."""
        changes = list(txn.changes)
        shaped = False
        schema = table = ""
        shape = None
        for i, ch in enumerate(changes):
            if ch.table != table or ch.schema != schema:  # (a transaction's changes come in runs)
                schema, table = ch.schema, ch.table
                shape = self.catalog.shape(schema, table)
            if shape is None or hidden and not shape.hidden:
                continue
            if hidden:
                before, after = shape.visible(ch.before), shape.visible(ch.after)
            else:
                before = shape.apply(ch.before) if ch.before is not None else None
                after = shape.apply(ch.after) if ch.after is not None else None
            changes[i] = ch.with_images(before, after)
            shaped = True
        return replace(txn, changes=tuple(changes)) if shaped else txn

    def _reshape_renames(self, actions: list[TableAction]) -> list[TableAction]:
        """A table renamed to a name another [table] section applies to is copied again into
        that shape (its moved rows keep the old one until then); into another value form (a
        section's `value`), emptied first: no row op may meet a row in the other form."""
        out: list[TableAction] = []
        shapes = self.catalog.shapes
        fingerprint = shapes.fingerprint
        resynced = {(a.schema, a.table) for a in actions if a.kind is ActionKind.RESYNC}
        for a in actions:
            out.append(a)
            if a.kind is ActionKind.RENAME and a.new_schema is not None and a.new_table is not None:
                if shapes.json_of(a.schema, a.table) != shapes.json_of(a.new_schema, a.new_table):
                    why = f"value: renamed from {a.schema}.{a.table}, rows in the other form"
                    out.append(TableAction(ActionKind.TRUNCATE, a.new_schema, a.new_table, reason=why))
                    if (a.new_schema, a.new_table) not in resynced:
                        out.append(TableAction(ActionKind.RESYNC, a.new_schema, a.new_table, reason=why))
                    continue
                if (a.new_schema, a.new_table) in resynced:
                    continue  # an ALTER … RENAME: copied again anyway
                # a table with derived entries: the move removed them (apply.lua, op MU)
                derived = bool(self.catalog.derive_spec(a.schema, a.table))
                if derived or fingerprint(a.schema, a.table) != fingerprint(a.new_schema, a.new_table):
                    why = f"shape: renamed from {a.schema}.{a.table}"
                    out.append(TableAction(ActionKind.RESYNC, a.new_schema, a.new_table, reason=why))
        return out

    def note_actions(self, actions: Sequence[TableAction]) -> None:
        """Follow applied table actions. A resync in flight was restarted (TRUNCATE), moved
        (RENAME) or ended (DROP) by the apply script itself, under a new generation: its task
        follows here; a write it still has in flight is refused by that generation. After a
        TRUNCATE or RENAME a copy starts whether or not a task was seen running (one may have
        just stopped at the fence before it): it ends at once if there is no mark."""
        mirrored, resyncs = self.progress.mirrored, self.resyncs
        for a in actions:
            key = (a.schema, a.table)
            if a.kind is ActionKind.DROP:
                mirrored.discard(key)
                resyncs.cancel(key)
            elif a.kind is ActionKind.RENAME:
                mirrored.discard(key)
                resyncs.cancel(key)
                assert a.new_schema is not None and a.new_table is not None
                new = (a.new_schema, a.new_table)
                mirrored.add(new)
                self.catalog.forget(*new)
                resyncs.start(new)
            elif a.kind is ActionKind.TRUNCATE:
                resyncs.start(key)
            elif a.kind in (ActionKind.REGISTER, ActionKind.RESYNC):
                mirrored.add(key)
            if a.kind is ActionKind.RESYNC:
                resyncs.start(key)
