"""Messages that say what happened (issue #24, item 5), with log capture on the real stack:
FLUSHALL is reported as Redis losing the mirror's keys, not as another instance holding the lease;
an update caught up across a DDL that changed the primary key is reported as that, not as keys
removed outside binlog-mirror."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from tests.integration.mirror_helpers import (
    actual,
    expected,
    mirror_settings,
    new_database,
    replicating,
    run_sql,
    settle,
    stack_redis_url,
)

pytestmark = pytest.mark.integration


def _messages(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


async def test_flushall_is_reported_as_lost_keys(stack: LocalStack, caplog: pytest.LogCaptureFixture) -> None:
    db, prefix = new_database(
        stack, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1), (2, 2)"
    )
    # a database of its own: FLUSHALL == FLUSHDB here
    redis_url = stack_redis_url(stack).rsplit("/", 1)[0] + "/5"
    caplog.set_level(logging.INFO)
    r = redis_sync.Redis.from_url(redis_url)
    try:
        async with replicating(
            mirror_settings(stack, db, prefix, redis=redis_url, on_no_checkpoint="start")
        ) as rep:
            await settle(rep, stack)
            r.flushdb()
            run_sql(stack, db, "INSERT INTO t VALUES (3, 3)")
            deadline = time.monotonic() + 60
            while "Redis lost the mirror's keys" not in _messages(caplog):
                assert time.monotonic() < deadline, _messages(caplog)
                await asyncio.sleep(0.1)
            await settle(rep, stack)
            deadline = time.monotonic() + 60
            while actual(redis_url, prefix, db, ("t",)) != expected(stack, db, {"t": ("id",)}):
                assert time.monotonic() < deadline, "the mirror was not copied again"
                await asyncio.sleep(0.2)
    finally:
        r.flushdb()
        r.close()
    text = _messages(caplog)
    assert "FLUSHALL or FLUSHDB, or a restart without persistence" in text
    assert "held by another instance" not in text


async def test_key_change_caught_up_is_reported_as_such(
    stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    db, prefix = new_database(
        stack,
        "CREATE TABLE t (id INT PRIMARY KEY, code VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (code))",
        "INSERT INTO t VALUES (1, 'c1', 1), (2, 'c2', 2), (3, 'c3', 3)",
    )
    settings = mirror_settings(stack, db, prefix)
    async with replicating(settings) as rep:
        await settle(rep, stack)
    # while the mirror is stopped: an update, then the primary key moves to another column
    run_sql(
        stack,
        db,
        "UPDATE t SET v = 10 WHERE id = 1",
        "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (code)",
    )
    caplog.set_level(logging.WARNING)
    async with replicating(settings) as rep:
        await settle(rep, stack, timeout=60)
    text = _messages(caplog)
    assert "are keyed by other columns than its current key (code)" in text, text
    assert "a DDL that changed its primary key lies ahead in the binlog" in text
    assert "outside binlog-mirror" not in text
    assert actual(stack_redis_url(stack), prefix, db, ("t",)) == expected(stack, db, {"t": ("code",)})
