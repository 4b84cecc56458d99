"""The API against a real Replicator: mariadbd -> Replicator -> Redis, served by uvicorn on a port.

HTTP goes through httpx, websockets through the `websockets` client, exactly as a user's would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import hypothesis
import orjson
import pytest
import redis as redis_sync
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from api.main import create_app
from api.server import ApiServer
from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.settings import Settings, load_settings
from service.sink.keys import GENERATION_FIELD, KeyLayout
from service.transport.source import BinlogSource
from tests.integration.stream_helpers import Proxy

pytestmark = pytest.mark.integration

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    schemathesis = pytest.importorskip("schemathesis")  # dev extra

TOKEN = "integration-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Running:
    http: httpx.AsyncClient
    ws_url: str
    db: str
    settings: Settings
    stack: LocalStack

    def sql(self, *statements: str, args: list[tuple[Any, ...]] | None = None) -> None:
        conn = self.stack.root_connection(self.db)
        try:
            with conn.cursor() as cur:
                for i, stmt in enumerate(statements):
                    cur.execute(stmt, args[i] if args else None)
            conn.commit()
        finally:
            conn.close()

    async def asql(self, *statements: str, args: list[tuple[Any, ...]] | None = None) -> None:
        await asyncio.to_thread(self.sql, *statements, args=args)

    async def get(self, path: str) -> Any:
        r = await self.http.get(path, headers=AUTH)
        r.raise_for_status()
        return r.json()

    async def ws(self, query: str = "", **kwargs: Any) -> ClientConnection:
        sep = "&" if query else ""
        return await connect(f"{self.ws_url}?{query}{sep}token={TOKEN}", **kwargs)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0, what: str = "") -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.1)


def master_pos(stack: LocalStack) -> tuple[str, int]:
    conn = stack.root_connection()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None
    return str(row[0]), int(row[1])


async def caught_up(run: Running) -> None:
    file, pos = await asyncio.to_thread(master_pos, run.stack)
    suffix = int(file.rsplit(".", 1)[1])

    async def check() -> bool:
        applied = (await run.get("/position"))["applied"]
        if applied is None or not applied["file"]:  # no file yet: a GTID start, nothing applied
            return False
        return (int(applied["file"].rsplit(".", 1)[1]), applied["pos"]) >= (suffix, pos)

    await until(check, what="applied position to reach the source's")


@contextlib.asynccontextmanager
async def running(
    stack: LocalStack,
    *,
    standalone: bool = False,
    proxy: Proxy | None = None,
    gtid_start: bool = False,
    **overrides: Any,
) -> AsyncIterator[Running]:
    """`gtid_start`: start from the source's GTID position once the tables exist (no checkpoint)."""
    info = stack.load()
    assert info is not None
    tag = uuid.uuid4().hex[:8]
    db = f"api_{tag}"
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"CREATE TABLE {db}.b (id INT PRIMARY KEY, v TEXT)")
        if gtid_start:
            cur.execute("SELECT @@gtid_binlog_pos")
            overrides["start"] = str(cur.fetchone()[0])  # type: ignore[index]
    conn.close()
    mysql = proxy.url("mirror", info.repl_password) if proxy else info.mysql_url
    settings = load_settings(
        None,
        mysql=mysql,
        redis=info.redis_url,
        tables=[f"{db}.*"],
        key_prefix=f"api{tag}",
        server_id=7000 + int(tag[:4], 16) % 1000,
        api_port=0,
        api_token=TOKEN,
        heartbeat_seconds=overrides.pop("heartbeat_seconds", 1.0),
        **overrides,
    )
    replicator = None if standalone else Replicator(settings)
    app = create_app(settings, replicator)
    server = ApiServer(app, settings)
    tasks = [asyncio.create_task(server.serve())]
    if replicator is not None:
        tasks.append(asyncio.create_task(replicator.run()))
    try:
        async with asyncio.timeout(15):
            await server.started.wait()
        base = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            run = Running(http, f"ws://127.0.0.1:{server.port}/ws/events", db, settings, stack)

            async def ready() -> bool:
                r = await http.get("/health/ready", headers=AUTH)
                return r.status_code == 200 and r.json()["state"] == "streaming"

            async def copied() -> bool:
                """The bootstrap's copies of the (empty) tables are over: ready also while they
                run, and rows written meanwhile come through a copy, not as the inserts a test
                counts (a loaded machine's copies ran past the first inserts)."""
                marks = await asyncio.to_thread(_hash_fields, info.redis_url, resyncs)
                tables = [(await http.get(f"/tables/{db}/{t}", headers=AUTH)).json() for t in "ab"]
                return set(marks) <= {GENERATION_FIELD.encode()} and all(t["resync"] is None for t in tables)

            resyncs = KeyLayout(settings.key_prefix).resync_key
            await until(ready, what="ready")
            await until(copied, what="the first copies to end")
            yield run
    finally:
        if replicator is not None:
            replicator.stop()
        tasks[0].cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(15):
                    await task


