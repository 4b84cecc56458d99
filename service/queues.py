"""`RowQueue`: the bounded FIFO between the binlog reader, the applier and their consumers.

Bounded twice: by items (transactions) and by rows. A count of transactions alone does not bound
memory: 256 queued transactions of 1,000 rows each held 1.2 GB (docs/BENCHMARKS.md). An item
heavier than the whole row budget is still admitted when the queue is empty, so one huge
transaction passes instead of blocking the stream forever.

Waiting never consumes anything: a `get()` cancelled while it waits (the applier races it against
its stop event) leaves the queue as it was.
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
        self._nonempty = asyncio.Event()
        self._space = asyncio.Event()

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
        self._nonempty.set()

    async def put(self, item: T, rows: int = 0) -> None:
        while self.full(rows):
            self._space.clear()
            await self._space.wait()
        self.put_nowait(item, rows)

    def get_nowait(self) -> T:
        if not self._items:
            raise asyncio.QueueEmpty
        item, rows = self._items.popleft()
        self._rows -= rows
        self._space.set()
        return item

    async def get(self) -> T:
        while not self._items:
            self._nonempty.clear()
            await self._nonempty.wait()
        return self.get_nowait()
