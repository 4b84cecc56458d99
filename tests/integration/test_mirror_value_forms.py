"""One value form per place: a row copied by a resync (SELECT) and the same row applied from the
binlog store the same bytes, in hash mode (text forms) and json mode (canonical JSON, the form of
the change log and the websocket)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import redis as redis_sync

from service.binlog.canonical import row_to_json
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.transactions import Transaction
from tests.integration.mirror_helpers import (
    master_position,
    mirror_settings,
    settle,
    stop_replicator,
    unique_names,
    wait_applied,
    wait_hooks,
)

pytestmark = pytest.mark.integration

COLUMNS = (
    "big BIGINT UNSIGNED, d DECIMAL(10,2), f DOUBLE, ts TIMESTAMP(3) NULL, at DATETIME(6) NULL, "
    "day DATE, t TIME(1), b VARBINARY(8), s SET('p','q'), e ENUM('x','y'), txt TEXT, n INT NULL"
)
VALUES = (
    "18446744073709551615, 12.50, 0.1, '2024-05-06 07:08:09.123', '2024-01-02 03:04:05.000006', "
    "'2024-02-29', '-01:02:03.5', x'00ff', 'p,q', 'y', 'ü:\"}', NULL"
)


@pytest.mark.parametrize("mode", ["json", "hash"])
async def test_resync_and_stream_store_the_same_form(stack: LocalStack, mode: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.v (id INT PRIMARY KEY, {COLUMNS})")
        cur.execute("SET time_zone = '+03:00'")  # TIMESTAMP literals are read in the session zone
        cur.execute(f"INSERT INTO {db}.v VALUES (1, {VALUES})")  # before start: copied by resync
    conn.commit()
    settings = mirror_settings(
        stack, db, prefix, server_id=6000 + hash((db, mode)) % 1000, value_mode=mode, changelog_maxlen=1000
    )
    applied: list[Transaction] = []
    rep = Replicator(settings, on_applied=[lambda txn, seq: applied.append(txn)])
    task = asyncio.create_task(rep.run())
    r = redis_sync.Redis.from_url(info.redis_url)

    def row(key: str) -> Any:
        name = f"{prefix}:{db}:v:{key}"
        return orjson.loads(r.get(name)) if mode == "json" else r.hgetall(name)

    try:
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)  # row 1 copied: row 2 below comes from the binlog
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {db}.v VALUES (2, {VALUES})")  # same values, from the binlog
        conn.commit()
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await wait_hooks(rep, master_position(stack))
        copied, streamed = row("1"), row("2")
        if mode == "json":
            copied.pop("id"), streamed.pop("id")
            assert copied == streamed
            assert streamed["big"] == 18446744073709551615 and streamed["d"] == "12.50"
            assert streamed["ts"] == "2024-05-06T04:08:09.123000Z" and streamed["b"] == "AP8="
            # the change log and the hooks (websocket) carry the same canonical form
            (change,) = [c for t in applied for c in t.changes]
            entry = r.xrange(f"{prefix}:__changes")[-1][1]
            assert orjson.loads(entry[b"after"]) == row_to_json(change.after) == {"id": 2, **streamed}
        else:
            copied.pop(b"id"), streamed.pop(b"id")
            assert copied == streamed
            assert streamed[b"ts"] == b"2024-05-06 04:08:09.123000" and streamed[b"b"] == b"\x00\xff"
            assert b"n" not in streamed
    finally:
        await stop_replicator(rep, task)
        r.close()
        conn.close()
