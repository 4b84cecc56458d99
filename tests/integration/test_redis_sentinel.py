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
from service.devtools.stack_tls import ensure_tls_files
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
from tests.integration.test_redis_tls import tls_server_lines

pytestmark = pytest.mark.integration

SERVICE = "mirrorsvc"


@dataclass
class SentinelSetup:
    master: Server
    replica: Server
    sentinel: Server
    tls: dict[str, Path] | None = None  # the redis_tls_* settings when everything speaks TLS

    @property
    def url(self) -> str:
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        return f"{scheme}://127.0.0.1:{self.sentinel.port}/{SERVICE}/0"

    def server_url(self, server: Server) -> str:
        """A plain client's URL of one server (the test's own reads)."""
        if not self.tls:
            return f"redis://127.0.0.1:{server.port}/0"
        files = "&".join(f"{k}={v}" for k, v in server.client_options.items() if k != "ssl")
        return f"rediss://127.0.0.1:{server.port}/0?{files}"

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
def sentinel_setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SentinelSetup]:
    """`request.param` True: TLS everywhere, client certificates required (servers, replication,
    sentinel), the stack's throwaway CA."""
    aof = ["appendonly yes", "appendfsync everysec", 'save ""']
    tls_lines: list[str] = []
    client: dict[str, str] | None = None
    files: dict[str, Path] | None = None
    if getattr(request, "param", False):
        ca, cert, key = ensure_tls_files(tmp_path / "tls")
        tls_lines = [*tls_server_lines(ca, cert, key)[:4], "tls-replication yes"]
        client = {"ssl_ca_certs": str(ca), "ssl_certfile": str(cert), "ssl_keyfile": str(key)}
        files = {"redis_tls_ca_file": ca, "redis_tls_cert_file": cert, "redis_tls_key_file": key}
    with servers() as started:
        master = start_server(tmp_path / "master", [*aof, *tls_lines], tls=client)
        started.append(master)
        replica_lines = [*aof, *tls_lines, f"replicaof 127.0.0.1 {master.port}"]
        replica = start_server(tmp_path / "replica", replica_lines, tls=client)
        started.append(replica)
        sentinel = start_server(
            tmp_path / "sentinel",
            [
                *tls_lines,
                f"sentinel monitor {SERVICE} 127.0.0.1 {master.port} 1",
                f"sentinel down-after-milliseconds {SERVICE} 1000",
                f"sentinel failover-timeout {SERVICE} 10000",
            ],
            port=free_port(),
            sentinel=True,
            tls=client,
        )
        started.append(sentinel)
        setup = SentinelSetup(master, replica, sentinel, files)
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


@pytest.mark.parametrize("sentinel_setup", [False, True], ids=["plain", "tls"], indirect=True)
async def test_a_sentinel_failover_mid_load_is_handled_like_a_redis_restart(
    stack: LocalStack, sentinel_setup: SentinelSetup
) -> None:
    setup = sentinel_setup
    db, prefix = unique_names()
    create_schema(stack, db)
    wl = Workload(stack, db, seed=5)
    for _ in range(10):
        wl.step(allow_ddl=False)
    settings = mirror_settings(stack, db, prefix, redis=setup.url, **(setup.tls or {}))
    assert str(settings.redis) == setup.url

    def failover() -> None:
        with setup.sentinel.client() as s:
            assert s.execute_command("SENTINEL", "FAILOVER", SERVICE)

    async with replicating(settings) as rep:
        await asyncio.to_thread(wait_applied, setup.server_url(setup.master), prefix, None)
        await _load(wl, 150, 50, failover)
        await until("the replica to be the master", lambda: setup.master_port() == setup.replica.port)
        # the failover ends the session (the mirror checks the master every 2 s: an idle one too)
        await until("a session restart", lambda: rep.progress.restarts >= 1)
        new_master = setup.server_url(setup.replica)
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
