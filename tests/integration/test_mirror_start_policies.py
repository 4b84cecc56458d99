"""What the mirror does without a checkpoint (on_no_checkpoint = refuse | start), and with a
checkpoint the source has purged (PositionLost, with the way out)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import redis as redis_sync

from service.checkpoint import BinlogPosition, Checkpoint
from service.devtools.stack import LocalStack
from service.errors import ConfigError, PositionLost
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.sink.checkpoints import decode_checkpoint
from service.transactions import Transaction
from tests.integration.mirror_helpers import (
    master_position,
    mirror_settings,
    run_sql,
    stop_replicator,
    unique_names,
    wait_applied,
    wait_hooks,
)

pytestmark = pytest.mark.integration


def _stored(redis_url: str, prefix: str) -> Checkpoint | None:
    r = redis_sync.Redis.from_url(redis_url)
    try:
        raw = r.hgetall(f"{prefix}:__checkpoint")
    finally:
        r.close()
    return Checkpoint(s.checkpoint.position) if (s := decode_checkpoint(raw)) else None


def _master(stack: LocalStack) -> BinlogPosition:
    row = run_sql(stack, None, "SHOW MASTER STATUS")[0]
    return BinlogPosition(str(row[0]), int(row[1]))


async def _stop(rep: Replicator, task: asyncio.Task[None]) -> None:
    await stop_replicator(rep, task)


async def test_refuse_without_a_checkpoint_says_how_to_start(stack: LocalStack) -> None:
    db, prefix = unique_names()
    rep = Replicator(mirror_settings(stack, db, prefix, on_no_checkpoint="refuse"))
    with pytest.raises(ConfigError) as err:
        await asyncio.wait_for(rep.run(), 15)
    message = str(err.value)
    assert f"no checkpoint at {prefix}:__checkpoint and on_no_checkpoint=refuse" in message
    assert "--on-no-checkpoint now" in message and "start (replay all binlogs" in message
    assert "copy the tables first with `binlog-mirror snapshot`" in message  # the Spark first copy
    assert rep.status().state == State.FAILED
    assert _stored(stack.load().redis_url, prefix) is None  # type: ignore[union-attr]


async def test_start_replays_from_the_oldest_binlog_then_a_purged_checkpoint_stops_the_mirror(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    own = LocalStack(tmp_path / "own")  # PURGE BINARY LOGS changes the server for good
    own.up()
    try:
        info = own.load()
        assert info is not None
        db, prefix = "purged", "pg"
        run_sql(
            own, None, f"CREATE DATABASE {db}", f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10))"
        )
        run_sql(own, None, f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b')", "FLUSH BINARY LOGS")
        run_sql(own, None, f"UPDATE {db}.t SET v = 'b2' WHERE id = 2", f"INSERT INTO {db}.t VALUES (3, 'c')")
        oldest = str(run_sql(own, None, "SHOW BINARY LOGS")[0][0])

        # on_no_checkpoint=start: the stream begins in the oldest binlog, not at the current end
        applied: list[Transaction] = []
        rep = Replicator(
            mirror_settings(own, db, prefix, on_no_checkpoint="start"),
            on_applied=[lambda txn, seq: applied.append(txn)],
        )
        task = asyncio.create_task(rep.run())
        try:
            # less a trailing BINLOG_CHECKPOINT: the one the FLUSH asks for may come after the
            # last commit (a slow machine), and no transaction moves the mirror past it
            target = master_position(own)
            await asyncio.to_thread(wait_applied, info.redis_url, prefix, target)
            await wait_hooks(rep, target)
            assert applied and applied[0].end.position.file == oldest
            r = redis_sync.Redis.from_url(info.redis_url)
            rows = {k: r.hgetall(f"{prefix}:{db}:t:{k}") for k in ("1", "2", "3")}
            r.close()
            assert rows == {
                "1": {b"id": b"1", b"v": b"a"},
                "2": {b"id": b"2", b"v": b"b2"},
                "3": {b"id": b"3", b"v": b"c"},
            }
        finally:
            await _stop(rep, task)
        checkpoint = _stored(info.redis_url, prefix)
        assert checkpoint is not None

        # the source moves on and purges the binlog that holds the checkpoint
        run_sql(own, None, f"INSERT INTO {db}.t VALUES (4, 'd')", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
        current = _master(own).file
        for _ in range(100):  # a log still read by a dump thread (ours, closing) is not purged
            run_sql(own, None, f"PURGE BINARY LOGS TO '{current}'")
            if str(run_sql(own, None, "SHOW BINARY LOGS")[0][0]) == current:
                break
            await asyncio.sleep(0.05)
        assert str(run_sql(own, None, "SHOW BINARY LOGS")[0][0]) == current != checkpoint.position.file

        caplog.set_level(logging.ERROR, logger="service.pipeline")
        again = Replicator(mirror_settings(own, db, prefix))
        with pytest.raises(PositionLost) as err:
            await asyncio.wait_for(again.run(), 30)
        message = str(err.value)
        assert f"the stored checkpoint {checkpoint.position} is no longer on the source" in message
        assert f"Way out: delete the mirror's keys ({prefix}:*)" in message
        assert "copy the tables again with `binlog-mirror snapshot`" in message
        assert "then start `binlog-mirror run` again" in message and "on_no_checkpoint=now" in message
        assert isinstance(err.value.__cause__, PositionLost)  # the server's own ERR 1236 text
        status = again.status()
        assert status.state == State.FAILED and not status.errors.retriable
        assert "Way out" in (status.errors.last or "")
        assert any("Way out" in rec.getMessage() for rec in caplog.records)
        assert _stored(info.redis_url, prefix) == checkpoint  # nothing was written
    finally:
        own.down()
