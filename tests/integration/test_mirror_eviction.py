"""Keys evicted by Redis (a maxmemory-policy changed to allkeys-* while the mirror runs): the
mirror stops saying it is now incomplete, marks itself for a re-copy, and the next start copies
the selected tables again (docs/mirror.md, "What the mirror asks of its Redis")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.sink.checkpoints import decode_checkpoint, recopy_reason
from service.sink.keys import KeyLayout
from tests.integration.mirror_helpers import (
    actual,
    expected,
    master_position,
    mirror_settings,
    run_sql,
    stop_replicator,
    unique_names,
    wait_applied,
)

pytestmark = pytest.mark.integration

KEYS = {"t": ("id",)}


@pytest.fixture
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of its own: its maxmemory settings change here."""
    local = LocalStack(tmp_path_factory.mktemp("evicting"))
    local.start_redis()
    try:
        info = local.load()
        assert info is not None
        yield info.redis_url
    finally:
        local.down()


async def _until(check: Any, what: str, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_an_eviction_stop_marks_the_mirror_and_the_next_start_recopies(
    stack: LocalStack, own_redis: str
) -> None:
    db, prefix = unique_names()
    run_sql(stack, None, f"CREATE DATABASE {db}", f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(200))")
    values = ", ".join(f"({i}, '{'x' * 150}{i}')" for i in range(1, 401))
    run_sql(stack, db, f"INSERT INTO t VALUES {values}")
    settings = mirror_settings(stack, db, prefix, redis=own_redis)
    r = redis_sync.Redis.from_url(own_redis)
    try:
        rep = Replicator(settings)
        task = asyncio.create_task(rep.run())
        await _until(lambda: rep.status().state == State.STREAMING, "streaming")
        run_sql(stack, db, "UPDATE t SET v = 'changed' WHERE id = 1")
        await asyncio.to_thread(wait_applied, own_redis, prefix, master_position(stack))
        want = expected(stack, db, KEYS)
        await _until(  # the first copy runs beside the stream
            lambda: rep.status().state == State.STREAMING and actual(own_redis, prefix, db, ("t",)) == want,
            "the first copy",
        )

        # an operator turns on eviction at runtime; Redis fills and evicts
        used = int(r.info("memory")["used_memory"])
        r.config_set("maxmemory", str(used + 512 * 1024))
        r.config_set("maxmemory-policy", "allkeys-lru")
        for i in range(400):
            r.set(f"junk:{i}", b"j" * 8192)
        assert int(r.info("stats")["evicted_keys"]) > 0
        with pytest.raises(ConfigError) as err:
            await asyncio.wait_for(task, 60)
        message = str(err.value)
        assert "maxmemory-policy allkeys-lru" in message and "the mirror is now incomplete" in message
        assert "the next start copies the selected tables again" in message
        assert (
            recopy_reason(r.hgetall(f"{prefix}:__checkpoint"))
            == "Redis evicted keys (maxmemory-policy allkeys-lru)"
        )
        await stop_replicator(rep, task)

        # rows are gone now; the operator restores noeviction and frees the memory
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", "0")
        r.delete(*[f"junk:{i}" for i in range(400)])
        base = KeyLayout(prefix).table_base(db, "t")
        rows = [k for k in r.scan_iter(match=f"{base}:*", count=1000) if b":__" not in k]
        assert len(rows) < 400  # evicted

        # the next start copies the tables again and clears the marker
        again = Replicator(settings)
        task = asyncio.create_task(again.run())
        try:
            want = expected(stack, db, KEYS)
            await _until(
                lambda: (
                    again.status().state == State.STREAMING and actual(own_redis, prefix, db, ("t",)) == want
                ),
                "the re-copy",
            )
            run_sql(stack, db, "DELETE FROM t WHERE id = 2")
            await asyncio.to_thread(wait_applied, own_redis, prefix, master_position(stack))
            assert actual(own_redis, prefix, db, ("t",)) == expected(stack, db, KEYS)
        finally:
            await stop_replicator(again, task)
        raw = r.hgetall(f"{prefix}:__checkpoint")
        assert recopy_reason(raw) is None and decode_checkpoint(raw) is not None
    finally:
        r.close()
        run_sql(stack, None, f"DROP DATABASE {db}")
