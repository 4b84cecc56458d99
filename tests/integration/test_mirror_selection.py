"""The table selection changing between restarts (`Replicator._bootstrap`, docs/mirror.md): a table
that joins is copied and then kept in sync; a table that leaves has all its keys removed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from service.devtools.stack import LocalStack, StackInfo
from service.pipeline.replicator import Replicator
from tests.integration.mirror_helpers import (
    actual,
    expected,
    mirror_settings,
    root,
    settle,
    stop_replicator,
    table_keys,
    unique_names,
)

pytestmark = pytest.mark.integration

KEYS = {"a": ("id",), "b": ("id",)}


class Writer:
    """Inserts and updates rows of `a` and `b` (autocommit: one transaction per statement)."""

    def __init__(self, stack: LocalStack, db: str) -> None:
        self.conn = root(stack, db)
        self.conn.autocommit(True)
        self.next = 0

    def step(self, n: int = 5) -> None:
        with self.conn.cursor() as cur:
            for _ in range(n):
                self.next += 1
                for t in ("a", "b"):
                    cur.execute(f"INSERT INTO {t} VALUES (%s, %s)", (self.next, f"{t}{self.next}"))
                    cur.execute(f"UPDATE {t} SET v = CONCAT(v, '+') WHERE id = %s", (self.next // 2 or 1,))
            cur.execute("DELETE FROM b WHERE id = %s", (self.next - 1,))


@contextlib.asynccontextmanager
async def running(
    stack: LocalStack, db: str, prefix: str, tables: list[str], **settings: object
) -> AsyncIterator[Replicator]:
    rep = Replicator(mirror_settings(stack, db, prefix, tables=tables, **settings))
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        yield rep
    finally:
        await stop_replicator(rep, task)


async def rename_cut_short(rep: Replicator, stack: LocalStack, db: str, statement: str, calls: int) -> None:
    """Run `statement` (a RENAME) on the source; the mirror dies after `calls` script calls of it,
    as if the process were killed there."""
    channel = rep.mirror.chain.channel
    real, sent = channel.send, [0]

    async def dies(args: object) -> None:
        sent[0] += 1
        if sent[0] > calls:
            raise ConnectionError("the process was killed")
        await real(args)  # type: ignore[arg-type]

    channel.send = dies  # type: ignore[method-assign]
    with root(stack, db) as c, c.cursor() as cur:
        cur.execute(statement)
    deadline = asyncio.get_running_loop().time() + 20
    while sent[0] <= calls and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)


def new_db(stack: LocalStack, rows: int = 0) -> tuple[StackInfo, str, str]:
    """A new database with tables a and b of `rows` rows each, and a key prefix for it."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for t in KEYS:
            cur.execute(f"CREATE TABLE {db}.{t} (id INT PRIMARY KEY, v VARCHAR(200))")
            if rows:
                values = ",".join(f"({i}, '{t}{i}')" for i in range(rows))
                cur.execute(f"INSERT INTO {db}.{t} VALUES {values}")
    conn.commit()
    conn.close()
    return info, db, prefix


async def test_table_selection_changes_between_restarts(stack: LocalStack) -> None:
    info, db, prefix = new_db(stack)
    w = Writer(stack, db)
    w.step()
    try:
        # 1. only `a`: copied, then streamed; nothing of `b`
        async with running(stack, db, prefix, [f"{db}.a"]) as rep:
            w.step()
            await settle(rep, stack)
            assert actual(info.redis_url, prefix, db, ("a",)) == expected(stack, db, {"a": ("id",)})
            assert table_keys(info.redis_url, prefix, db, "b") == []
            assert await rep.mirror.mirrored_tables() == {f"{db}:a"}
        w.step()  # while stopped: the restart streams these for `a` (and `b`, now selected)

        # 2. `a` and `b`: `b` joins, is copied (rows from before it was selected too) and stays in sync
        async with running(stack, db, prefix, [f"{db}.a", f"{db}.b"]) as rep:
            assert actual(info.redis_url, prefix, db, ("a", "b")) == expected(stack, db, KEYS)
            w.step()
            await settle(rep, stack)
            assert actual(info.redis_url, prefix, db, ("a", "b")) == expected(stack, db, KEYS)
            assert await rep.mirror.mirrored_tables() == {f"{db}:a", f"{db}:b"}
        w.step()

        # 3. only `b`: `a` left the selection, so all its keys are removed; `b` stays in sync
        async with running(stack, db, prefix, [f"{db}.b"]) as rep:
            assert table_keys(info.redis_url, prefix, db, "a") == []
            w.step()
            await settle(rep, stack)
            assert actual(info.redis_url, prefix, db, ("b",)) == expected(stack, db, {"b": ("id",)})
            assert table_keys(info.redis_url, prefix, db, "a") == []
            assert await rep.mirror.mirrored_tables() == {f"{db}:b"}
    finally:
        w.conn.close()


async def test_a_rename_cut_short_then_neither_name_selected_leaves_no_rows(stack: LocalStack) -> None:
    """`RENAME TABLE a TO x` dies part way through moving a's rows to x (table_step_rows=2); the
    restart selects neither name. The statement then has no table work; the session start drops
    both a (registered) and x (its rows came from the cut-short move, as `__tableops` records)."""
    info, db, prefix = new_db(stack, rows=10)
    async with running(stack, db, prefix, [f"{db}.a", f"{db}.x"], table_step_rows=2) as rep:
        assert len(table_keys(info.redis_url, prefix, db, "a")) == 11  # 10 rows and __keys
        await rename_cut_short(rep, stack, db, "RENAME TABLE a TO x", 3)  # clearing x, 4 of a's rows moved
    assert len([k for k in table_keys(info.redis_url, prefix, db, "x") if not k.endswith("__keys")]) == 4
    async with running(stack, db, prefix, [f"{db}.b"]) as rep:
        assert table_keys(info.redis_url, prefix, db, "a") == []
        assert table_keys(info.redis_url, prefix, db, "x") == []
        assert actual(info.redis_url, prefix, db, ("b",)) == expected(stack, db, {"b": ("id",)})
        assert await rep.mirror.mirrored_tables() == {f"{db}:b"}


async def test_a_table_swap_cut_short_then_restarted_with_the_same_selection_loses_no_row(
    stack: LocalStack,
) -> None:
    """`RENAME TABLE a TO tmp, b TO a, tmp TO b` dies while rows sit under `tmp`, a name the source
    does not have at the restart. It is still selected (`db.*`), so the session start must not
    drop it as "not selected": the replay moves those rows on."""
    info, db, prefix = new_db(stack, rows=6)
    tables = [f"{db}.*"]
    async with running(stack, db, prefix, tables, table_step_rows=2) as rep:
        # clearing tmp, then 4 of a's 6 rows moved to it
        await rename_cut_short(rep, stack, db, "RENAME TABLE a TO tmp, b TO a, tmp TO b", 3)
    assert len([k for k in table_keys(info.redis_url, prefix, db, "tmp") if not k.endswith("__keys")]) == 4
    async with running(stack, db, prefix, tables) as rep:
        assert actual(info.redis_url, prefix, db, ("a", "b")) == expected(stack, db, KEYS)
        assert table_keys(info.redis_url, prefix, db, "tmp") == []
        assert await rep.mirror.mirrored_tables() == {f"{db}:a", f"{db}:b"}
