"""MINIMAL / NOBLOB row images end to end: real MariaDB (binlog_row_image set per writer session)
-> Replicator -> Redis must equal SELECT *, value for value.

MINIMAL: the before image holds only the key, the after image only the columns the statement set
(an INSERT leaves out columns at their constant defaults). NOBLOB: every column except BLOB/TEXT
columns the statement did not touch."""

from __future__ import annotations

import asyncio

import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.sink.keys import KeyLayout
from tests.integration.mirror_helpers import (
    expected,
    master_position,
    mirror_settings,
    settle,
    stop_replicator,
    unique_names,
    wait_applied,
)

pytestmark = pytest.mark.integration

TABLES = {
    "t": (
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, a INT DEFAULT 5, b VARCHAR(10) DEFAULT 'x''y', "
        "c DECIMAL(6,2) DEFAULT 1.50, n INT NULL, m INT NOT NULL, note TEXT, bl BLOB, "
        "d DATETIME(3) DEFAULT '2020-01-02 03:04:05.123', ts TIMESTAMP NULL DEFAULT '2021-06-07 08:09:10', "
        "s SET('p','q') DEFAULT 'p,q', e DATETIME DEFAULT CURRENT_TIMESTAMP, "
        "k INT NOT NULL DEFAULT 9, kd DATE NOT NULL DEFAULT '2020-02-03')",  # read while t is empty
        ("id",),
    ),
    "pairs": (
        "CREATE TABLE {db}.pairs (a VARCHAR(10) NOT NULL, b INT NOT NULL, v VARCHAR(20) DEFAULT 'dv', "
        "w TEXT, PRIMARY KEY (a, b))",
        ("a", "b"),
    ),
}
KEYS = {table: key for table, (_, key) in TABLES.items()}

WORKLOAD = [
    "INSERT INTO t (id, m) VALUES (1, 10)",  # MINIMAL: only id and m (and e) are logged
    "INSERT INTO t (id, m) VALUES (2, 20)",
    "INSERT INTO t VALUES (3, 1, 'full', 9.99, 4, 30, 'text', x'00ff', '2024-01-02 03:04:05.678', "
    "'2024-05-06 07:08:09', 'q', '2024-01-01 00:00:00', 1, '2024-01-01')",
    "UPDATE t SET a = 7 WHERE id = 1",  # before: the key only; after: a only
    "UPDATE t SET note = 'n1', n = 1 WHERE id = 2",
    "UPDATE t SET note = NULL, n = NULL WHERE id = 2",  # NULL in a partial after image: HDEL
    "UPDATE t SET bl = x'0102' WHERE id = 1",  # NOBLOB: the blob is logged because it changed
    "UPDATE t SET id = 101 WHERE id = 1",  # key change: the row moves, unlogged columns survive
    "UPDATE t SET a = a + 1",  # multi-row
    "DELETE FROM t WHERE id = 2",
    "INSERT INTO pairs (a, b) VALUES ('k', 1), ('k', 2), ('j', 1)",
    "UPDATE pairs SET b = 5 WHERE a = 'k' AND b = 1",  # part of a composite key
    "UPDATE pairs SET v = 'nv', w = 'ww' WHERE a = 'k'",
    "DELETE FROM pairs WHERE a = 'j'",
]


def _actual(redis_url: str, prefix: str, db: str) -> dict[str, dict[str, dict[bytes, bytes]]]:
    r = redis_sync.Redis.from_url(redis_url)
    lay = KeyLayout(prefix)
    try:
        out = {}
        for table in TABLES:
            members = [m.decode() for m in r.smembers(lay.index_key(db, table))]
            out[table] = {m: r.hgetall(f"{lay.table_base(db, table)}:{m}") for m in members}
        return out
    finally:
        r.close()


def _run(stack: LocalStack, db: str, image: str, statements: list[str]) -> None:
    conn = stack.root_connection(db)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION binlog_row_image = '{image}'")
            for sql in statements:
                cur.execute(sql)
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("image", ["MINIMAL", "NOBLOB"])
async def test_partial_row_images_mirror_exactly(stack: LocalStack, image: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for sql, _ in TABLES.values():
            cur.execute(sql.format(db=db))
    conn.close()
    settings = mirror_settings(stack, db, prefix, server_id=3000 + hash((db, image)) % 1000)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    r = redis_sync.Redis.from_url(info.redis_url)

    try:
        # the (empty) tables' bootstrap copy is over: the rows below must come from the stream
        await settle(rep, stack)
        # one statement per transaction, then all of them in one transaction
        for sql in WORKLOAD:
            await asyncio.to_thread(_run, stack, db, image, [sql])
        await asyncio.to_thread(_run, stack, db, image, ["DELETE FROM t", "DELETE FROM pairs"])
        await asyncio.to_thread(_run, stack, db, image, WORKLOAD)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        assert _actual(info.redis_url, prefix, db) == expected(stack, db, KEYS)
        # the rows really came from the stream, through partial images
        t_status = next(t for t in rep.status().tables if t.table == "t")
        assert t_status.inserts == 6 and t_status.updates > 0 and t_status.skipped_rows == 0
    finally:
        await stop_replicator(rep, task)
        r.close()
