"""RowQueue: bounded by items and by rows, FIFO, and a cancelled get() loses nothing."""

from __future__ import annotations

import asyncio

import pytest

from service.queues import RowQueue


async def test_fifo_and_row_accounting() -> None:
    q: RowQueue[str] = RowQueue(10, 100)
    await q.put("a", 30)
    await q.put("b", 50)
    assert (q.qsize(), q.rows) == (2, 80)
    assert q.full(21) and not q.full(20)
    assert await q.get() == "a"
    assert q.get_nowait() == "b"
    assert q.empty() and q.rows == 0
    with pytest.raises(asyncio.QueueEmpty):
        q.get_nowait()


async def test_put_waits_for_rows_not_only_items() -> None:
    q: RowQueue[str] = RowQueue(256, 1000)
    await q.put("big", 900)
    blocked = asyncio.create_task(q.put("next", 200))
    await asyncio.sleep(0.01)
    assert not blocked.done() and q.qsize() == 1  # 1,100 rows would exceed the budget
    assert await q.get() == "big"
    await asyncio.wait_for(blocked, 1)
    assert q.get_nowait() == "next"


async def test_put_waits_for_items() -> None:
    q: RowQueue[int] = RowQueue(2, 10**6)
    await q.put(1)
    await q.put(2)
    blocked = asyncio.create_task(q.put(3))
    await asyncio.sleep(0.01)
    assert not blocked.done()
    assert q.get_nowait() == 1
    await asyncio.wait_for(blocked, 1)
    assert [q.get_nowait(), q.get_nowait()] == [2, 3]


async def test_an_item_above_the_budget_passes_alone() -> None:
    """A transaction with more rows than the budget must not stall the stream forever."""
    q: RowQueue[str] = RowQueue(10, 100)
    await asyncio.wait_for(q.put("huge", 5000), 1)
    blocked = asyncio.create_task(q.put("small", 1))
    await asyncio.sleep(0.01)
    assert not blocked.done()  # waits until the huge one is taken
    assert q.get_nowait() == "huge"
    await asyncio.wait_for(blocked, 1)


async def test_a_cancelled_get_consumes_nothing() -> None:
    q: RowQueue[str] = RowQueue(10, 100)
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0.01)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await q.put("x", 1)
    assert await asyncio.wait_for(q.get(), 1) == "x"


async def test_two_waiting_gets_each_take_one_item() -> None:
    q: RowQueue[str] = RowQueue(10, 100)
    first, second = asyncio.create_task(q.get()), asyncio.create_task(q.get())
    await asyncio.sleep(0.01)
    await q.put("a", 1)
    await asyncio.sleep(0.01)
    assert [first.done(), second.done()].count(True) == 1  # both woke; one found the queue empty again
    await q.put("b", 1)
    assert sorted(await asyncio.wait_for(asyncio.gather(first, second), 1)) == ["a", "b"]


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RowQueue(0, 10)
    with pytest.raises(ValueError):
        RowQueue(10, 0)
