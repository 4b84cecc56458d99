"""binlog_row_metadata=MINIMAL: the binlog carries no column names; they come from
information_schema, are refreshed after a DDL, and a column-count mismatch (old events replayed
after an ALTER) never labels a row with shifted names."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pymysql
import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.sink.values import field_value
from service.transactions import Transaction
from tests.integration.mirror_helpers import (
    master_position,
    mirror_settings,
    run_sql,
    stop_replicator,
    wait_applied,
    wait_hooks,
)

pytestmark = pytest.mark.integration

DB, PREFIX = "names", "nm"


def _mirror(redis_url: str) -> dict[str, dict[bytes, bytes]]:
    r = redis_sync.Redis.from_url(redis_url)
    try:
        keys = [m.decode() for m in r.smembers(f"{PREFIX}:{DB}:t:__keys")]
        return {k: r.hgetall(f"{PREFIX}:{DB}:t:{k}") for k in keys}
    finally:
        r.close()


def _source(stack: LocalStack) -> dict[str, dict[bytes, bytes]]:
    conn = stack.root_connection(DB)
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SELECT * FROM t")
            out = {}
            for row in cur.fetchall():
                out[str(row["id"])] = {
                    k.encode(): (fv if isinstance(fv := field_value(v), bytes) else fv.encode())
                    for k, v in row.items()
                    if v is not None
                }
            return out
    finally:
        conn.close()


async def _caught_up(stack: LocalStack, rep: Replicator, redis_url: str) -> None:
    target = master_position(stack)  # less a trailing BINLOG_CHECKPOINT, which no transaction passes
    await asyncio.to_thread(wait_applied, redis_url, PREFIX, target)
    await wait_hooks(rep, target)
    for _ in range(200):
        if not any(t.resync for t in rep.status().tables):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("resync did not finish")


async def test_names_from_information_schema(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    own = LocalStack(tmp_path / "own")  # binlog_row_metadata is a server global
    own.up()
    try:
        info = own.load()
        assert info is not None
        run_sql(own, None, "SET GLOBAL binlog_row_metadata = 'MINIMAL'", "FLUSH BINARY LOGS")
        run_sql(
            own,
            None,
            f"CREATE DATABASE {DB}",
            f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, a VARCHAR(10), b INT)",
        )
        seen: list[Transaction] = []
        rep = Replicator(
            mirror_settings(own, DB, PREFIX, server_id=4242), on_applied=[lambda txn, seq: seen.append(txn)]
        )
        task = asyncio.create_task(rep.run())
        try:
            await _caught_up(own, rep, info.redis_url)
            run_sql(own, None, f"INSERT INTO {DB}.t VALUES (1, 'x', 10), (2, 'y', 20)")
            await _caught_up(own, rep, info.redis_url)
            assert seen[-1].changes[0].after == {"id": 1, "a": "x", "b": 10}  # names, not @1..@3
            # a DDL refreshes the names: the new column is named, an old one renamed
            run_sql(
                own, None, f"ALTER TABLE {DB}.t ADD COLUMN c INT DEFAULT 3 AFTER id, RENAME COLUMN b TO bb"
            )
            run_sql(
                own,
                None,
                f"INSERT INTO {DB}.t (id, a, bb) VALUES (3, 'z', 30)",
                f"UPDATE {DB}.t SET bb = 21 WHERE id = 2",
            )
            await _caught_up(own, rep, info.redis_url)
            assert seen[-1].changes[0].after == {"id": 2, "c": 3, "a": "y", "bb": 21}
            assert _mirror(info.redis_url) == _source(own)
        finally:
            await stop_replicator(rep, task)

        # Mismatch: events written with 4 columns are replayed after an ALTER made it 5.
        run_sql(
            own,
            None,
            f"INSERT INTO {DB}.t (id, a, bb) VALUES (4, 'w', 40)",
            f"DELETE FROM {DB}.t WHERE id = 1",
        )
        run_sql(own, None, f"UPDATE {DB}.t SET a = 'y2' WHERE id = 2")
        run_sql(own, None, f"ALTER TABLE {DB}.t ADD COLUMN d VARCHAR(5) DEFAULT 'dd' FIRST")
        run_sql(own, None, f"INSERT INTO {DB}.t (id, a) VALUES (5, 'v')")
        caplog.set_level(logging.WARNING)
        seen.clear()
        rep = Replicator(
            mirror_settings(own, DB, PREFIX, server_id=4242), on_applied=[lambda txn, seq: seen.append(txn)]
        )
        task = asyncio.create_task(rep.run())
        try:
            await _caught_up(own, rep, info.redis_url)
            old = [c for t in seen for c in t.changes if c.table == "t"][:3]
            # the three pre-ALTER changes keep positional names: never shifted onto the new ones
            assert all(set(c.after or c.before or {}) <= {"@1", "@2", "@3", "@4"} for c in old)
            assert any(
                "the binlog has 4 columns, information_schema now has 5" in r.getMessage()
                for r in caplog.records
            )
            mirrored = _mirror(info.redis_url)
            assert mirrored == _source(own)
            assert not any(k.startswith(b"@") for row in mirrored.values() for k in row)
        finally:
            await stop_replicator(rep, task)
    finally:
        own.down()
