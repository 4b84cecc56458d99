"""Snapshot with Spark while the source keeps writing, then the service takes over from its
checkpoint: the mirror ends equal to the source, row for row."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis as redis_sync

from service.batch.snapshot import run_snapshot
from service.batch.verify import verify_mirror
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
    new_database,
    settle,
    stop_replicator,
    unique_names,
    wait_applied,
    wait_hooks,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BINARY_SCHEMA = (  # as tests/integration/test_binary_keys.py, without the foreign key
    "CREATE TABLE uu (id BINARY(16) PRIMARY KEY, name VARCHAR(20), n INT)",
    "CREATE TABLE cb (k VARBINARY(20) NOT NULL, s VARCHAR(20) NOT NULL, v INT, PRIMARY KEY (k, s))",
    "INSERT INTO uu SELECT UNHEX(MD5(seq)), CONCAT('n', seq), seq FROM seq_1_to_30000",
    "INSERT INTO cb SELECT UNHEX(MD5(seq DIV 3)), CONCAT('s', seq MOD 3, 'é:'), seq FROM seq_1_to_6000",
)


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


async def test_snapshot_and_spark_verify_with_binary_keys(
    stack: LocalStack, spark: Any, tmp_path: Any
) -> None:
    """Issue 37: a BINARY(16) key of 30,000 rows and a (VARBINARY, VARCHAR) key, read in keyset
    chunks that bind binary values (service/sqltext.py); then `verify --master` finds a changed,
    a missing and an extra key, and repairs them."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *BINARY_SCHEMA)
    settings = mirror_settings(stack, db, prefix)
    result = await asyncio.to_thread(run_snapshot, spark, settings, chunk_rows=2000)
    assert result.rows[(db, "uu")] == 30_000 and result.rows[(db, "cb")] == 6_000
    keys = {"uu": ("id",), "cb": ("k", "s")}
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack, timeout=60)
        assert not any(t.resync for t in rep.status().tables)  # nothing copied again
    finally:
        await stop_replicator(rep, task)
    assert actual(info.redis_url, prefix, db, tuple(keys)) == expected(stack, db, keys)

    lay = KeyLayout(prefix)
    r = redis_sync.Redis.from_url(info.redis_url)
    try:
        changed = lay.row_key(db, "uu", [bytes.fromhex("c4ca4238a0b923820dcc509a6f75849b")])  # MD5(1)
        missing = lay.row_key(db, "cb", [bytes.fromhex("c4ca4238a0b923820dcc509a6f75849b"), "s1é:"])
        extra = lay.row_key(db, "uu", [b"\xa3" * 16])
        r.hset(changed, "name", "tampered")
        r.delete(missing)
        r.hset(extra, "id", b"\xa3" * 16)
        found = await asyncio.to_thread(verify_mirror, spark, settings, str(tmp_path / "v1"), chunk_rows=3000)
        assert sorted((d.kind, d.key) for d in found.differences) == [
            ("differs", changed),
            ("extra", extra),
            ("missing", missing),
        ]
        fixed = await asyncio.to_thread(
            verify_mirror, spark, settings, str(tmp_path / "v2"), chunk_rows=3000, repair=True
        )
        assert fixed.repaired == 3
    finally:
        r.close()
    assert actual(info.redis_url, prefix, db, tuple(keys)) == expected(stack, db, keys)
