"""Faults mid-stream: a killed dump thread, a mariadbd restart, a dropped and a stalled connection.
Every transaction must arrive exactly once and in order."""

from __future__ import annotations

import asyncio
import random

import pytest
from stream_helpers import (
    Proxy,
    changes_of,
    expected_changes,
    make_tables,
    run_sql,
    settings_for,
    unique_db,
    workload,
)

from service.backoff import Backoff
from service.devtools.stack import LocalStack
from service.transactions import TableFilter, Transaction
from service.transport.source import BinlogSource

pytestmark = pytest.mark.integration
FAST = Backoff(base=0.05, cap=0.5)


async def _drain(
    source: BinlogSource, db: str, want: int, sink: list[Transaction], timeout: float = 30
) -> None:
    async with asyncio.timeout(timeout):
        async for txn in source:
            sink.append(txn)
            if len(changes_of(sink, db)) >= want:
                return


async def test_killed_dump_thread_and_server_restart(stack: LocalStack) -> None:
    db = unique_db("st_kill")
    run_sql(stack, make_tables(db))
    source = BinlogSource(settings_for(stack), "now", table_filter=TableFilter((f"{db}.*",)), backoff=FAST)
    got: list[Transaction] = []
    async with source:
        run_sql(stack, workload(db, 0, 4))
        await _drain(source, db, len(expected_changes(db, 0, 4)), got)

        session = source._session
        assert session is not None
        run_sql(stack, [f"KILL {session.stream.thread_id}"])
        run_sql(stack, workload(db, 4, 4))
        await _drain(source, db, len(expected_changes(db, 0, 8)), got)
        assert source.stats.reconnects >= 1

        await asyncio.to_thread(stack.stop_mysql, kill=True)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(stack.start_mysql)
        run_sql(stack, workload(db, 8, 4))
        await _drain(source, db, len(expected_changes(db, 0, 12)), got)
        assert source.stats.reconnects >= 2
    assert changes_of(got, db) == expected_changes(db, 0, 12)
    ends = [t.end.position for t in got]
    assert ends == sorted(ends) and len(set(ends)) == len(ends)


async def test_dropped_and_stalled_connection_through_proxy(stack: LocalStack) -> None:
    random.seed(7)
    db = unique_db("st_proxy")
    run_sql(stack, make_tables(db))
    info = stack.load()
    assert info is not None
    async with Proxy(info.mysql_port) as proxy:
        settings = settings_for(stack, proxy.url("mirror", info.repl_password), heartbeat_seconds=0.4)
        source = BinlogSource(settings, "now", table_filter=TableFilter((f"{db}.*",)), backoff=FAST)
        got: list[Transaction] = []
        async with source:
            run_sql(stack, workload(db, 0, 3))
            await _drain(source, db, len(expected_changes(db, 0, 3)), got)

            # drop: both sides of every proxied connection reset while transactions keep coming
            proxy.drop()
            run_sql(stack, workload(db, 3, 3))
            await _drain(source, db, len(expected_changes(db, 0, 6)), got)
            assert source.stats.reconnects == 1

            # stall: the connection stays open but nothing flows; only the heartbeat timeout sees it
            proxy.stalled = True
            run_sql(stack, workload(db, 6, 3))
            loop = asyncio.get_running_loop()
            began = loop.time()
            while source.stats.reconnects < 2 and source.stats.connected:
                await asyncio.sleep(0.05)
            detected = loop.time() - began
            proxy.stalled = False
            proxy.drop()  # the old, stalled pipes
            assert 0.5 < detected < 0.4 * 2.5 + 1.5, detected
            assert "no event or heartbeat" in source.stats.last_error
            await _drain(source, db, len(expected_changes(db, 0, 9)), got)
            async with asyncio.timeout(3):  # idle now: heartbeats keep the connection alive
                while source.stats.heartbeats == 0:
                    await asyncio.sleep(0.05)
    assert changes_of(got, db) == expected_changes(db, 0, 9)


async def test_connection_cut_inside_a_transaction(stack: LocalStack) -> None:
    """The connection fails in the middle of a 2,000-row transaction (mid-packet): the stream
    restarts at the transaction's beginning and delivers it once, whole, never a half."""
    db = unique_db("st_cut")
    run_sql(stack, make_tables(db))
    rows = 2000
    ids = range(10_000, 10_000 + rows)  # clear of the workload's ids
    big = ["BEGIN", *(f"INSERT INTO {db}.notes VALUES ({i}, '{'y' * 150}')" for i in ids), "COMMIT"]
    info = stack.load()
    assert info is not None
    async with Proxy(info.mysql_port) as proxy:
        settings = settings_for(stack, proxy.url("mirror", info.repl_password))
        source = BinlogSource(settings, "now", table_filter=TableFilter((f"{db}.*",)), backoff=FAST)
        got: list[Transaction] = []
        async with source:
            proxy.cut_after = 150_000  # the transaction's events are ~400 KB
            run_sql(stack, big)
            run_sql(stack, workload(db, 0, 3))
            await _drain(source, db, rows + len(expected_changes(db, 0, 3)), got)
            assert proxy.cut_after is None and source.stats.reconnects == 1
    mine = [t for t in got if any(c.schema == db for c in t.changes)]
    assert [len(t.changes) for t in mine][0] == rows
    assert changes_of(mine[:1], db) == [("insert", "notes", None, {"id": i, "body": "y" * 150}) for i in ids]
    assert changes_of(mine[1:], db) == expected_changes(db, 0, 3)


async def test_reader_bug_reaches_the_consumer(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected exception in the reader task is raised to the consumer, never a silent hang."""

    async def broken(self: BinlogSource, session: object) -> bool:
        raise RuntimeError("decoder bug")

    monkeypatch.setattr(BinlogSource, "_pump", broken)
    async with BinlogSource(settings_for(stack), "now", backoff=FAST) as source:
        with pytest.raises(RuntimeError, match="decoder bug"):
            async with asyncio.timeout(10):
                await anext(source)


def test_backoff_is_bounded_exponential_with_jitter() -> None:
    random.seed(1)
    b = Backoff(base=0.5, cap=4.0)
    assert [b.ceiling(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    delays = [b.delay(n) for n in range(1, 200)]
    assert all(0 <= d <= 4.0 for d in delays) and len(set(delays)) == len(delays)
    assert b.ceiling(10_000) == 4.0