def _hash_fields(redis_url: str, key: str) -> list[bytes]:
    with redis_sync.Redis.from_url(redis_url) as r:
        fields: list[bytes] = r.hkeys(key)
        return fields


def _samples(text: str) -> dict[str, float]:
    """Prometheus text -> {"name{labels}": value} (labels as the exposition writes them)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def collect(ws: ClientConnection, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while len(out) < n:
            out.append(orjson.loads(await ws.recv()))
    return out


def changes_in(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The `change` objects a message carries: itself, or a batch's `changes`."""
    if message["type"] == "changes":
        changes: list[dict[str, Any]] = message["changes"]
        return changes
    assert message["type"] == "change", message
    return [message]


async def collect_changes(
    ws: ClientConnection, n: int, timeout: float = 20.0
) -> tuple[list[dict[str, Any]], int]:
    """At least `n` changes from `change` or `changes` messages, and how many messages that took."""
    out: list[dict[str, Any]] = []
    messages = 0
    async with asyncio.timeout(timeout):
        while len(out) < n:
            out += changes_in(orjson.loads(await ws.recv()))
            messages += 1
    return out, messages


async def test_standalone_app_position_tables_alter_metrics_and_auth(stack: LocalStack) -> None:
    async with running(stack, standalone=True) as run:
        # unauthorised requests are refused; the probes are open
        assert (await run.http.get("/health/live")).status_code == 200
        assert (await run.http.get("/health/ready")).status_code in (200, 503)
        for path in ("/position", "/lag", "/tables", "/metrics"):
            assert (await run.http.get(path)).status_code == 401
        with pytest.raises(ConnectionClosed) as refused:
            async with connect(run.ws_url + "?tables=x.y") as ws:
                await ws.recv()
        assert refused.value.rcvd is not None and refused.value.rcvd.code == 4401

        before = await run.get("/position")
        assert before["source"]["flavour"] == "mariadb" and before["source"]["server_id"] == 1
        assert before["source"]["url"].startswith("mysql://mirror:***@")
        await run.asql(*(f"INSERT INTO a VALUES ({i}, 'v{i}')" for i in range(5)))
        await caught_up(run)
        after = await run.get("/position")
        assert (after["applied"]["file"], after["applied"]["pos"]) > (
            before["applied"]["file"],
            before["applied"]["pos"],
        ) or after["applied"]["file"] != before["applied"]["file"]
        assert after["last_event_time"] is not None and after["transactions_applied"] >= 1
        # the GTID set received: caught up, it is the applied one, and holds the last GTID
        assert after["received_gtid_set"] == after["applied"]["gtid_set"] != ""
        assert after["received_gtid"] in after["received_gtid_set"].split(",")

        table = await run.get(f"/tables/{run.db}/a")
        assert [c["name"] for c in table["columns"]] == ["id", "v"]
        assert table["primary_key"] == ["id"] and table["rows_applied"]["insert"] == 5
        # table-map state from the stream's TABLE_MAP (binlog_row_metadata=FULL names the columns)
        first_id = table["table_id"]
        assert isinstance(first_id, int) and first_id > 0
        id_col, v_col = table["columns"]
        assert (id_col["type"], id_col["metadata"], id_col["length"]) == ("INT", 0, 10)
        assert (v_col["type"], v_col["metadata"], v_col["length"]) == ("VARCHAR", 80, 20)  # utf8mb4 bytes
        assert {c["name_source"] for c in table["columns"]} == {"binlog"}
        listed = {t["table"]: t for t in (await run.get("/tables"))["tables"]}
        assert listed["a"]["table_id"] == first_id and listed["b"]["table_id"] is None  # no rows yet
        assert (await run.http.get(f"/tables/{run.db}/nope", headers=AUTH)).status_code == 404

        await run.asql("ALTER TABLE a ADD COLUMN w INT NULL", "INSERT INTO a VALUES (9, 'x', 1)")
        await caught_up(run)

        async def altered() -> bool:
            t = await run.get(f"/tables/{run.db}/a")
            return [c["name"] for c in t["columns"]] == ["id", "v", "w"] and t["resync"] is None

        await until(altered, what="ALTER TABLE to show in /tables")
        table = await run.get(f"/tables/{run.db}/a")
        assert table["table_id"] != first_id  # the ALTER gave the table a new TABLE_MAP id
        columns = [(c["name"], c["metadata"], c["name_source"]) for c in table["columns"]]
        assert columns == [("id", 0, "binlog"), ("v", 80, "binlog"), ("w", 0, "binlog")]
        metrics = (await run.http.get("/metrics", headers=AUTH)).text
        assert f'binlog_mirror_rows_applied_total{{op="insert",schema="{run.db}",table="a"}}' in metrics
        assert "binlog_mirror_apply_delay_seconds_count" in metrics
        assert TOKEN not in metrics and "password" not in metrics
        # decoder and source counters, and the apply-latency histogram owned by the pipeline
        values = _samples(metrics)
        assert values['binlog_mirror_events_total{type="WRITE_ROWS_V1"}'] >= 2  # MariaDB writes v1
        assert values['binlog_mirror_events_total{type="XID"}'] >= 2
        assert values['binlog_mirror_events_total{type="QUERY"}'] >= 1
        assert values["binlog_mirror_decode_errors_total"] == 0
        assert values["binlog_mirror_reconnects_total"] == 0
        assert values["binlog_mirror_source_bytes_total"] > 0
        assert 0 <= time.time() - values["binlog_mirror_last_packet_timestamp_seconds"] < 60
        assert values["binlog_mirror_ignorable_events_skipped_total"] == 0
        assert values["binlog_mirror_invalid_text_values_total"] == 0
        # the inserts went as plain commands (a single Redis, hash layout), none sent again
        assert values["binlog_mirror_plain_apply_calls_total"] >= 1
        assert values["binlog_mirror_plain_apply_redone_total"] == 0
        assert values["binlog_mirror_apply_seconds_count"] >= 2  # one per apply call (batch)
        assert (
            values['binlog_mirror_apply_seconds_bucket{le="+Inf"}']
            == values["binlog_mirror_apply_seconds_count"]
        )
        assert values["binlog_mirror_apply_seconds_sum"] > 0


