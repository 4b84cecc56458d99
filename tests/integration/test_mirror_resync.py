"""A resync racing DDL on the real servers: a copy paused between reading a chunk from MariaDB and
writing it to Redis, while a TRUNCATE / DROP / RENAME / second ALTER of the table is applied. The
late chunk must be refused (its generation is gone), and the mirror must end equal to SELECT *."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from tests.integration.mirror_helpers import (
    actual,
    expected,
    master_position,
    mirror_settings,
    root,
    settle,
    stop_replicator,
    table_keys,
    unique_names,
    wait_hooks,
)

pytestmark = pytest.mark.integration

ROWS = 120
DDL = {
    "truncate": ["TRUNCATE TABLE big", "INSERT INTO big VALUES (1001, 'after'), (1002, 'after')"],
    "drop": ["DROP TABLE big"],
    "rename": ["RENAME TABLE big TO big2", "UPDATE big2 SET v = 'moved' WHERE id = 100"],
    "alter": ["ALTER TABLE big ADD COLUMN extra INT NOT NULL DEFAULT 7", "DELETE FROM big WHERE id = 90"],
}
LEFT = {"truncate": "big", "drop": None, "rename": "big2", "alter": "big"}  # the table mirrored after


def _sql(stack: LocalStack, db: str, statements: Sequence[str], rows: Sequence[tuple[Any, ...]] = ()) -> None:
    conn = root(stack, db)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            if rows:
                cur.executemany("INSERT INTO big VALUES (%s, %s)", rows)
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("ddl", list(DDL))
async def test_ddl_applied_while_a_resync_chunk_is_in_flight(stack: LocalStack, ddl: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    _sql(stack, "mysql", [f"CREATE DATABASE {db}"])
    rows = [(i, f"v{i}") for i in range(1, ROWS + 1)]
    _sql(stack, db, ["CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(20))"], rows)
    rep = Replicator(mirror_settings(stack, db, prefix, resync_chunk_rows=10))

    # The first start copies `big` (a resync). The script call writing its third chunk is held
    # after the SELECT, as if on its way to Redis: the copy task may be cancelled meanwhile, the
    # write still lands.
    real = rep.mirror.resyncs.rows_script
    calls = 0
    paused, gate = asyncio.Event(), asyncio.Event()
    late: list[asyncio.Task[Any]] = []

    async def write_later(**kwargs: Any) -> Any:
        await gate.wait()
        return await real(**kwargs)

    async def held(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            late.append(asyncio.ensure_future(write_later(**kwargs)))
            paused.set()
            return await asyncio.shield(late[0])
        return await real(**kwargs)

    rep.mirror.resyncs.rows_script = held  # type: ignore[assignment]
    task = asyncio.create_task(rep.run())
    try:
        await asyncio.wait_for(paused.wait(), 30)
        _sql(stack, db, DDL[ddl])
        await settle(rep, stack)  # the DDL applied, the copy it restarted (if any) finished
        gate.set()
        assert await late[0] == -1  # refused: read before the DDL, its generation is gone
        await settle(rep, stack)
        left = LEFT[ddl]
        kept = {left: ("id",)} if left else {}
        mirrored = actual(info.redis_url, prefix, db, tuple(kept))
        assert mirrored == expected(stack, db, kept)
        assert await rep.mirror.mirrored_tables() == {f"{db}:{t}" for t in kept}
        if ddl in ("drop", "rename"):
            assert table_keys(info.redis_url, prefix, db, "big") == []  # no orphan rows
        if ddl == "truncate":  # no row of the held chunk came back
            assert set(mirrored["big"]) == {"1001", "1002"}
        if ddl == "alter":  # every row has the new shape
            assert len(mirrored["big"]) == ROWS - 1
            assert {row[b"extra"] for row in mirrored["big"].values()} == {b"7"}
        if ddl == "rename":  # the copy went on under the new name
            assert len(mirrored["big2"]) == ROWS and mirrored["big2"]["100"][b"v"] == b"moved"
    finally:
        gate.set()
        await stop_replicator(rep, task)


async def test_the_status_shows_a_settle_window_until_the_stream_passes_it(stack: LocalStack) -> None:
    """A finished copy leaves the table's settle window (docs/mirror.md, "DDL resync") in the
    status, at the source's end of binlog when the copy ended; the next transaction past it ends it."""
    db, prefix = unique_names()
    _sql(stack, "mysql", [f"CREATE DATABASE {db}"])
    _sql(stack, db, ["CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(20))"], [(1, "a"), (2, "b")])
    rep = Replicator(mirror_settings(stack, db, prefix))
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)  # the first start copied `big`
        (big,) = [t for t in rep.status().tables if t.table == "big"]
        assert big.settle_until is not None and not master_position(stack) < big.settle_until
        _sql(stack, db, ["UPDATE big SET v = 'c' WHERE id = 1"])
        await wait_hooks(rep, master_position(stack))
        (big,) = [t for t in rep.status().tables if t.table == "big"]
        assert big.settle_until is None
    finally:
        await stop_replicator(rep, task)
