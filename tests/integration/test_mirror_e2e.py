"""End to end: a random workload on MariaDB -> Replicator -> Redis equals SELECT *, value for value."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.settings import load_settings
from service.sink import channel as channel_module
from tests.integration.mirror_helpers import (
    Workload,
    actual,
    create_schema,
    expected,
    master_position,
    mirror_settings,
    settle,
    stop_replicator,
    unique_names,
    wait_applied,
    wait_hooks,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("seed", "row_image"),
    [(11, "FULL"), (3, "FULL"), (29, "FULL"), (1, "MINIMAL"), (16, "MINIMAL"), (3, "NOBLOB")],
)
async def test_random_workload_mirrors_exactly(
    stack: LocalStack, caplog: pytest.LogCaptureFixture, seed: int, row_image: str
) -> None:
    """Partial row images too: rows they change while an ALTER's resync runs are read again at
    its end, and a partial INSERT gets the NOT NULL defaults the statement left out."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    wl = Workload(stack, db, seed=seed, row_image=row_image)
    for _ in range(20):  # rows that exist before the first start: copied by the bootstrap resync
        wl.step(allow_ddl=False)
    settings = load_settings(
        None,
        mysql=info.mysql_url,
        redis=info.redis_url,
        tables=[f"{db}.*"],
        key_prefix=prefix,
        server_id=5000 + hash(db) % 1000,
        changelog_maxlen=100000,
        chunk_rows=3,  # exercise chunked transactions
        table_step_rows=2,  # and TRUNCATE/RENAME in several calls
        heartbeat_seconds=1.0,
    )
    ledger_before = wl.ledger
    applied: list[tuple[str, int]] = []
    rep = Replicator(settings, on_applied=[lambda t, s: applied.append((str(t.end.position), s))])
    task = asyncio.create_task(rep.run())
    try:
        # started ("now") before the workload goes on: every later transaction is streamed, so
        # the change log holds each of its ledger inserts
        await wait_hooks(rep, master_position(stack))
        for i in range(150):
            wl.step()
            if i % 25 == 0:
                await asyncio.sleep(0.05)
        # a big multi-table transaction (applied in chunks)
        cur = wl.conn.cursor()
        for k in range(20):
            cur.execute("INSERT INTO pairs VALUES (%s, %s, 'bulk')", (f"bulk{k}", k))
        wl.ledger += 1
        cur.execute("INSERT INTO ledger VALUES (%s, 'bulk')", (wl.ledger,))
        wl.conn.commit()
        target = master_position(stack)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, target)
        await settle(rep, stack)  # resyncs may still be running
        assert actual(info.redis_url, prefix, db) == expected(stack, db)
        assert "without whole rows" not in caplog.text  # no RowsMissing: settle windows, fences
        st = rep.status()
        assert st.state in (State.STREAMING, State.RESYNCING) and st.leader and st.redis_reachable
        assert any(t.table == "nokey" and t.skipped_rows > 0 for t in st.tables)
        seqs = [s for _, s in applied]
        assert seqs == sorted(seqs)
        # change log: exactly one ledger insert per committed transaction
        r = redis_sync.Redis.from_url(info.redis_url)
        entries = r.xrange(f"{prefix}:__changes")
        r.close()
        ledger_inserts = [e for e in entries if e[1][b"table"] == b"ledger" and e[1][b"op"] == b"insert"]
        ids = sorted(int(e[1][b"key"]) for e in ledger_inserts)
        assert ids == list(range(ledger_before + 1, wl.ledger + 1))
    finally:
        await stop_replicator(rep, task)
        wl.close()
    assert rep.status().state == State.STOPPED


async def test_a_redis_that_stops_answering_is_retried(
    stack: LocalStack, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis frozen (SIGSTOP) with calls in flight: their replies time out, the session ends with
    SinkError and, once Redis answers again, resumes from the checkpoint. Every transaction is
    applied once (the change log has one ledger insert each)."""
    info = stack.load()
    assert info is not None and info.redis_pid is not None
    monkeypatch.setattr(channel_module, "IO_TIMEOUT", 1.0)
    db, prefix = unique_names()
    create_schema(stack, db)
    rep = Replicator(mirror_settings(stack, db, prefix, changelog_maxlen=100000))
    task = asyncio.create_task(rep.run())
    wl = Workload(stack, db, seed=29)
    ledger_before = wl.ledger
    try:
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        for _ in range(5):
            wl.step(allow_ddl=False)
        os.kill(info.redis_pid, signal.SIGSTOP)
        try:
            for _ in range(20):
                wl.step(allow_ddl=False)
            for _ in range(200):
                if "SinkError" in (rep.status().errors.last or ""):
                    break
                await asyncio.sleep(0.05)
        finally:
            os.kill(info.redis_pid, signal.SIGCONT)
        assert "SinkError" in (rep.status().errors.last or "")
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        assert actual(info.redis_url, prefix, db) == expected(stack, db)
        r = redis_sync.Redis.from_url(info.redis_url)
        entries = r.xrange(f"{prefix}:__changes")
        r.close()
        ids = sorted(
            int(e[1][b"key"]) for e in entries if e[1][b"table"] == b"ledger" and e[1][b"op"] == b"insert"
        )
        assert ids == list(range(ledger_before + 1, wl.ledger + 1))
    finally:
        await stop_replicator(rep, task)
        wl.close()


async def test_redis_going_away_is_retried(stack: LocalStack, caplog: pytest.LogCaptureFixture) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    settings = load_settings(
        None,
        mysql=info.mysql_url,
        redis=info.redis_url,
        tables=[f"{db}.*"],
        key_prefix=prefix,
        server_id=7000 + hash(db) % 1000,
        changelog_maxlen=100000,
    )
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    wl = Workload(stack, db, seed=23)
    try:
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        for _ in range(10):
            wl.step(allow_ddl=False)
        await asyncio.to_thread(stack.stop_redis)
        for _ in range(20):
            wl.step(allow_ddl=False)
        for _ in range(100):
            if rep.status().state == State.RECONNECTING:
                break
            await asyncio.sleep(0.05)
        st = rep.status()
        assert st.state == State.RECONNECTING and not st.redis_reachable
        assert "SinkError" in (st.errors.last or "")
        await asyncio.to_thread(stack.start_redis)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        assert actual(info.redis_url, prefix, db) == expected(stack, db)
        assert any("replication interrupted" in r.message for r in caplog.records)
    finally:
        await stop_replicator(rep, task)
        wl.close()
