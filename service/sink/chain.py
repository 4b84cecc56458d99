"""ApplyChain: the apply calls' header (lease token, checkpoint chain, fence) and the calls that
carry grouped or chunked transactions.

Every call names the checkpoint it follows (`prev`) and the writer's token, so the script refuses a
call from a writer that lost the lease and a call out of order (docs/mirror.md).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from service.sink.channel import ScriptChannel
from service.sink.checkpoint_store import Progress
from service.sink.checkpoints import checkpoint_fields
from service.sink.ir import ApplyCall, ApplyHeader, SetFields
from service.sink.keys import KeyLayout
from service.sink.plan import IrOp, Planner, TableAction, checkpoint_op
from service.sink.replies import SentBatch, map_redis_errors
from service.transactions import Transaction

__all__ = ["ApplyChain"]

log = logging.getLogger(__name__)


class ApplyChain:
    """The writer's place in the checkpoint chain and the calls that extend it."""

    def __init__(
        self,
        layout: KeyLayout,
        planner: Planner,
        channel: ScriptChannel,
        token: str,
        values: str,
        chunk_size: int,
    ) -> None:
        self.layout = layout
        self.planner = planner
        self.channel = channel
        self.token = token  # the writer lease's value while this instance holds it
        self.values = values  # the value mode, as the checkpoint says
        self.chunk_size = chunk_size
        self.prev = ""  # id of the checkpoint the next transaction must follow

    def fields(self, txn: Transaction) -> dict[str, str]:
        return checkpoint_fields(txn.end, txn.gtid, self.values, txn.ts)

    def header(self, txn_id: str, chunk: int, final: bool, nseq: int, done: int = 0) -> ApplyHeader:
        lay = self.layout
        return ApplyHeader(
            lay.lease_key,
            self.token,
            lay.checkpoint_key,
            self.prev,
            lay.progress_key,
            txn_id,
            chunk,
            final,
            lay.seq_key,
            nseq,
            lay.resync_key,
            done,
        )

    async def send(self, sent: SentBatch, call: ApplyCall, what: str, offsets: Sequence[int]) -> None:
        with map_redis_errors(what):
            await self.channel.send(call)
        sent.calls.append((what, offsets))

    async def call(self, call: ApplyCall) -> Any:
        """One call, waited for (whole-table work); the caller maps Redis errors."""
        return await self.channel.call(call)

    async def send_group(
        self, sent: SentBatch, ops: list[IrOp], offsets: list[int], size: int, last: Transaction
    ) -> None:
        txn_id = str(last.end.position)
        tail = [checkpoint_op(self.layout, self.fields(last))]
        call = ApplyCall(self.header(txn_id, 0, True, size), ops, tail)
        many = f"{len(offsets)} transactions up to " if len(offsets) > 1 else "transaction "
        await self.send(sent, call, f"applying {many}{txn_id}", offsets)
        self.prev = txn_id

    async def send_chunked(
        self, sent: SentBatch, txn: Transaction, actions: Sequence[TableAction], resume: Progress | None
    ) -> None:
        """A big (or resumed) transaction, chunk by chunk; each chunk but the last records in
        `__progress` how many changes of each table are done. Planned one chunk ahead, never
        whole: a transaction of millions of rows would otherwise hold every row's arguments."""
        txn_id = str(txn.end.position)
        cp = [checkpoint_op(self.layout, self.fields(txn))]
        size = self.chunk_size
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
                counts = tuple((f"t:{t}", str(k)) for t, k in done.items())
                tail = [SetFields(self.layout.progress_key, counts)]
            call = ApplyCall(self.header(txn_id, i, final, n, rows), ops, tail)
            what = f"applying chunk {i} (to change {at + n} of {len(todo)}) of transaction {txn_id}"
            # every chunk returns the transaction's first sequence number: keep the last's
            await self.send(sent, call, what, (0,) if final else ())
            rows += n
            at += n
        self.prev = txn_id
