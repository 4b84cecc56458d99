"""`binlog-mirror verify` on the real stack (issue #24, item 3): equal while the service runs and
rows change; a changed field, a missing key and an extra key found (exit 1, each listed); `--repair`
refused while a running service holds the lease, then (service stopped) rewrites exactly those rows
through the sink, after which verify exits 0; for both value layouts (hash and json)."""

from __future__ import annotations

import asyncio
import threading

import orjson
import pytest
import redis as redis_sync
from typer.testing import CliRunner, Result

from service import verify as verify_module
from service.cli import app
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.sink.keys import KeyLayout
from service.verify import verifier as verifier_module
from service.verify.reading import SourceReader
from tests.integration.mirror_helpers import (
    actual,
    expected,
    mirror_settings,
    root,
    run_sql,
    settle,
    stop_replicator,
    unique_names,
)

pytestmark = pytest.mark.integration

KEYS = {"items": ("id",)}


async def _verify(stack: LocalStack, db: str, prefix: str, mode: str, *extra: str) -> Result:
    info = stack.load()
    assert info is not None
    args = ["verify", "--mysql", info.mysql_url, "--redis", info.redis_url, "--tables", f"{db}.*"]
    args += ["--prefix", prefix, "--value-mode", mode, "--chunk-rows", "7", *extra]
    # typer runs asyncio.run(): off the test's event loop
    return await asyncio.to_thread(CliRunner().invoke, app, args)


def _independent(stack: LocalStack, redis_url: str, db: str, prefix: str, mode: str) -> bool:
    """Redis == MariaDB by the tests' own helpers (not verify's code). Without the TIMESTAMP in
    json mode: `expected` reads it naive, the mirror stores the binlog's UTC form (...Z)."""
    json = mode == "json"
    mirrored = actual(redis_url, prefix, db, tuple(KEYS), json=json)
    want = expected(stack, db, KEYS, json=json)
    if json:
        for rows in (mirrored, want):
            for row in rows["items"].values():
                del row["at"]
    return mirrored == want


def _writer(stack: LocalStack, db: str, stop: threading.Event) -> None:
    conn = root(stack, db)
    try:
        n = 0
        with conn.cursor() as cur:
            while not stop.is_set():
                n += 1
                cur.execute("UPDATE items SET qty = %s WHERE id = %s", (n, 1 + n % 30))
                conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["hash", "json"])
