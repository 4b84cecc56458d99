"""Source failover (docs/operations.md, "Source failover"; issue 39), on real servers: a MariaDB
primary and its GTID replica (log_slave_updates, gtid_strict_mode), the mirror reaching the
primary through a proxy. The primary dies, the replica is promoted, the proxy switches:

* a replica that has every transaction the mirror applied is followed by GTID, with no table
  copy, and its file names and offsets replace the old ones in the checkpoint;
* a replica that missed the last mirrored transactions is never followed silently: the mirror
  stops naming the GTIDs, or copies the tables again with on_history_mismatch=recopy;
* a bootstrap-only checkpoint resumed against another server with the same GTIDs and offsets
  is refused (its file's FORMAT_DESCRIPTION differs), never followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from api.readiness import readiness
from service.devtools.stack import LocalStack, StackInfo
from service.devtools.stack_replica import promote, start_replica, wait_replica
from service.errors import HistoryMismatch, SourceBehind
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.sink.checkpoints import StoredCheckpoint, decode_checkpoint
from tests.integration.mirror_helpers import (
    actual,
    expected,
    mirror_settings,
    run_sql,
    stop_replicator,
    until,
)
from tests.integration.stream_helpers import Proxy

pytestmark = pytest.mark.integration

DB, PREFIX = "fo", "fo"
KEYS = {"t": ("id",)}
SCHEMA = (f"CREATE DATABASE {DB}", f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(20))")


@contextlib.contextmanager
def _pair(tmp_path: Path, redis_cluster: bool = False) -> Iterator[tuple[LocalStack, LocalStack, StackInfo]]:
    primary = LocalStack(tmp_path / "primary", redis_cluster=redis_cluster)
    replica = LocalStack(tmp_path / "replica")
    try:
        info = primary.up()
        run_sql(primary, None, *SCHEMA)
        run_sql(primary, None, *(f"INSERT INTO {DB}.t VALUES ({i}, 'a{i}')" for i in range(1, 21)))
        start_replica(replica, primary)
        # the replica's binlog is not the primary's: other file names and offsets
        run_sql(replica, None, "FLUSH BINARY LOGS")
        wait_replica(replica, primary)
        yield primary, replica, info
    finally:
        replica.down()
        primary.down()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LocalStack, LocalStack, StackInfo]]:
    """A primary (with the Redis the mirror writes to) and its GTID replica; both stopped after."""
    with _pair(tmp_path) as servers:
        yield servers


def _port(stack: LocalStack) -> int:
    info = stack.load()
    assert info is not None
    return info.mysql_port


def _stored(redis_url: str) -> StoredCheckpoint:
    r = redis_sync.Redis.from_url(redis_url)
    try:
        stored = decode_checkpoint(r.hgetall(f"{PREFIX}:__checkpoint"))  # type: ignore[arg-type]
    finally:
        r.close()
    assert stored is not None
    return stored


def _one(stack: LocalStack, sql: str) -> Any:
    return run_sql(stack, None, sql)[0][0]


async def _equal(rep: Replicator, redis_url: str, stack: LocalStack, timeout: float = 60.0) -> None:
    want = expected(stack, DB, KEYS)
    try:
        await until(
            "the mirror equal to the source",
            lambda: rep.status().state == State.STREAMING and actual(redis_url, PREFIX, DB, ("t",)) == want,
            timeout,
        )
    except AssertionError:
        s = rep.status()
        raise AssertionError(
            f"not equal to the source after {timeout:g} s: state {s.state}, last error {s.errors.last}, "
            f"source {s.source}, applied {s.applied}"
        ) from None


def _copies(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("bootstrap at")]


@pytest.mark.parametrize("rotated", [False, True], ids=["after-a-transaction", "after-a-rotate"])
async def test_a_promoted_replica_is_followed_by_gtid_without_a_table_copy(
    pair: tuple[LocalStack, LocalStack, StackInfo], caplog: pytest.LogCaptureFixture, rotated: bool
) -> None:
    """`rotated`: the primary's binlog rotated (FLUSH BINARY LOGS, as backups do) after the last
    mirrored transaction: the checkpoint is the new file's start, carrying that transaction."""
    primary, replica, info = pair
    caplog.set_level(logging.INFO)
    async with Proxy(info.mysql_port) as proxy:
        settings = mirror_settings(primary, DB, PREFIX, mysql=proxy.url("mirror", info.repl_password))
        rep = Replicator(settings)
        task = asyncio.create_task(rep.run())
        try:
            await _equal(rep, info.redis_url, primary)
            for i in range(21, 31):
                run_sql(primary, None, f"INSERT INTO {DB}.t VALUES ({i}, 'b{i}')")
            run_sql(
                primary, None, f"UPDATE {DB}.t SET v = 'u' WHERE id < 5", f"DELETE FROM {DB}.t WHERE id = 7"
            )
            await _equal(rep, info.redis_url, primary)
            wait_replica(replica, primary)
            if rotated:
                run_sql(primary, None, "FLUSH BINARY LOGS")
                new_file = run_sql(primary, None, "SHOW MASTER STATUS")[0][0]
                await until("the file start stored", lambda: _stored(info.redis_url).id.startswith(new_file))
            before = _stored(info.redis_url).checkpoint
            assert before.source == "server_id=1 domain=0" and before.gtid
            assert before.ends_transaction != rotated and before.last_commit is not None
            copies = len(_copies(caplog))

            # the primary dies, the replica is promoted, the address moves to it
            primary.stop_mysql(kill=True)  # it dies
            promote(replica)
            proxy.switch(_port(replica))
            run_sql(
                replica, None, f"INSERT INTO {DB}.t VALUES (100, 'after')", f"DELETE FROM {DB}.t WHERE id = 2"
            )
            run_sql(replica, None, f"UPDATE {DB}.t SET v = 'moved' WHERE id = 21")

            # the reader reconnects with backoff (up to 30 s between tries while the primary is down)
            await _equal(rep, info.redis_url, replica, timeout=120)
            status = rep.status()
            assert status.leader and not readiness(status) and status.source.server_id == 2
            assert status.failovers == 1 and status.last_failover_at is not None
            assert "server_id=1 domain=0 -> server_id=2 domain=0" in (status.last_failover or "")
            assert _copies(caplog) == [] or len(_copies(caplog)) == copies  # no table copy
            assert all(t.resync is None for t in status.tables)
            after = _stored(info.redis_url).checkpoint
            # the new server's file and offset replace the old ones
            file, pos = run_sql(replica, None, "SHOW MASTER STATUS")[0][:2]
            assert after.source == "server_id=2 domain=0" and after.position.file == file
            assert after.gtid_set == _one(replica, "SELECT @@gtid_binlog_pos")
            assert any("source failover: following server_id=2" in r.getMessage() for r in caplog.records)

            # and a restart resumes from the new server's checkpoint, by GTID, with no copy
            await stop_replicator(rep, task)
            rep = Replicator(settings)
            task = asyncio.create_task(rep.run())
            run_sql(replica, None, f"INSERT INTO {DB}.t VALUES (101, 'restart')")
            await _equal(rep, info.redis_url, replica)
            assert rep.status().leader and not readiness(rep.status()) and rep.status().failovers == 0
            assert len(_copies(caplog)) == copies
        finally:
            await stop_replicator(rep, task)


