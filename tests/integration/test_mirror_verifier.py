"""The background verifier (docs/mirror.md): with the service running, a row changed, deleted or
added by hand in Redis is counted in `binlog_mirror_drift_rows_total` and in `/tables`, and with
verify_repair the mirror is fixed while the stream keeps applying."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import redis as redis_sync

from api.main import create_app
from api.server import ApiServer
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.settings import Settings
from service.sink.keys import KeyLayout
from tests.integration.mirror_helpers import (
    actual,
    expected,
    master_position,
    mirror_settings,
    run_sql,
    wait_applied,
)

pytestmark = pytest.mark.integration

TOKEN = "verifier-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEYS = {"a": ("id",)}


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def _service(settings: Settings) -> AsyncIterator[tuple[Replicator, httpx.AsyncClient]]:
    replicator = Replicator(settings)
    app = create_app(settings, replicator)
    server = ApiServer(app, settings)
    tasks = [asyncio.create_task(server.serve()), asyncio.create_task(replicator.run())]
    try:
        async with asyncio.timeout(15):
            await server.started.wait()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as http:

            async def ready() -> bool:
                return (await http.get("/health/ready", headers=AUTH)).status_code == 200

            await _until(ready, "ready")
            yield replicator, http
    finally:
        replicator.stop()
        tasks[0].cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(15):
                    await task


def _drift(metrics: str, table: str) -> dict[str, float]:
    out = {}
    for line in metrics.splitlines():
        if line.startswith("binlog_mirror_drift_rows_total{") and f'table="{table}"' in line:
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            out[kind] = float(line.rpartition(" ")[2])
    return out


@pytest.mark.parametrize("repair", [False, True], ids=["report", "repair"])
async def test_the_background_verifier_counts_and_repairs_drift(stack: LocalStack, repair: bool) -> None:
    tag = uuid.uuid4().hex[:8]
    db, prefix = f"bv_{tag}", f"bv{tag}"
    run_sql(stack, None, f"CREATE DATABASE {db}", f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v VARCHAR(20))")
    run_sql(stack, db, "INSERT INTO a VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1, 51)))
    settings = mirror_settings(
        stack, db, prefix, api_port=0, api_token=TOKEN, verify_rows_per_second=500, verify_repair=repair
    )
    redis_url = settings.redis.url.get_secret_value()  # type: ignore[union-attr]
    r = redis_sync.Redis.from_url(redis_url)
    lay = KeyLayout(prefix)
    base = lay.table_base(db, "a")
    try:
        async with _service(settings) as (rep, http):
            await asyncio.to_thread(wait_applied, redis_url, prefix, master_position(stack))
            want = expected(stack, db, KEYS)

            async def copied() -> bool:  # the first copy runs beside the stream
                equal = await asyncio.to_thread(actual, redis_url, prefix, db, ("a",)) == want
                return equal and rep.status().state.value == "streaming"

            await _until(copied, "the first copy")
            # by hand, behind the mirror's back: a field changed, a row deleted, a row added
            r.hset(f"{base}:1", "v", "tampered")
            r.delete(f"{base}:2")
            r.hset(f"{base}:999", mapping={"id": "999", "v": "ghost"})
            # the stream keeps applying meanwhile
            run_sql(stack, db, "UPDATE a SET v = 'live' WHERE id = 3", "INSERT INTO a VALUES (51, 'v51')")

            async def counted() -> bool:
                text = (await http.get("/metrics", headers=AUTH)).text
                drift = _drift(text, f"{db}.a")
                return all(drift.get(k, 0) >= 1 for k in ("changed", "missing", "extra"))

            await _until(counted, "the drift to be counted")
            tables = (await http.get("/tables", headers=AUTH)).json()["tables"]
            (a,) = [t for t in tables if t["schema"] == db and t["table"] == "a"]
            assert a["verify"]["changed"] >= 1 and a["verify"]["missing"] >= 1 and a["verify"]["extra"] >= 1
            assert a["verify"]["last_verified_time"] is not None
            one = await http.get(f"/tables/{db}/a", headers=AUTH)
            assert one.json()["verify"]["extra"] >= 1

            if repair:
                want = expected(stack, db, KEYS)

                async def fixed() -> bool:
                    return await asyncio.to_thread(actual, redis_url, prefix, db, ("a",)) == want

                await _until(fixed, "the repair")
                one = await http.get(f"/tables/{db}/a", headers=AUTH)
                assert one.json()["verify"]["repaired"] >= 3
                # the stream still applies after the repairs
                run_sql(stack, db, "DELETE FROM a WHERE id = 4")
                await asyncio.to_thread(wait_applied, redis_url, prefix, master_position(stack))
                assert actual(redis_url, prefix, db, ("a",)) == expected(stack, db, KEYS)
                assert rep.status().state.value == "streaming"
            else:
                assert r.hget(f"{base}:1", "v") == b"tampered" and not r.exists(f"{base}:2")
                assert r.exists(f"{base}:999")
    finally:
        r.close()
        run_sql(stack, None, f"DROP DATABASE {db}")
