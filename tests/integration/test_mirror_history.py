"""The history check (docs/mirror.md): a checkpoint is bound to the event that ends at it, and a
source whose binlog has an event boundary at the stored offset but another event there (a rebuilt
or replaced server) is not followed: the mirror stops with the way out, or, with
on_history_mismatch=recopy, copies the selected tables again from that source."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from service.errors import HistoryMismatch
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.sink.checkpoints import decode_checkpoint
from tests.integration.mirror_helpers import (
    actual,
    expected,
    master_position,
    mirror_settings,
    run_sql,
    stop_replicator,
    wait_applied,
)

pytestmark = pytest.mark.integration

DB, PREFIX = "hist", "hs"
KEYS = {"t": ("id",)}


def _query(stack: LocalStack, sql: str) -> list[Any]:
    conn = stack.root_connection()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def _history(stack: LocalStack, file: str, rows: tuple[str, str]) -> None:
    """The same statements on both servers, in a binlog file of the same name: the events line
    up byte for byte, only the rows (of equal length) and the timestamps differ."""
    while str(_query(stack, "SHOW MASTER STATUS")[0][0]) < file:
        run_sql(stack, None, "FLUSH BINARY LOGS")
    run_sql(stack, None, f"CREATE DATABASE {DB}", f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v CHAR(4))")
    for i, v in enumerate(rows, 1):
        run_sql(stack, None, f"INSERT INTO {DB}.t VALUES ({i}, '{v}')")


def _events(stack: LocalStack, file: str) -> list[tuple[int, int]]:
    """(start, end) of each event in `file`."""
    return [(int(e[1]), int(e[4])) for e in _query(stack, f"SHOW BINLOG EVENTS IN '{file}'")]


def _checkpoint_hash(redis_url: str) -> dict[bytes, bytes]:
    r = redis_sync.Redis.from_url(redis_url)
    try:
        return r.hgetall(f"{PREFIX}:__checkpoint")  # type: ignore[return-value]
    finally:
        r.close()


async def _streaming(rep: Replicator) -> None:
    for _ in range(600):
        if rep.status().state in (State.STREAMING, State.RESYNCING):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not streaming: {rep.status().state}")


async def test_a_checkpoint_from_another_history_stops_the_mirror_or_recopies(tmp_path: Path) -> None:
    a, b = LocalStack(tmp_path / "a"), LocalStack(tmp_path / "b")
    a.up()
    b.up()
    try:
        ia, ib = a.load(), b.load()
        assert ia is not None and ib is not None
        file = max(str(_query(s, "SHOW MASTER STATUS")[0][0]) for s in (a, b))
        _history(a, file, ("aaaa", "bbbb"))

        # the mirror follows server a (its tables copied at the first start, then streamed)
        rep = Replicator(mirror_settings(a, DB, PREFIX))
        task = asyncio.create_task(rep.run())
        try:
            await _streaming(rep)
            run_sql(a, None, f"INSERT INTO {DB}.t VALUES (3, 'cccc')")
            await asyncio.to_thread(wait_applied, ia.redis_url, PREFIX, master_position(a))
            want = expected(a, DB, KEYS)
            for _ in range(300):  # the first copy runs beside the stream
                if rep.status().state == State.STREAMING and actual(ia.redis_url, PREFIX, DB, ("t",)) == want:
                    break
                await asyncio.sleep(0.1)
        finally:
            await stop_replicator(rep, task)
        stored = decode_checkpoint(_checkpoint_hash(ia.redis_url))
        assert stored is not None and stored.checkpoint.mark is not None
        end, mark = stored.checkpoint.position, stored.checkpoint.mark
        assert end.file == file and actual(ia.redis_url, PREFIX, DB, ("t",)) == expected(a, DB, KEYS)

        # server b: another history with an event boundary at the stored offset, ending at it
        await asyncio.sleep(1.1)  # its events' timestamps differ (a rebuilt server writes later)
        _history(b, file, ("xxxx", "yyyy"))
        run_sql(b, None, f"INSERT INTO {DB}.t VALUES (3, 'zzzz')")
        assert (mark.offset, end.pos) in _events(b, file)
        assert (mark.offset, end.pos) in _events(a, file)

        # resumed against b (by GTID: b has the same GTIDs): stops, names the GTID and the way
        # out, writes nothing
        gtid = stored.checkpoint.gtid
        assert gtid and gtid in stored.checkpoint.gtid_set
        again = Replicator(mirror_settings(b, DB, PREFIX, redis=ia.redis_url))
        with pytest.raises(HistoryMismatch) as err:
            await asyncio.wait_for(again.run(), 60)
        message = str(err.value)
        assert f"the stored checkpoint {end} belongs to another history" in message
        assert f"the source's transaction {gtid} is not the one the mirror applied" in message
        assert "--on-history-mismatch recopy" in message
        assert again.status().state == State.FAILED
        after = decode_checkpoint(_checkpoint_hash(ia.redis_url))
        assert after is not None and after.checkpoint.position == end  # nothing was written
        assert actual(ia.redis_url, PREFIX, DB, ("t",)) == expected(a, DB, KEYS)

        # a checkpoint without its GTID (as an older version wrote it) is checked by file and
        # position: the same stop, at the event's offset
        r = redis_sync.Redis.from_url(ia.redis_url)
        try:
            r.hdel(f"{PREFIX}:__checkpoint", "gtid")
        finally:
            r.close()
        again = Replicator(mirror_settings(b, DB, PREFIX, redis=ia.redis_url))
        with pytest.raises(HistoryMismatch) as err:
            await asyncio.wait_for(again.run(), 60)
        message = str(err.value)
        assert f"the stored checkpoint {end} belongs to another history" in message
        assert "--on-history-mismatch recopy" in message and f"at offset {mark.offset}" in message
        after = decode_checkpoint(_checkpoint_hash(ia.redis_url))
        assert after is not None and after.checkpoint.position == end  # nothing was written

        # with on_history_mismatch=recopy: the mirror ends equal to server b, and streams from it
        recopy = Replicator(mirror_settings(b, DB, PREFIX, redis=ia.redis_url, on_history_mismatch="recopy"))
        task = asyncio.create_task(recopy.run())
        try:
            await _streaming(recopy)
            run_sql(b, None, f"INSERT INTO {DB}.t VALUES (4, 'wwww')")
            target = master_position(b)
            await asyncio.to_thread(wait_applied, ia.redis_url, PREFIX, target)
            want = expected(b, DB, KEYS)
            for _ in range(300):  # the copy runs beside the stream
                done = recopy.status().state == State.STREAMING
                if done and actual(ia.redis_url, PREFIX, DB, ("t",)) == want:
                    break
                await asyncio.sleep(0.1)
            assert actual(ia.redis_url, PREFIX, DB, ("t",)) == want
            assert recopy.status().state == State.STREAMING
        finally:
            await stop_replicator(recopy, task)
        final = decode_checkpoint(_checkpoint_hash(ia.redis_url))
        assert final is not None and final.checkpoint.position >= BinlogPosition(target.file, target.pos)
    finally:
        a.down()
        b.down()