async def test_a_replica_that_missed_mirrored_transactions_is_not_followed(
    pair: tuple[LocalStack, LocalStack, StackInfo],
) -> None:
    primary, replica, info = pair
    async with Proxy(info.mysql_port) as proxy:
        settings = mirror_settings(primary, DB, PREFIX, mysql=proxy.url("mirror", info.repl_password))
        rep = Replicator(settings)
        task = asyncio.create_task(rep.run())
        try:
            await _equal(rep, info.redis_url, primary)
            wait_replica(replica, primary)
            run_sql(replica, None, "STOP SLAVE")  # it lags: misses what follows
            for i in range(21, 24):
                run_sql(primary, None, f"INSERT INTO {DB}.t VALUES ({i}, 'lost{i}')")
            await _equal(rep, info.redis_url, primary)
            applied = _stored(info.redis_url).checkpoint.gtid_set

            primary.stop_mysql(kill=True)  # it dies
            promote(replica)
            run_sql(replica, None, f"INSERT INTO {DB}.t VALUES (200, 'other')")
            has = _one(replica, "SELECT @@gtid_binlog_pos")  # 0-2-N: N below the mirror's
            proxy.switch(_port(replica))

            # stops, naming the GTIDs: never a silent mix of the two histories
            with pytest.raises(HistoryMismatch) as err:
                await asyncio.wait_for(task, 60)
            message = str(err.value)
            assert "the source lacks transactions the mirror applied" in message
            assert f"applied up to {applied}" in message and f"@@gtid_binlog_pos {has}" in message
            assert "--on-history-mismatch recopy" in message and "a replica that caught up" in message
            assert isinstance(err.value, SourceBehind) and rep.status().state == State.FAILED
            assert _stored(info.redis_url).checkpoint.gtid_set == applied  # nothing written
        finally:
            await stop_replicator(rep, task)

        # with on_history_mismatch=recopy: the tables are copied again from the new primary
        url = proxy.url("mirror", info.repl_password)
        rep = Replicator(mirror_settings(primary, DB, PREFIX, mysql=url, on_history_mismatch="recopy"))
        task = asyncio.create_task(rep.run())
        try:
            run_sql(replica, None, f"INSERT INTO {DB}.t VALUES (201, 'more')")
            await _equal(rep, info.redis_url, replica)
            assert "lost21" not in str(actual(info.redis_url, PREFIX, DB, ("t",)))
            assert _stored(info.redis_url).checkpoint.source == "server_id=2 domain=0"
        finally:
            await stop_replicator(rep, task)


