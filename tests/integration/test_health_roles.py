"""The probes of a real standby: a Replicator on a real redis-server whose writer lease another
instance holds, served over HTTP and websocket. No MariaDB: a standby never connects to the
source, and the takeover at the end shows a leader that cannot reach it (nothing listens there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_sync
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from api.deps import STANDBY_REFUSAL
from api.main import create_app
from api.routes.events import CLOSE_FORBIDDEN, CLOSE_STANDBY
from api.server import ApiServer
from service.pipeline.replicator import Replicator
from service.settings import load_settings
from service.sink.keys import KeyLayout
from tests.integration.mirror_helpers import unique_names

TOKEN = "roles-token"
READ_TOKEN = "roles-read-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
pytestmark = pytest.mark.redis  # one redis-server (redis_url); the source is never reached


def metric(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} not exported")


@contextlib.asynccontextmanager
async def serving(
    redis_url: str, prefix: str, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    values: dict[str, Any] = {
        "mysql": "mysql://mirror:pw@127.0.0.1:9",  # nothing listens: only a leader would connect
        "redis": redis_url,
        "key_prefix": prefix,
        "lease_ttl_seconds": 1.0,
        "api_port": 0,
        "api_token": TOKEN,
    }
    settings = load_settings(None, **{**values, **overrides})
    replicator = Replicator(settings)
    server = ApiServer(create_app(settings, replicator), settings)
    tasks = [asyncio.create_task(server.serve()), asyncio.create_task(replicator.run())]
    try:
        async with asyncio.timeout(15):
            await server.started.wait()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as http:
            yield http, server.port
    finally:
        replicator.stop()
        tasks[0].cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(15):
                    await task


async def until(http: httpx.AsyncClient, path: str, code: int, timeout: float = 15.0) -> httpx.Response:
    async with asyncio.timeout(timeout):
        while (r := await http.get(path)).status_code != code:
            await asyncio.sleep(0.1)
    return r


async def test_a_standby_is_ready_and_takes_over_as_leader(redis_url: str) -> None:
    prefix = unique_names()[1]
    with redis_sync.Redis.from_url(redis_url, decode_responses=True) as r:
        lease = KeyLayout(prefix).lease_key
        r.set(lease, "another-instance", px=60_000)
        async with serving(redis_url, prefix) as (http, port):
            ready = (await until(http, "/health/ready", 200)).json()
            assert ready["role"] == "standby" and ready["reasons"] == []
            leader = await http.get("/health/leader")
            assert leader.status_code == 503 and leader.json()["role"] == "standby"
            # what only the writer can do or see is refused, with the reason
            paused = await http.post("/control/pause", headers=AUTH)
            assert paused.status_code == 409 and paused.json() == {"detail": STANDBY_REFUSAL}
            async with connect(f"ws://127.0.0.1:{port}/ws/events?tables=a.*", additional_headers=AUTH) as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_STANDBY
            metrics = (await http.get("/metrics", headers=AUTH)).text
            assert metric(metrics, "binlog_mirror_ready") == 1
            assert metric(metrics, "binlog_mirror_leader") == 0
            assert metric(metrics, "binlog_mirror_lease_acquisitions_total") == 0

            # the other instance goes away: this one takes the lease within its TTL and is the
            # leader, not Ready while it cannot reach the source
            r.delete(lease)
            assert (await until(http, "/health/leader", 200)).json()["role"] == "leader"
            not_ready = (await until(http, "/health/ready", 503)).json()
            assert not_ready["role"] == "leader"
            assert "binlog stream not connected" in not_ready["reasons"], not_ready
            metrics = (await http.get("/metrics", headers=AUTH)).text
            assert metric(metrics, "binlog_mirror_leader") == 1
            assert metric(metrics, "binlog_mirror_ready") == 0
            assert metric(metrics, "binlog_mirror_lease_acquisitions_total") == 1

            # its sessions fail (no source) and restart under the same lease: no new taking
            async with asyncio.timeout(15):
                while (
                    metric((await http.get("/metrics", headers=AUTH)).text, "binlog_mirror_reconnects_total")
                    < 2
                ):
                    await asyncio.sleep(0.1)
            metrics = (await http.get("/metrics", headers=AUTH)).text
            assert metric(metrics, "binlog_mirror_lease_acquisitions_total") == 1

            # another instance takes the lease: this one is a standby again, then takes it back
            r.set(lease, "another-instance", px=60_000)
            assert (await until(http, "/health/leader", 503)).json()["role"] == "standby"
            assert (await until(http, "/health/ready", 200)).json()["role"] == "standby"
            r.delete(lease)
            await until(http, "/health/leader", 200)
            metrics = (await http.get("/metrics", headers=AUTH)).text
            assert metric(metrics, "binlog_mirror_lease_acquisitions_total") == 2


async def test_a_public_address_without_a_token_serves_health_and_metrics_only(redis_url: str) -> None:
    """The image's default: bound to 0.0.0.0 with no token. A real uvicorn on every address."""
    async with serving(redis_url, unique_names()[1], api_host="0.0.0.0", api_token=None) as (http, port):
        assert (await http.get("/health/live")).status_code == 200
        assert (await http.get("/health/ready")).status_code in (200, 503)  # open either way
        assert (await http.get("/metrics")).status_code == 200
        for path in ("/position", "/lag", "/tables"):
            r = await http.get(path)
            assert r.status_code == 403 and "api_allow_unauthenticated" in r.json()["detail"], path
        assert (await http.post("/control/pause")).status_code == 403
        async with connect(f"ws://127.0.0.1:{port}/ws/events?tables=a.*") as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_FORBIDDEN


def ctl(port: int, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`binlog-mirror ctl` as an operator runs it: its own process, settings from the environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BINLOG_MIRROR_")}
    cmd = [sys.executable, "-m", "service", "ctl", *args, "--api", f"http://127.0.0.1:{port}"]
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(cmd, cwd=root, env={**clean, **env}, capture_output=True, text=True, timeout=60)


async def test_ctl_against_a_standby_with_scoped_tokens(redis_url: str, tmp_path: Path) -> None:
    """ctl pause on a standby fails with the reason; ctl status works with the read token alone
    (from a file) and shows the role; the read token cannot pause."""
    (tmp_path / "read").write_text(READ_TOKEN + "\n")
    prefix = unique_names()[1]
    with redis_sync.Redis.from_url(redis_url) as r:
        r.set(KeyLayout(prefix).lease_key, "another-instance", px=60_000)
        async with serving(redis_url, prefix, api_read_token=READ_TOKEN) as (http, port):
            await until(http, "/health/ready", 200)
            control = {"BINLOG_MIRROR_API_TOKEN": TOKEN}
            paused = await asyncio.to_thread(ctl, port, control, "pause")
            assert paused.returncode == 1 and "409 this instance is a standby" in paused.stderr
            reader = {"BINLOG_MIRROR_API_READ_TOKEN_FILE": str(tmp_path / "read")}
            status = await asyncio.to_thread(ctl, port, reader, "status")
            assert status.returncode == 0, status.stderr
            assert json.loads(status.stdout)["ready"]["role"] == "standby"
            refused = await asyncio.to_thread(ctl, port, {"BINLOG_MIRROR_API_TOKEN": READ_TOKEN}, "pause")
            assert refused.returncode == 1 and "403" in refused.stderr and "may only read" in refused.stderr
