"""Snapshot with Spark while the source keeps writing, then the service takes over from its
checkpoint: the mirror ends equal to the source, row for row."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis as redis_sync

from service.batch.snapshot import run_snapshot
from service.devtools.stack import LocalStack
from service.errors import ConfigError, SinkError
from service.pipeline.replicator import Replicator
from service.sink.keys import KeyLayout
from tests.integration.mirror_helpers import (
    Workload,
    actual,
    create_schema,
    expected,
    master_position,
    mirror_settings,
    stop_replicator,
    unique_names,
    wait_applied,
    wait_hooks,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


async def test_snapshot_under_writes_then_the_service_converges(stack: LocalStack, spark: Any) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    wl = Workload(stack, db, seed=11)
    for _ in range(150):
        wl.step(allow_ddl=False)
    r = redis_sync.Redis.from_url(info.redis_url)
    r.set(f"{prefix}:{db}:items:999999", "left by an earlier, failed snapshot")
    r.sadd(f"{prefix}:{db}:items:__keys", "999999")
    settings = mirror_settings(stack, db, prefix)

    stop = threading.Event()
    during = [0]

    def writes() -> None:  # the source keeps changing while the ranges are read
        while not stop.is_set():
            wl.step(allow_ddl=False)
            during[0] += 1

    writer = threading.Thread(target=writes)
    writer.start()
    try:
        result = await asyncio.to_thread(run_snapshot, spark, settings, chunk_rows=40)
    finally:
        stop.set()
        writer.join()
    assert sum(result.rows.values()) > 0 and (db, "nokey") in result.skipped
    assert during[0] > 10, during
    assert r.exists(f"{prefix}:__checkpoint") and not r.exists(f"{prefix}:__lease")
    assert not r.exists(f"{prefix}:{db}:items:999999")  # cleared before the copy
    # every selected table is registered, the keyless one too: the service copies none again
    assert r.sismember(f"{prefix}:__tables", KeyLayout(prefix).table_id(db, "nokey"))
    with pytest.raises(ConfigError, match="already kept in sync"):
        run_snapshot(spark, settings)

    for _ in range(30):
        wl.step(allow_ddl=False)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        target = master_position(stack)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, target)
        await wait_hooks(rep, target)
        assert not any(t.resync for t in rep.status().tables)  # the snapshot's tables are not copied again
        assert actual(info.redis_url, prefix, db) == expected(stack, db)
    finally:
        await stop_replicator(rep, task)
        wl.close()
        r.close()


def test_snapshot_refuses_while_a_writer_holds_the_lease(stack: LocalStack, spark: Any) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    r = redis_sync.Redis.from_url(info.redis_url)
    r.set(f"{prefix}:__lease", "a-running-instance", px=10_000)
    try:
        with pytest.raises(SinkError, match="stop the running binlog-mirror first"):
            run_snapshot(spark, mirror_settings(stack, db, prefix))
        assert not r.exists(f"{prefix}:__checkpoint")
    finally:
        r.close()