def _same_history(stack: LocalStack, value: str) -> None:
    """The same statements (so the same GTIDs, server_id and offsets), rows of another value."""
    run_sql(stack, None, *SCHEMA)
    for i in range(1, 6):
        run_sql(stack, None, f"INSERT INTO {DB}.t VALUES ({i}, '{value}{i}')")


async def test_a_bootstrap_only_checkpoint_is_not_followed_on_another_server(tmp_path: Path) -> None:
    a, b = LocalStack(tmp_path / "a"), LocalStack(tmp_path / "b")
    try:
        ia = a.up()
        _same_history(a, "x")
        # the mirror copies the tables and sees no transaction: its checkpoint is the bootstrap's
        rep = Replicator(mirror_settings(a, DB, PREFIX))
        task = asyncio.create_task(rep.run())
        try:
            await _equal(rep, ia.redis_url, a)
        finally:
            await stop_replicator(rep, task)
        stored = _stored(ia.redis_url).checkpoint
        assert stored.mark is not None and not stored.ends_transaction  # its file's FORMAT_DESCRIPTION
        assert stored.position.pos == int(run_sql(a, None, "SHOW MASTER STATUS")[0][1])

        # a rebuilt server (started later): same GTIDs, server_id and offsets, other rows
        b.up()
        _same_history(b, "y")
        for stack in (a, b):
            run_sql(stack, None, f"UPDATE {DB}.t SET v = CONCAT(v, '!') WHERE id = 1")
        assert run_sql(a, None, "SELECT @@gtid_binlog_pos") == run_sql(b, None, "SELECT @@gtid_binlog_pos")
        assert run_sql(a, None, "SHOW MASTER STATUS")[0][:2] == run_sql(b, None, "SHOW MASTER STATUS")[0][:2]

        again = Replicator(mirror_settings(b, DB, PREFIX, redis=ia.redis_url))
        with pytest.raises(HistoryMismatch) as err:
            await asyncio.wait_for(again.run(), 60)
        message = str(err.value)
        assert f"the stored checkpoint {stored.position} belongs to another history" in message
        assert "FORMAT_DESCRIPTION at 4" in message
        assert again.status().state == State.FAILED
        assert _stored(ia.redis_url).checkpoint.position == stored.position  # nothing written
        assert actual(ia.redis_url, PREFIX, DB, ("t",)) != expected(b, DB, KEYS)
    finally:
        b.down()
        a.down()


async def test_a_redis_cluster_mirror_stops_at_a_failover_instead_of_following_it(tmp_path: Path) -> None:
    """Its slot groups order transactions by binlog position (service/sink/cluster.py), which the
    new server's binlog does not continue: following it could skip transactions silently."""
    with _pair(tmp_path, redis_cluster=True) as (primary, replica, info):
        async with Proxy(info.mysql_port) as proxy:
            url = proxy.url("mirror", info.repl_password)
            rep = Replicator(mirror_settings(primary, DB, PREFIX, mysql=url))
            task = asyncio.create_task(rep.run())
            try:
                await until("streaming", lambda: rep.status().state == State.STREAMING, 60)
                run_sql(primary, None, f"INSERT INTO {DB}.t VALUES (50, 'c')")
                await until("a transaction applied", lambda: rep.status().transactions_applied > 0, 60)
                wait_replica(replica, primary)
                primary.stop_mysql(kill=True)  # it dies
                promote(replica)
                proxy.switch(_port(replica))
                run_sql(replica, None, f"INSERT INTO {DB}.t VALUES (51, 'd')")
                with pytest.raises(HistoryMismatch) as err:
                    await asyncio.wait_for(task, 60)
                message = str(err.value)
                assert "the source is another server (server_id=2 domain=0)" in message
                assert "does not follow a source failover" in message and rep.status().failovers == 0
            finally:
                await stop_replicator(rep, task)
