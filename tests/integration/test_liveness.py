"""Liveness on real servers (issue 25): connections that go silent without closing, a stop that
must not wait for them, and a session restart that does not wait for the old replica registration.

The source is reached through a loopback TCP proxy (tests/integration/stream_helpers.Proxy) whose
`freeze()` holds every byte of the connections open at that moment, both ways, without closing
them: what a black-holed network path or a NAT that forgot the connection does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from service.cli.run import STOP_GRACE_SECONDS
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from tests.integration.mirror_helpers import actual, expected, mirror_settings, root, unique_names
from tests.integration.stream_helpers import Proxy
from tests.integration.test_api import AUTH, caught_up, running, until

pytestmark = pytest.mark.integration

KEYS = {"t": ("id",)}


def _create(stack: LocalStack, db: str) -> None:
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20))")
    conn.commit()
    conn.close()


async def _sql(stack: LocalStack, db: str, *statements: str) -> None:
    def run() -> None:
        conn = root(stack, db)
        with conn.cursor() as cur:
            for stmt in statements:
                cur.execute(stmt)
        conn.commit()
        conn.close()

    await asyncio.to_thread(run)


def _start_service(stack: LocalStack, db: str, prefix: str, log: Path) -> subprocess.Popen[bytes]:
    info = stack.load()
    assert info is not None
    cmd = [sys.executable, "-m", "service", "run", "--mysql", info.mysql_url, "--redis", info.redis_url]
    cmd += ["--tables", f"{db}.*", "--prefix", prefix, "--no-api", "--server-id", "5917"]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


async def _mirror_equal(stack: LocalStack, redis_url: str, prefix: str, db: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        want = await asyncio.to_thread(expected, stack, db, KEYS)
        try:  # read while a re-copy runs, the keys and the index may be read at different moments
            have = await asyncio.to_thread(actual, redis_url, prefix, db, tuple(KEYS))
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            have = None
        if have == want:
            return
        if time.monotonic() > deadline:
            assert have == want
        await asyncio.sleep(0.2)


async def _stopped_within(rep: Replicator, task: asyncio.Task[None], bound: float) -> float:
    t0 = time.monotonic()
    rep.stop()
    done, _ = await asyncio.wait({task}, timeout=bound)
    took = time.monotonic() - t0
    if not done:
        task.cancel()
        await asyncio.wait({task})
    assert done, f"stop() not honoured within {bound}s"
    task.result()
    return took


async def test_frozen_connections_do_not_wedge_the_mirror(stack: LocalStack) -> None:
    """Every source connection freezes (dump, side, catalog); then writes, an ALTER TABLE ... ADD
    COLUMN ... DEFAULT (a re-copy, which reads the source's position at its end) and deletes. The
    mirror recovers on fresh connections, equals the source, `/lag`'s figure showed the silence,
    and stop() returns promptly while connections are frozen again."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    _create(stack, db)
    async with Proxy(info.mysql_port) as proxy:
        settings = mirror_settings(stack, db, prefix, mysql=proxy.url("mirror", info.repl_password))
        rep = Replicator(settings)
        task = asyncio.create_task(rep.run())
        try:
            await _sql(stack, db, *(f"INSERT INTO t VALUES ({i}, 'a{i}')" for i in range(1, 51)))
            await _mirror_equal(stack, info.redis_url, prefix, db, timeout=30)
            lag_max = 0.0

            async def watch_lag() -> None:
                nonlocal lag_max
                while True:
                    lag_max = max(lag_max, rep.status().lag_seconds or 0.0)
                    await asyncio.sleep(0.05)

            watcher = asyncio.create_task(watch_lag())
            frozen_at = proxy.connections
            proxy.freeze()
            await _sql(stack, db, *(f"INSERT INTO t VALUES ({i}, 'b{i}')" for i in range(51, 151)))
            await _sql(stack, db, "ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 7")
            await _sql(stack, db, "DELETE FROM t WHERE id % 3 = 0", "UPDATE t SET c = id WHERE id < 20")
            await _mirror_equal(stack, info.redis_url, prefix, db, timeout=60)
            watcher.cancel()
            assert proxy.connections > frozen_at  # it recovered on new connections
            # the silence showed in the lag before the stream was given up (2.5 heartbeats)
            assert lag_max >= 2 * settings.heartbeat_seconds
            assert rep.status().state in (State.STREAMING, State.RESYNCING)

            proxy.freeze()  # and a stop with every connection frozen
            took = await _stopped_within(rep, task, bound=20)
            assert took < 15, took
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})


