"""`binlog-mirror run` as a real process (real uvicorn on a real socket, real stack): SIGTERM
closes websocket subscribers with 1001 only after every applied change was sent to them; logs
are JSON lines (the option given after the subcommand) and carry no token."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as redis_sync
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from service.devtools.stack import LocalStack
from service.sink.keys import KeyLayout

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOKEN = f"s3cret-{uuid.uuid4().hex[:8]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Writer(threading.Thread):
    """Inserts one row per transaction until stopped."""

    def __init__(self, stack: LocalStack, db: str) -> None:
        super().__init__(daemon=True)
        self.stack, self.db = stack, db
        self.stop = threading.Event()
        self.written = 0

    def run(self) -> None:
        conn = self.stack.root_connection(self.db)
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    cur.execute("INSERT INTO t VALUES (%s, %s)", (self.written + 1, self.written))
                    conn.commit()
                    self.written += 1
                    time.sleep(0.002)
        finally:
            conn.close()


async def test_sigterm_sends_every_applied_change_then_1001_and_logs_json_without_the_token(
    stack: LocalStack, tmp_path: Path
) -> None:
    info = stack.load()
    assert info is not None
    tag = uuid.uuid4().hex[:8]
    db, prefix, port = f"ops_{tag}", f"ops{tag}", _free_port()
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    conn.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOG_MIRROR_")}
    env.update(BINLOG_MIRROR_API_TOKEN=TOKEN, BINLOG_MIRROR_HEARTBEAT_SECONDS="1")
    cmd = [sys.executable, "-m", "service", "run", "--mysql", info.mysql_url, "--redis", info.redis_url]
    cmd += ["--tables", f"{db}.*", "--prefix", prefix, "--api-port", str(port), "--log-format", "json"]
    cmd += ["--server-id", str(9000 + int(tag[:4], 16) % 900)]
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    writer = _Writer(stack, db)
    received: list[int] = []
    closed: ConnectionClosed | None = None
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            async with asyncio.timeout(60):
                while True:
                    with_token = {"Authorization": f"Bearer {TOKEN}"}
                    try:
                        # ready also while the first copy of the table runs (state resyncing)
                        if (await http.get("/health/ready", headers=with_token)).status_code == 200:
                            metrics = (await http.get("/metrics", headers=with_token)).text
                            if 'binlog_mirror_state{state="streaming"} 1.0' in metrics:
                                break
                    except httpx.TransportError:
                        pass
                    assert proc.poll() is None, log.read_text()
                    await asyncio.sleep(0.2)
            docs = await http.get("/docs")  # offline: its assets come from this server
            assert docs.status_code == 200 and "https://" not in docs.text
            assert (await http.get("/docs-static/swagger-ui-bundle.js")).status_code == 200
        version = metadata.version("binlog-mirror")
        assert f'binlog_mirror_build_info{{compiled="false",version="{version}"}} 1.0' in metrics or (
            f'binlog_mirror_build_info{{compiled="true",version="{version}"}} 1.0' in metrics
        ), metrics
        assert "\nprocess_resident_memory_bytes " in metrics and "\nprocess_cpu_seconds_total " in metrics
        assert "binlog_mirror_failure_info" not in metrics
        url = f"ws://127.0.0.1:{port}/ws/events?tables={db}.*&token={TOKEN}"
        async with connect(url) as ws:
            hello = orjson.loads(await ws.recv())
            assert hello["type"] == "subscribed"
            writer.start()
            try:
                async with asyncio.timeout(60):
                    while len(received) < 50:  # changes flow
                        message: dict[str, Any] = orjson.loads(await ws.recv())
                        if message["type"] == "change":
                            received.append(message["after"]["id"])
                    proc.send_signal(signal.SIGTERM)  # while the writer keeps writing
                    while True:
                        message = orjson.loads(await ws.recv())
                        if message["type"] == "change":
                            received.append(message["after"]["id"])
            except ConnectionClosed as exc:
                closed = exc
    finally:
        writer.stop.set()
        if writer.is_alive():
            writer.join(10)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert closed is not None and closed.rcvd is not None, "the server did not close the websocket"
    assert closed.rcvd.code == 1001, closed.rcvd
    assert closed.rcvd.reason == "server shutting down"
    # every row the mirror applied before stopping reached the subscriber, in order, once
    r = redis_sync.Redis.from_url(info.redis_url)
    try:
        applied = {int(m) for m in r.smembers(KeyLayout(prefix).index_key(db, "t"))}
    finally:
        r.close()
    assert received == sorted(received) and len(received) == len(set(received))
    assert set(received) == applied, (len(received), len(applied))
    assert len(applied) >= 50
    # logs: JSON lines (the option came after the subcommand), the token nowhere
    assert TOKEN not in text
    records = [orjson.loads(line) for line in text.splitlines() if line.strip()]
    for rec in records:
        assert {"time", "level", "logger", "message"} <= rec.keys(), rec
    accepted = [
        r["message"] for r in records if r["logger"].startswith("uvicorn") and "/ws/events" in r["message"]
    ]
    assert accepted and all("token=***" in m for m in accepted), accepted
    assert any(r["message"].startswith("SIGTERM received") for r in records)


def _ctl(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOG_MIRROR_")}
    env["BINLOG_MIRROR_API_TOKEN"] = TOKEN
    cmd = [sys.executable, "-m", "service", "ctl", *args]
    if args[0] != "clear":
        cmd += ["--api", f"http://127.0.0.1:{port}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def _wait_for(check: Any, what: str, timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_ctl_pause_resume_resync_status_and_clear_against_a_running_mirror(
    stack: LocalStack, tmp_path: Path
) -> None:
    info = stack.load()
    assert info is not None
    tag = uuid.uuid4().hex[:8]
    db, prefix, port = f"ops_{tag}", f"ops{tag}", _free_port()
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 1), (2, 2), (3, 3)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOG_MIRROR_")}
    env.update(BINLOG_MIRROR_API_TOKEN=TOKEN, BINLOG_MIRROR_HEARTBEAT_SECONDS="1")
    cmd = [sys.executable, "-m", "service", "run", "--mysql", info.mysql_url, "--redis", info.redis_url]
    cmd += ["--tables", f"{db}.*", "--prefix", prefix, "--api-port", str(port)]
    cmd += ["--server-id", str(9000 + int(tag[:4], 16) % 900)]
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    r = redis_sync.Redis.from_url(info.redis_url)
    lay = KeyLayout(prefix)

    def rows() -> set[int]:
        return {int(m) for m in r.smembers(lay.index_key(db, "t"))}

    try:
        _wait_for(lambda: _ctl(port, "status").returncode == 0, "ready")
        _wait_for(lambda: rows() == {1, 2, 3}, "the first copy")
        # pause: new rows stay out of Redis, readiness says why; resume: they arrive
        paused = _ctl(port, "pause")
        assert paused.returncode == 0 and orjson.loads(paused.stdout)["paused"] is True, paused.stderr
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {db}.t VALUES (4, 4)")
        status = _ctl(port, "status")
        assert status.returncode == 1  # not ready while paused
        reasons = orjson.loads(status.stdout)["ready"]["reasons"]
        assert any("applying is paused" in reason for reason in reasons), reasons
        time.sleep(2)  # bounded: the paused mirror must not apply the insert meanwhile
        assert rows() == {1, 2, 3}
        assert _ctl(port, "resume").returncode == 0
        _wait_for(lambda: rows() == {1, 2, 3, 4}, "the insert after resume")
        # resync: a row lost from Redis behind the mirror's back comes back
        r.delete(f"{lay.table_base(db, 't')}:2")
        r.srem(lay.index_key(db, "t"), "2")
        resynced = _ctl(port, "resync", f"{db}.t")
        assert resynced.returncode == 0, resynced.stderr
        _wait_for(lambda: rows() == {1, 2, 3, 4}, "the row back after the resync")
        assert r.hgetall(f"{lay.table_base(db, 't')}:2") == {b"id": b"2", b"v": b"2"}
        unknown = _ctl(port, "resync", f"{db}.nope")
        assert unknown.returncode == 1 and f"{db}.nope is not mirrored" in unknown.stderr
        # clear: refused while this writer holds the lease
        refused = _ctl(0, "clear", "--redis", info.redis_url, "--prefix", prefix, "--yes")
        assert refused.returncode == 1 and "a writer holds the lease" in refused.stderr, refused.stderr
        assert rows()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        conn.close()
    try:
        assert proc.returncode == 0, log.read_text()[-3000:]
        cleared = _ctl(0, "clear", "--redis", info.redis_url, "--prefix", prefix, "--yes")
        assert cleared.returncode == 0, cleared.stderr
        assert cleared.stdout.startswith("deleted ") and list(r.scan_iter(match=f"{prefix}:*")) == []
    finally:
        r.close()
