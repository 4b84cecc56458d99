"""BatchWriter: a batch of transactions as apply calls. Consecutive small transactions share a
call (all or none, up to `chunk_size` changes); a larger one, or the one a crash interrupted, goes
chunk by chunk; whole-table work runs before its transaction's call."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from redis.asyncio import Redis

from service.errors import SinkError
from service.sink.chain import ApplyChain
from service.sink.checkpoint_store import Progress
from service.sink.plan import IrOp, Planner, TableAction
from service.sink.replies import SentBatch
from service.sink.tablerun import TableWorkRunner
from service.transactions import Transaction

__all__ = ["BatchWriter"]


class BatchWriter:
    def __init__(
        self, redis: Redis, planner: Planner, chain: ApplyChain, tables: TableWorkRunner, chunk_size: int
    ) -> None:
        self.redis = redis
        self.planner = planner
        self.chain = chain
        self.tables = tables
        self.chunk_size = chunk_size  # row changes per call
        self.resume: Progress | None = None  # a chunked transaction to resume (from the checkpoint)

    async def send(self, batch: Sequence[tuple[Transaction, Sequence[TableAction]]]) -> SentBatch:
        """Plan and write the script calls of `batch` without waiting for Redis to run them;
        `replies()` of the result waits. Batches sent one after another apply in order.

        Consecutive small transactions share one call (up to `chunk_size` changes), which applies
        them all or none and stores the last one's checkpoint; a larger one is sent chunk by chunk.
        Each call is written as soon as it is planned, so Redis runs it while the next is planned.
        """
        chain = self.chain
        sent = SentBatch(chain.channel, chain.channel.epoch, self.planner, redis=self.redis)
        limit = self.chunk_size
        group: list[IrOp] = []  # ops of the call being planned
        offsets: list[int] = []  # of its transactions' first changes
        size = 0
        last: Transaction | None = None  # its last transaction
        try:
            for txn, actions in batch:
                fence, work = self.planner.table_work(actions) if actions else ([], [])
                if work:
                    if last is not None:
                        await chain.send_group(sent, group, offsets, size, last)
                        group, offsets, size, last = [], [], 0, None
                    await self.tables.run(str(txn.end.position), fence, work)
                n = len(txn.changes)
                resume = self.resume
                if resume is not None and resume.txn != str(txn.end.position):
                    resume = None
                if resume is None and n <= limit:
                    if last is not None and size + n > limit:
                        await chain.send_group(sent, group, offsets, size, last)
                        group, offsets, size, last = [], [], 0, None
                    if last is None:
                        self.planner.begin_call()
                    offsets.append(size)
                    self.planner.transaction(group, txn, actions)
                    size += n
                    last = txn
                    continue
                if last is not None:
                    await chain.send_group(sent, group, offsets, size, last)
                    group, offsets, size, last = [], [], 0, None
                await chain.send_chunked(sent, txn, actions, resume)
                self.resume = None
            if last is not None:
                await chain.send_group(sent, group, offsets, size, last)
        except Exception:
            # The calls already written run anyway: wait for them, so that when the caller sees
            # the error, Redis holds exactly the prefix they applied.
            with contextlib.suppress(SinkError):
                await sent.replies()
            raise
        return sent