async def test_verify_finds_and_repairs_differences(stack: LocalStack, mode: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    run_sql(stack, "mysql", f"CREATE DATABASE {db}")
    run_sql(
        stack,
        db,
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20), qty INT, raw VARBINARY(8), "
        "at TIMESTAMP(3) NULL)",
        "INSERT INTO items SELECT seq, CONCAT('n', seq), seq, UNHEX(HEX(seq)), '2026-01-02 03:04:05.678' "
        "FROM seq_1_to_30",
    )
    settings = mirror_settings(stack, db, prefix, value_mode=mode)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    lay = KeyLayout(prefix)
    r = redis_sync.Redis.from_url(info.redis_url)
    try:
        await settle(rep, stack)
        # while the service runs and rows keep changing: nothing is reported
        stop = threading.Event()
        writer = threading.Thread(target=_writer, args=(stack, db, stop))
        writer.start()
        try:
            result = await _verify(stack, db, prefix, mode)
        finally:
            stop.set()
            writer.join()
        assert result.exit_code == 0, result.output
        assert "1 tables, 30 rows: equal" in result.output
        # the writer's last updates applied first: one that met the deleted row would write it
        # back whole (the mirror fills in a row an UPDATE finds missing)
        await settle(rep, stack)

        # a changed field, a missing key and an extra key (written behind the mirror's back)
        row5, row7 = lay.row_key(db, "items", [5]), lay.row_key(db, "items", [7])
        if mode == "hash":
            r.hset(row5, "name", "tampered")
        else:
            doc = orjson.loads(r.get(row5) or b"{}")
            r.set(row5, orjson.dumps({**doc, "name": "tampered"}))
        r.delete(row7)
        extra = lay.row_key(db, "items", [999])
        r.hset(extra, "id", "999") if mode == "hash" else r.set(extra, b'{"id":999}')
        result = await _verify(stack, db, prefix, mode)
        assert result.exit_code == 1, result.output
        lines = result.output.splitlines()
        assert f"differs  {row5}  (name)" in lines
        assert f"missing  {row7}" in lines
        assert f"extra    {extra}" in lines
        assert f"{db}.items: 30 rows, 1 differing, 1 missing, 1 extra" in lines

        # --repair needs the writer lease: the running service holds it
        result = await _verify(stack, db, prefix, mode, "--repair")
        assert result.exit_code == 2 and "the writer lease is held" in result.output, result.output
    finally:
        await stop_replicator(rep, task)
    try:
        checkpoint = r.hgetall(lay.checkpoint_key)
        result = await _verify(stack, db, prefix, mode, "--repair")
        assert result.exit_code == 0, result.output
        assert "3 keys differ; 3 repaired" in result.output
        assert r.hgetall(lay.checkpoint_key) == checkpoint  # the repair ends where the mirror was
        result = await _verify(stack, db, prefix, mode)
        assert result.exit_code == 0 and "equal" in result.output, result.output
        assert _independent(stack, info.redis_url, db, prefix, mode)
        assert not r.exists(lay.lease_key)  # released

        # a mirrored table the source does not have: all its keys are extra, and repaired
        gone = lay.row_key(db, "gone", [1])
        r.sadd(lay.tables_key, lay.table_id(db, "gone"))
        r.sadd(lay.index_key(db, "gone"), "1")
        r.hset(gone, "id", "1") if mode == "hash" else r.set(gone, b'{"id":1}')
        result = await _verify(stack, db, prefix, mode)
        assert result.exit_code == 1 and f"extra    {gone}" in result.output.splitlines(), result.output
        result = await _verify(stack, db, prefix, mode, "--repair")
        assert result.exit_code == 0 and "1 repaired" in result.output, result.output
        assert not r.exists(gone, lay.index_key(db, "gone"))
        assert not r.sismember(lay.tables_key, lay.table_id(db, "gone"))

        # the service resumes from the same checkpoint over the repaired rows
        rep = Replicator(settings)
        task = asyncio.create_task(rep.run())
        try:
            run_sql(
                stack,
                db,
                "UPDATE items SET name = 'after' WHERE id IN (5, 7)",
                "DELETE FROM items WHERE id = 6",
            )
            await settle(rep, stack)
        finally:
            await stop_replicator(rep, task)
        assert _independent(stack, info.redis_url, db, prefix, mode)
    finally:
        r.close()


async def test_repair_keeps_the_lease_while_it_reads_the_next_tables(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--repair takes the lease at the first table it repairs and reads on: a slow read of the
    next tables (here 0.8 s a chunk, 8.8 s in all, against a lease of 3 s) must not let it expire."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    run_sql(stack, "mysql", f"CREATE DATABASE {db}")
    run_sql(
        stack,
        db,
        "CREATE TABLE a1 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE b2 (id INT PRIMARY KEY, v INT)",
        "INSERT INTO a1 SELECT seq, seq FROM seq_1_to_3",
        "INSERT INTO b2 SELECT seq, seq FROM seq_1_to_10",
    )
    settings = mirror_settings(stack, db, prefix)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
    finally:
        await stop_replicator(rep, task)
    lay = KeyLayout(prefix)
    r = redis_sync.Redis.from_url(info.redis_url)
    try:
        r.hset(lay.row_key(db, "a1", [1]), "v", "99")
        r.hset(lay.row_key(db, "b2", [10]), "v", "99")
        monkeypatch.setattr(verifier_module, "REPAIR_LEASE_TTL", 3.0)
        slow = SourceReader.select

        async def select(source: SourceReader, sql: str, what: str) -> list[dict[str, object]]:
            if "b2" in sql:
                await asyncio.sleep(0.8)  # a slow source
            return await slow(source, sql, what)

        monkeypatch.setattr(SourceReader, "select", select)
        short = settings.model_copy(update={"lease_ttl_seconds": 3.0})
        report = await verify_module.Verifier(short, chunk_rows=1).run(repair=True)
        assert report.repaired == 2 and len(report.differences) == 2
        assert (await verify_module.Verifier(settings).run()).equal
    finally:
        r.close()