async def test_lag_rises_while_the_stream_is_stalled_and_returns_to_zero(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    async with (
        Proxy(info.mysql_port) as proxy,
        running(stack, proxy=proxy, heartbeat_seconds=0.5, max_lag_seconds=2) as run,
    ):
        await run.asql("INSERT INTO a VALUES (1, 'x')")
        await caught_up(run)

        async def lag_is_zero() -> bool:
            return (await run.get("/lag"))["seconds_behind"] == 0.0

        await until(lag_is_zero, what="lag 0")
        proxy.stalled = True
        await run.asql("INSERT INTO a VALUES (2, 'y')")

        async def lag_high() -> bool:
            lag = await run.get("/lag")
            return lag["seconds_behind"] is not None and lag["seconds_behind"] > 2.5

        await until(lag_high, timeout=20, what="lag to rise")
        assert (await run.get("/lag"))["over_limit"] is True
        not_ready = await run.http.get("/health/ready", headers=AUTH)
        assert not_ready.status_code == 503 and not_ready.json()["reasons"]

        proxy.stalled = False
        proxy.drop()
        await caught_up(run)
        await until(lag_is_zero, timeout=20, what="lag back to 0")
        assert (await run.http.get("/health/ready", headers=AUTH)).status_code == 200
        values = _samples((await run.http.get("/metrics", headers=AUTH)).text)
        assert values["binlog_mirror_reconnects_total"] >= 1  # the dropped connection
        assert values["binlog_mirror_decode_errors_total"] == 0

        async def heartbeats() -> bool:  # the idle source sends one every 0.5 s
            metrics = (await run.http.get("/metrics", headers=AUTH)).text
            return _samples(metrics)["binlog_mirror_source_heartbeats_total"] >= 1

        await until(heartbeats, timeout=10, what="a heartbeat in the metrics")


async def bytes_behind(run: Running, expected: int | None) -> None:
    """Wait for /lag's bytes_behind to be `expected` (it is refreshed every 2 s)."""

    async def check() -> bool:
        return bool((await run.get("/lag"))["bytes_behind"] == expected)

    await until(check, timeout=10, what=f"bytes_behind {expected}")


async def test_bytes_behind_counts_from_the_applied_checkpoint(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    # Redis writes are paused below, lease renewals included: a lease that outlives the pause
    async with running(stack, lease_ttl_seconds=30) as run:
        await run.asql("INSERT INTO a VALUES (1, 'x')")
        await caught_up(run)
        await bytes_behind(run, 0)
        redis = redis_sync.Redis.from_url(info.redis_url)
        try:
            redis.execute_command("CLIENT", "PAUSE", 8000, "WRITE")  # applies wait; reading goes on
            await run.asql("INSERT INTO a VALUES (2, 'y')")
            file, pos = await asyncio.to_thread(master_pos, stack)

            async def received() -> bool:
                p = await run.get("/position")
                return (p["received_file"], p["received_pos"]) == (file, pos)

            await until(received, timeout=5, what="the insert to be received")
            applied = (await run.get("/position"))["applied"]
            assert applied["file"] == file and applied["pos"] < pos  # received, not applied
            await bytes_behind(run, pos - applied["pos"])  # not 0, as a received-based count says
            assert (await run.get("/lag"))["transactions_waiting"] == 1
        finally:
            redis.execute_command("CLIENT", "UNPAUSE")
            redis.close()
        await caught_up(run)
        await bytes_behind(run, 0)


def _set_row_metadata(stack: LocalStack, value: str) -> None:
    conn = stack.root_connection()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL binlog_row_metadata = '{value}'")
    finally:
        conn.close()


def _set_expiry(stack: LocalStack, seconds: int) -> int:
    """Set binlog_expire_logs_seconds; returns the value it had."""
    conn = stack.root_connection()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.binlog_expire_logs_seconds")
            (before,) = cur.fetchone() or (0,)
            cur.execute(f"SET GLOBAL binlog_expire_logs_seconds = {int(seconds)}")
            return int(before)
    finally:
        conn.close()


def _binary_logs(stack: LocalStack) -> list[tuple[str, int]]:
    conn = stack.root_connection()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            return [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    finally:
        conn.close()


async def test_gtid_start_minimal_row_metadata_and_a_purged_file(stack: LocalStack) -> None:
    """A start from a GTID set has no byte position until its first transaction is applied;
    under binlog_row_metadata=MINIMAL the rows' column names come from information_schema."""
    _set_row_metadata(stack, "MINIMAL")  # a server global: restored below
    try:
        async with running(stack, gtid_start=True) as run:
            position = await run.get("/position")
            assert position["applied"]["file"] == "" and position["applied"]["gtid_set"]
            assert position["received_gtid_set"] is None  # nothing received yet
            assert (await run.get("/lag"))["bytes_behind"] is None  # unknown (not 0), refreshed or not
            await run.asql("INSERT INTO a VALUES (1, 'x')")
            await caught_up(run)
            await bytes_behind(run, 0)
            table = await run.get(f"/tables/{run.db}/a")
            assert table["table_id"] is not None
            columns = [(c["name"], c["metadata"], c["name_source"]) for c in table["columns"]]
            assert columns == [("id", 0, "information_schema"), ("v", 80, "information_schema")]

            # a checkpoint in a purged file: every file still on the source counts (a lower bound)
            files = await asyncio.to_thread(_binary_logs, stack)
            base, _, suffix = files[0][0].rpartition(".")
            purged = BinlogPosition(f"{base}.{int(suffix) - 1:0{len(suffix)}d}", 4)
            source = BinlogSource(run.settings)
            try:
                room = await source.binlog_room(purged)
                assert room.bytes_behind == sum(size for _, size in files)
                assert not room.listed and room.retention_left(0.0) == 0.0  # gone: no room at all
                room = await source.binlog_room(BinlogPosition(files[-1][0], files[-1][1]))
                assert room.bytes_behind == 0 and room.listed
                # the expiry: binlog_expire_logs_seconds (a week here), the room is it minus the lag
                before = await asyncio.to_thread(_set_expiry, stack, 604800)
                try:
                    room = await source.binlog_room(BinlogPosition(files[-1][0], files[-1][1]))
                finally:
                    await asyncio.to_thread(_set_expiry, stack, before)
                assert room.expiry_seconds == 604800 and room.retention_left(60.0) == 604740
            finally:
                await source.close()
    finally:
        _set_row_metadata(stack, "FULL")


def _fuzz(base_url: str, db: str) -> None:
    """Schemathesis over the live server's own schema. Runs in a thread: the server is served by
    the test's event loop, and schemathesis calls are blocking."""
    # GET /ws/events documents the websocket: over plain HTTP it always answers 426 (upgrade)
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json").exclude(path="/ws/events")
    # a mirrored table first: its real table-map state must match the documented schema
    table = schema["/tables/{schema}/{table}"]["GET"]
    mirrored = table.Case(path_parameters={"schema": db, "table": "a"})
    mirrored.call_and_validate(base_url=base_url, headers=AUTH)
    for result in schema.get_all_operations():
        operation = result.ok()

        @hypothesis.given(case=operation.as_strategy())
        @hypothesis.settings(
            max_examples=10, deadline=None, database=None, suppress_health_check=list(hypothesis.HealthCheck)
        )
        def no_5xx(case: Any) -> None:
            case.call_and_validate(base_url=base_url, headers=AUTH)

        no_5xx()


async def test_schemathesis_against_the_running_service_finds_no_5xx(stack: LocalStack) -> None:
    async with running(stack) as run:
        await run.asql("INSERT INTO a VALUES (1, 'x')", "INSERT INTO b VALUES (1, 'y')")
        await caught_up(run)
        await asyncio.to_thread(_fuzz, str(run.http.base_url).rstrip("/"), run.db)


async def test_websocket_filters_order_each_once_and_resume(stack: LocalStack) -> None:
    async with running(stack) as run:
        everything = await run.ws(f"tables={run.db}.*")
        only_a = await run.ws(f"tables={run.db}.a&columns=id")
        deletes = await run.ws("", additional_headers=AUTH)  # subscribe by message, token in the header
        await deletes.send(orjson.dumps({"type": "subscribe", "tables": [f"{run.db}.*"], "ops": ["delete"]}))
        resumer = await run.ws(f"tables={run.db}.b")
        hellos = [orjson.loads(await ws.recv()) for ws in (everything, only_a, deletes, resumer)]
        assert all(h["type"] == "subscribed" for h in hellos)
        stream = hellos[3]["stream"]

        # (op, table, id) of every change, in commit order
        expected: list[tuple[str, str, int]] = []
        for i in range(1, 9):
            stmts = [f"INSERT INTO a VALUES ({i}, 'a{i}')", f"INSERT INTO b VALUES ({i}, 'b{i}')"]
            expected += [("insert", "a", i), ("insert", "b", i)]
            if i % 2 == 0:
                stmts.append(f"UPDATE a SET v = 'u{i}' WHERE id = {i}")
                stmts.append(f"DELETE FROM b WHERE id = {i - 1}")
                expected += [("update", "a", i), ("delete", "b", i - 1)]
            await run.asql(*stmts)
            if i == 4:  # the resumer reads what it has and goes away
                first_part = [e for e in expected if e[1] == "b"]
                got = await collect(resumer, len(first_part))
                last_seen = got[-1]["seq"]
                await resumer.close()

        def key(m: dict[str, Any]) -> tuple[str, str, int]:
            row = m["after"] or m["before"]
            return m["op"], m["table"], int(row["id"])

        all_msgs = await collect(everything, len(expected))
        assert [key(m) for m in all_msgs] == expected
        seqs = [m["seq"] for m in all_msgs]
        assert seqs == sorted(set(seqs)) and seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        a_msgs = await collect(only_a, sum(1 for e in expected if e[1] == "a"))
        assert [key(m) for m in a_msgs] == [e for e in expected if e[1] == "a"]
        assert all(set(m["after"]) == {"id"} for m in a_msgs)
        del_msgs = await collect(deletes, sum(1 for e in expected if e[0] == "delete"))
        assert [key(m) for m in del_msgs] == [e for e in expected if e[0] == "delete"]
        # nothing extra arrives for anyone
        for ws in (everything, only_a, deletes):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await ws.recv()
            await ws.close()

        async with await run.ws(f"tables={run.db}.b&after={last_seen}&stream={stream}") as again:
            assert orjson.loads(await again.recv())["type"] == "subscribed"
            rest = [e for e in expected if e[1] == "b"][len(first_part) :]
            resumed = await collect(again, len(rest))
            assert all(m["type"] == "change" for m in resumed)  # no gap: the ring still had them
            assert [key(m) for m in resumed] == rest
            assert resumed[0]["seq"] > last_seen


async def test_batch_messages_carry_the_same_changes_in_fewer_messages_and_resume(stack: LocalStack) -> None:
    async with running(stack) as run:
        single = await run.ws(f"tables={run.db}.*")
        batched = await run.ws(f"tables={run.db}.*&batch=true")
        resumer = await run.ws(f"tables={run.db}.a&columns=id&batch=1")
        hellos = [orjson.loads(await ws.recv()) for ws in (single, batched, resumer)]
        assert [h["batch"] for h in hellos] == [False, True, True]

        await run.asql("INSERT INTO a VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(50)))
        first_part, messages = await collect_changes(resumer, 50)
        assert messages == 1  # one transaction, one message
        await resumer.close()
        for i in range(50, 70):
            await run.asql(f"INSERT INTO a VALUES ({i}, 'v')", f"INSERT INTO b VALUES ({i}, 'w')")

        expected = 50 + 2 * 20
        one_by_one = await collect(single, expected)
        got, messages = await collect_changes(batched, expected)
        assert got == one_by_one  # the same change objects, in the same order
        assert messages <= 1 + 40  # at most one message per transaction (autocommit statements)
        seqs = [c["seq"] for c in got]
        assert seqs == list(range(seqs[0], seqs[0] + expected))
        for ws in (single, batched):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await ws.recv()
            await ws.close()

        after, stream = first_part[-1]["seq"], hellos[2]["stream"]
        query = f"tables={run.db}.a&columns=id&batch=true&after={after}&stream={stream}"
        async with await run.ws(query) as again:
            assert orjson.loads(await again.recv())["type"] == "subscribed"
            rest, _ = await collect_changes(again, 20)  # a gap would fail changes_in
            assert [c["after"] for c in rest] == [{"id": i} for i in range(50, 70)]


def _small_buffer_socket(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def _insert_rows(run: Running, rows: int, payload: int) -> None:
    """One transaction per row on one connection: commit order is id order."""
    conn = run.stack.root_connection(run.db)
    try:
        conn.autocommit(True)
        with conn.cursor() as cur:
            for i in range(rows):
                value = base64.b64encode(os.urandom(payload * 3 // 4)).decode()  # incompressible
                cur.execute("INSERT INTO b VALUES (%s, %s)", (i, value))
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("batch", "pause"),
    [pytest.param(False, 0.05, id="change-messages"), pytest.param(True, 0.5, id="batch-messages")],
)
async def test_a_slow_subscriber_is_cut_with_1013_while_a_fast_one_keeps_going(
    stack: LocalStack, batch: bool, pause: float
) -> None:
    rows, payload = 300, 40_000
    mode = "&batch=true" if batch else ""
    async with running(stack, ws_queue_events=100) as run:
        port = int(run.ws_url.split(":")[2].split("/")[0])
        slow = await connect(
            f"{run.ws_url}?tables={run.db}.b{mode}&token={TOKEN}",
            sock=_small_buffer_socket(port),
            max_queue=1,
            compression=None,
        )
        fast = await run.ws(f"tables={run.db}.b{mode}", compression=None)
        assert orjson.loads(await slow.recv())["type"] == "subscribed"
        assert orjson.loads(await fast.recv())["type"] == "subscribed"

        writer = asyncio.create_task(asyncio.to_thread(_insert_rows, run, rows, payload))
        slow_got: list[int] = []

        async def read_slowly() -> None:
            with contextlib.suppress(ConnectionClosed):
                while True:
                    slow_got.extend(c["seq"] for c in changes_in(orjson.loads(await slow.recv())))
                    if not writer.done():
                        await asyncio.sleep(pause)  # a consumer far slower than the stream

        slow_reader = asyncio.create_task(read_slowly())
        got, _ = await collect_changes(fast, rows, timeout=90)
        await writer
        assert [m["after"]["id"] for m in got] == list(range(rows))

        async with asyncio.timeout(30):
            await slow_reader
        assert slow.close_code == 1013 and "lagging" in (slow.close_reason or "")
        assert len(slow_got) < rows, len(slow_got)
        assert slow_got == sorted(slow_got)  # what it did get was in order, with no duplicates
        metrics = (await run.http.get("/metrics", headers=AUTH)).text
        assert "binlog_mirror_websocket_dropped_subscribers_total 1.0" in metrics
        await fast.close()


async def test_websocket_refuses_bad_filters_and_excluded_tables(stack: LocalStack) -> None:
    async with running(stack, exclude_tables=["secret.*"]) as run:
        cases = [("tables=nodot", 4400), ("tables=secret.keys", 4404), ("ops=upsert", 4400)]
        cases.append((f"tables={run.db}.nope", 4404))  # selected by the pattern, not on the source
        for query, code in cases:
            ws = await run.ws(query)
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == code
        with pytest.raises(InvalidStatus):  # not a websocket endpoint
            await connect(run.ws_url.replace("/ws/events", "/position"))
