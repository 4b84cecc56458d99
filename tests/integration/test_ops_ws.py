"""Websocket and counters tell the truth about Redis: the rows of a table without a usable key are
never written to Redis, so they are not sent on /ws/events nor counted as applied."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from service.devtools.stack import LocalStack
from tests.integration.test_api import AUTH, caught_up, collect_changes, running

pytestmark = pytest.mark.integration


async def test_changes_of_a_table_without_a_key_are_not_sent_nor_counted(stack: LocalStack) -> None:
    async with running(stack) as run:
        await run.asql("CREATE TABLE nokey (v INT)")  # no primary key, no unique NOT NULL key
        await caught_up(run)
        async with await run.ws(f"tables={run.db}.*") as ws:
            assert orjson.loads(await ws.recv())["type"] == "subscribed"
            await run.asql("INSERT INTO nokey VALUES (1), (2)", "INSERT INTO a VALUES (1, 'x')")
            changes, _ = await collect_changes(ws, 1)
            assert [(c["table"], c["op"]) for c in changes] == [("a", "insert")]
            with pytest.raises(TimeoutError):  # nothing else comes: the nokey rows were skipped
                async with asyncio.timeout(1.5):
                    await ws.recv()
        await caught_up(run)
        tables = {t["table"]: t for t in (await run.get("/tables"))["tables"]}
        assert tables["nokey"]["mirrored"] is False
        assert tables["nokey"]["rows_applied"] == {"insert": 0, "update": 0, "delete": 0, "skipped": 2}
        assert tables["a"]["rows_applied"]["insert"] == 1
        position = (await run.http.get("/position", headers=AUTH)).json()
        assert position["rows_applied"] == 1


async def test_resume_older_than_the_buffer_reads_the_change_log(stack: LocalStack) -> None:
    """ws_buffer_events=5, 20 changes later: a resume gets all 20 from the Redis change log (no
    gap), in order, then live changes; without a change log the same resume gets a gap."""
    async with running(stack, changelog_maxlen=1000, ws_buffer_events=5) as run:
        async with await run.ws(f"tables={run.db}.a") as ws:
            assert orjson.loads(await ws.recv())["type"] == "subscribed"
            await run.asql("INSERT INTO a VALUES (0, 'first')")
            (first,), _ = await collect_changes(ws, 1)
        for i in range(1, 21):
            await run.asql(f"INSERT INTO a VALUES ({i}, 'v{i}')")
        await caught_up(run)
        async with await run.ws(f"tables={run.db}.a&after={first['seq']}") as ws:
            hello = orjson.loads(await ws.recv())
            assert hello["type"] == "subscribed" and hello["oldest_seq"] > first["seq"] + 1
            changes, _ = await collect_changes(ws, 20)
            assert [c["after"]["id"] for c in changes] == list(range(1, 21))
            seqs = [c["seq"] for c in changes]
            assert seqs == sorted(seqs) and seqs[0] > first["seq"]
            assert changes[0]["position"] is None and changes[0]["after"] == {"id": 1, "v": "v1"}
            await run.asql("INSERT INTO a VALUES (21, 'live')")
            (live,), _ = await collect_changes(ws, 1)
            assert live["after"]["id"] == 21 and live["seq"] > seqs[-1] and live["position"] is not None


async def test_resume_older_than_the_buffer_without_a_change_log_is_a_gap(stack: LocalStack) -> None:
    async with running(stack, ws_buffer_events=5) as run:
        async with await run.ws(f"tables={run.db}.a") as ws:
            assert orjson.loads(await ws.recv())["type"] == "subscribed"
            await run.asql("INSERT INTO a VALUES (0, 'first')")
            (first,), _ = await collect_changes(ws, 1)
        for i in range(1, 21):
            await run.asql(f"INSERT INTO a VALUES ({i}, 'v{i}')")
        await caught_up(run)
        async with await run.ws(f"tables={run.db}.a&after={first['seq']}") as ws:
            assert orjson.loads(await ws.recv())["type"] == "subscribed"
            assert orjson.loads(await ws.recv())["type"] == "gap"
