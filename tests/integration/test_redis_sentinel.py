"""Redis Sentinel (`redis+sentinel://host:port/SERVICE`): a master and a replica (AOF on both) and
one sentinel (quorum 1), real servers. A master failover in the middle of a load is handled like a
Redis restart: the session ends, the next one finds the new master through the sentinel and
resumes from the checkpoint stored there, and the mirror ends equal to MariaDB.

The second test makes the new master lose acknowledged writes (the replica is cut off while the
master applies, then the master is killed): its checkpoint is behind what the mirror applied, and
the mirror replays from it (docs/mirror.md, "Redis Sentinel"), never leaving a hole."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from service.verify import Verifier
from tests.integration.mirror_helpers import (
    Workload,
    actual,
    create_schema,
    expected,
    master_position,
    mirror_settings,
    replicating,
    settle,
    stored_position,
    unique_names,
    until,
    wait_applied,
)
from tests.integration.redis_servers import Server, free_port, servers, start_server

pytestmark = pytest.mark.integration

SERVICE = "mirrorsvc"


@dataclass
class SentinelSetup:
    master: Server
    replica: Server
    sentinel: Server

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{SERVICE}/0"

    def master_port(self) -> int:
        with self.sentinel.client() as s:
            _, port = s.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)


def _replica_known(setup: SentinelSetup) -> bool:
    with setup.sentinel.client(decode_responses=True) as s:
        replicas = s.sentinel_slaves(SERVICE)
    return any(
        r["port"] == setup.replica.port and r["flags"] == "slave" and r["master-link-status"] == "ok"
        for r in replicas
    )


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[SentinelSetup]:
    aof = ["appendonly yes", "appendfsync everysec", 'save ""']
    with servers() as started:
        master = start_server(tmp_path / "master", aof)
        started.append(master)
        replica = start_server(tmp_path / "replica", [*aof, f"replicaof 127.0.0.1 {master.port}"])
        started.append(replica)
        sentinel = start_server(
            tmp_path / "sentinel",
            [
                f"sentinel monitor {SERVICE} 127.0.0.1 {master.port} 1",
                f"sentinel down-after-milliseconds {SERVICE} 1000",
                f"sentinel failover-timeout {SERVICE} 10000",
            ],
            port=free_port(),
            sentinel=True,
        )
        started.append(sentinel)
        setup = SentinelSetup(master, replica, sentinel)
        deadline = time.monotonic() + 30
        while not _replica_known(setup):  # a failover needs the sentinel to know a good replica
            assert time.monotonic() < deadline, "the sentinel did not find the replica"
            time.sleep(0.1)
        yield setup


async def _load(wl: Workload, steps: int, at: int, action: Callable[[], None]) -> None:
    """`steps` source transactions from a thread (the replicator applies meanwhile); `action` runs
    before step `at`."""

    def go() -> None:
        for i in range(steps):
            if i == at:
                action()
            wl.step()
            time.sleep(0.005)

    await asyncio.to_thread(go)


async def test_a_sentinel_failover_mid_load_is_handled_like_a_redis_restart(
    stack: LocalStack, sentinel_setup: SentinelSetup
) -> None:
    setup = sentinel_setup
    db, prefix = unique_names()
    create_schema(stack, db)
    wl = Workload(stack, db, seed=5)
    for _ in range(10):
        wl.step(allow_ddl=False)
    settings = mirror_settings(stack, db, prefix, redis=setup.url)
    assert str(settings.redis) == setup.url

    def failover() -> None:
        with setup.sentinel.client() as s:
            assert s.execute_command("SENTINEL", "FAILOVER", SERVICE)

    async with replicating(settings) as rep:
        await asyncio.to_thread(wait_applied, f"redis://127.0.0.1:{setup.master.port}/0", prefix, None)
        await _load(wl, 150, 50, failover)
        await until("the replica to be the master", lambda: setup.master_port() == setup.replica.port)
        # the failover ends the session (the mirror checks the master every 2 s: an idle one too)
        await until("a session restart", lambda: rep.progress.restarts >= 1)
        new_master = f"redis://127.0.0.1:{setup.replica.port}/0"
        # on the new master: its checkpoint, not the replicator's memory, says what is applied
        await asyncio.to_thread(wait_applied, new_master, prefix, master_position(stack), 60)
        await settle(rep, stack, timeout=60)
        assert actual(new_master, prefix, db) == expected(stack, db)
        report = await Verifier(settings).run()  # verify finds the master through the sentinel too
        assert report.equal, report.differences
    wl.close()


async def test_a_new_master_that_lost_acknowledged_writes_is_replayed_from_its_checkpoint(
    stack: LocalStack, sentinel_setup: SentinelSetup, caplog: pytest.LogCaptureFixture
) -> None:
    setup = sentinel_setup
    db, prefix = unique_names()
    create_schema(stack, db)
    wl = Workload(stack, db, seed=9)
    settings = mirror_settings(stack, db, prefix, redis=setup.url)
    old_url = f"redis://127.0.0.1:{setup.master.port}/0"
    new_url = f"redis://127.0.0.1:{setup.replica.port}/0"
    held: dict[str, BinlogPosition | None] = {}

    async with replicating(settings) as rep:
        await asyncio.to_thread(wait_applied, old_url, prefix, None)
        await until("the replica to hold the checkpoint", lambda: stored_position(new_url, prefix))
        with setup.master.client() as r:  # the replica is cut off: it may not sync again
            r.execute_command("ACL", "SETUSER", "default", "-psync", "-sync")
            r.execute_command("CLIENT", "KILL", "TYPE", "replica")
        await _load(wl, 60, 0, lambda: None)
        await settle(rep, stack)
        held["old"] = stored_position(old_url, prefix)  # acknowledged by the old master
        held["new"] = stored_position(new_url, prefix)  # what the replica holds
        setup.master.stop(kill=True)
        await until("the replica to be the master", lambda: setup.master_port() == setup.replica.port, 60)
        await _load(wl, 40, 0, lambda: None)
        await asyncio.to_thread(wait_applied, new_url, prefix, master_position(stack), 60)
        await settle(rep, stack, timeout=60)
        assert actual(new_url, prefix, db) == expected(stack, db)
    wl.close()
    old, new = held["old"], held["new"]
    assert old is not None and new is not None and new < old, held  # writes were really lost
    said = f"the checkpoint stored in Redis ({new}) is behind the last one applied ({old})"
    assert any(said in r.getMessage() for r in caplog.records)  # and the mirror says so
