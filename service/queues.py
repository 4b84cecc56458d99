"""`RowQueue`: the bounded FIFO between the binlog reader, the applier and their consumers.

Bounded twice: by items (transactions) and by rows. A count of transactions alone does not bound
memory: 256 queued transactions of 1,000 rows each held 1.2 GB (docs/BENCHMARKS.md). An item
heavier than the whole row budget is still admitted when the queue is empty, so one huge
transaction passes instead of blocking the stream forever.

Waiting never consumes anything: a `get()` cancelled while it waits (the applier races it against
its stop event) leaves the queue as it was.

Waiters are plain futures, woken only when one waits: the queue is compiled (mypyc) and an
asyncio.Event's set() is interpreted code, run twice per transaction for nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

__all__ = ["RowQueue"]

T = TypeVar("T")


class RowQueue(Generic[T]):
    def __init__(self, maxsize: int, max_rows: int) -> None:
        if maxsize < 1 or max_rows < 1:
            raise ValueError("maxsize and max_rows must be >= 1")
        self.maxsize = maxsize
        self.max_rows = max_rows
        self._items: deque[tuple[T, int]] = deque()
        self._rows = 0
        self._getters: list[asyncio.Future[None]] = []  # get()s waiting for an item
        self._putters: list[asyncio.Future[None]] = []  # put()s waiting for room

    @property
    def rows(self) -> int:
        """Rows of the items waiting."""
        return self._rows

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def full(self, rows: int = 0) -> bool:
        """True when an item of `rows` rows would have to wait."""
        items = self._items
        return bool(items) and (len(items) >= self.maxsize or self._rows + rows > self.max_rows)

    def put_nowait(self, item: T, rows: int = 0) -> None:
        """Append regardless of the bounds (for the caller that checked `full()`, or an end marker)."""
        self._items.append((item, rows))
        self._rows += rows
        if self._getters:
            _wake(self._getters)

    async def put(self, item: T, rows: int = 0) -> None:
        while self.full(rows):
            await _wait(self._putters)
        self.put_nowait(item, rows)

    def peek(self) -> T:
        """The item `get_nowait()` would return, left in the queue."""
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items[0][0]

    def get_nowait(self) -> T:
        if not self._items:
            raise asyncio.QueueEmpty
        item, rows = self._items.popleft()
        self._rows -= rows
        if self._putters:
            _wake(self._putters)
        return item

    async def get(self) -> T:
        while not self._items:
            await _wait(self._getters)
        return self.get_nowait()


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    """Wake every waiter; each checks the queue again (as with an asyncio.Event)."""
    for fut in waiters:
        if not fut.done():
            fut.set_result(None)
    waiters.clear()


async def _wait(waiters: list[asyncio.Future[None]]) -> None:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiters.append(fut)
    try:
        await fut
    finally:
        if fut in waiters:  # cancelled before it was woken
            waiters.remove(fut)
