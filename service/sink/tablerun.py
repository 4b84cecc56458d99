"""TableWorkRunner: the whole-table work of a transaction (the rows of a DROP, TRUNCATE or RENAME,
the copy a resync starts with), in bounded calls waited for one by one, before its own call."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from service.sink.chain import ApplyChain
from service.sink.checkpoint_store import as_str
from service.sink.ir import ApplyCall
from service.sink.keys import KeyLayout
from service.sink.plan import IrOp
from service.sink.replies import map_redis_errors
from service.sink.tablework import TableWork, unit_ids, work_op

__all__ = ["TableWorkRunner"]

log = logging.getLogger(__name__)


class TableWorkRunner:
    def __init__(self, redis: Redis, layout: KeyLayout, chain: ApplyChain, table_step: int) -> None:
        self.redis = redis
        self.layout = layout
        self.chain = chain
        self.table_step = table_step  # rows per call

    async def run(self, txn_id: str, fence: list[IrOp], work: Sequence[TableWork]) -> None:
        """The whole-table work of a transaction's DROP/TRUNCATE/RENAME and resync starts, before
        the transaction's own call: `table_step` rows per call, each call waited for before the
        next is written, so Redis serves its other clients in between (one script over a table of
        millions of rows blocked it for seconds, and its other clients got BUSY). The first call
        also stops the resyncs in flight of those tables from writing (`fence`). The checkpoint
        does not move until the transaction's call, so a crash in between replays the
        transaction: `__tableops` records the units done, the others resume (docs/mirror.md,
        "Table operations")."""
        step = self.table_step
        # A "transaction" that ends at the stored checkpoint is the session start's reconciliation
        # with the table selection (drops, resync starts): its units are repeatable, so they are
        # not recorded, and the record of a statement cut short before it stays for its replay.
        key = self.layout.table_ops_key if txn_id != self.chain.prev else ""
        orphans = await self._orphans(txn_id, work) if key else []
        ids = [f"CU {w.index} (moved by an earlier plan)" for w in orphans] + unit_ids(work)
        work = [*orphans, *work]
        header = self.chain.header(txn_id, 0, True, 0)
        calls = 0
        ops = list(fence)
        noted = started = time.monotonic()
        for uid, w in zip(ids, work, strict=True):
            cursor = ""
            while True:
                ops += work_op(key, uid, w, step, cursor)
                calls += 1
                with map_redis_errors(f"table work (DROP/TRUNCATE/RENAME/resync) of {txn_id}, call {calls}"):
                    reply = await self.chain.call(ApplyCall(header, ops))
                ops = []
                if reply == 0 or reply == b"0":
                    break
                # CopyMembers: where its SSCAN goes on
                cursor = reply.decode() if isinstance(reply, bytes) else str(reply)
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
        txn, moves = await self.record()
        if txn != txn_id:
            return []
        kept = {w.to_index for w in work if w.op == "MU"}
        return [TableWork("CU", index, base) for index, base in moves.items() if index not in kept]

    async def record(self) -> tuple[str, dict[str, str]]:
        """`__tableops`: its transaction id, and the `__keys` set -> row-key base of each name its
        moves took rows to."""
        with map_redis_errors("reading the table work record (__tableops)"):
            raw = await self.redis.hgetall(self.layout.table_ops_key)
        record = {as_str(k): as_str(v) for k, v in raw.items()}
        return record.get("txn", ""), {f[3:]: base for f, base in record.items() if f.startswith("to ")}