async def test_session_restart_does_not_wait_for_the_old_registration(stack: LocalStack) -> None:
    """A retriable error ends the session (here: Redis drops the mirror's connections). The old
    dump thread stays registered on the source until the server next writes to its socket, which
    made the next session's preflight wait up to 2.5 heartbeats (12.5 s at a 5 s heartbeat). The
    source now ends its dump thread when it closes: the next session streams within a few
    seconds."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    _create(stack, db)
    settings = mirror_settings(stack, db, prefix, heartbeat_seconds=5.0)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    r: Any = redis_sync.Redis.from_url(info.redis_url)
    try:
        await _sql(stack, db, "INSERT INTO t VALUES (1, 'a')")
        await _mirror_equal(stack, info.redis_url, prefix, db, timeout=30)
        assert rep.status().state == State.STREAMING
        restarts = rep.status().reconnects
        t0 = time.monotonic()
        r.client_kill_filter(_type="normal", skipme=True)
        deadline = t0 + 30
        while rep.status().reconnects == restarts and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert rep.status().reconnects > restarts, "the session did not restart"
        while rep.status().state != State.STREAMING and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        took = time.monotonic() - t0
        assert rep.status().state == State.STREAMING
        assert took < 6, f"session restart took {took:.1f}s"
        await _sql(stack, db, "INSERT INTO t VALUES (2, 'b')")
        await _mirror_equal(stack, info.redis_url, prefix, db, timeout=30)
        await _stopped_within(rep, task, bound=20)
    finally:
        r.close()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})


async def test_readiness_follows_a_silent_source_and_a_silent_redis(stack: LocalStack) -> None:
    """/health/ready drops within a few seconds of the source's connections freezing, or of Redis
    freezing (SIGSTOP: it reads and answers nothing), and is back as fast once they answer."""
    info = stack.load()
    assert info is not None and info.redis_pid is not None
    async with (
        Proxy(info.mysql_port) as proxy,
        running(stack, proxy=proxy, heartbeat_seconds=1.0, lease_ttl_seconds=3.0) as run,
    ):
        await run.asql("INSERT INTO a VALUES (1, 'x')")
        await caught_up(run)

        async def ready() -> bool:
            return (await run.http.get("/health/ready", headers=AUTH)).status_code == 200

        async def not_ready() -> bool:
            return not await ready()

        # the source goes silent: the stream's silence shows in /lag, then readiness drops
        proxy.freeze()
        t0 = time.monotonic()
        await until(not_ready, timeout=10, what="not ready after the source froze")
        assert time.monotonic() - t0 < 5
        await until(ready, timeout=15, what="ready again on fresh connections")
        await run.asql("INSERT INTO a VALUES (2, 'y')")
        await caught_up(run)

        os.kill(info.redis_pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            await until(not_ready, timeout=10, what="not ready after Redis froze")
            assert time.monotonic() - t0 < 5
            body = (await run.http.get("/health/ready", headers=AUTH)).json()
            assert any("redis" in r or "writer" in r or "replicator is" in r for r in body["reasons"]), body
        finally:
            os.kill(info.redis_pid, signal.SIGCONT)
        t0 = time.monotonic()
        await until(ready, timeout=20, what="ready again after Redis came back")
        assert time.monotonic() - t0 < 10
        await run.asql("INSERT INTO a VALUES (3, 'z')")
        await caught_up(run)


def test_sigterm_stops_the_service_with_redis_frozen(stack: LocalStack, tmp_path: Path) -> None:
    """`binlog-mirror run` gets SIGTERM while Redis answers nothing: it exits within the
    documented bound (STOP_GRACE_SECONDS, then bounded cleanup), not when Redis comes back."""
    info = stack.load()
    assert info is not None and info.redis_pid is not None
    db, prefix = unique_names()
    _create(stack, db)
    proc = _start_service(stack, db, prefix, tmp_path / "run.log")
    try:
        deadline = time.monotonic() + 60
        r: Any = redis_sync.Redis.from_url(info.redis_url)
        while not r.exists(f"{prefix}:__checkpoint") and time.monotonic() < deadline:
            time.sleep(0.1)
        r.close()
        os.kill(info.redis_pid, signal.SIGSTOP)
        try:
            time.sleep(1)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(STOP_GRACE_SECONDS + 10)
            took = time.monotonic() - t0
        finally:
            os.kill(info.redis_pid, signal.SIGCONT)
        assert took < STOP_GRACE_SECONDS + 10, took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
