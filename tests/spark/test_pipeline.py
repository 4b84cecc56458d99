"""The Spark pipeline end to end on the local stack: a workload over several rotated binlog files
with an ALTER in the middle -> replay -> compact -> load -> `run` continues -> mirror == source;
then verify finds a corrupted, a missing and an extra key and repairs them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
import redis as redis_sync

from service.batch.compact import compact
from service.batch.compact_arrow import arrow_compact
from service.batch.load import _loaded_columns, _parquet_files, load_mirror, row_values
from service.batch.replay import TableColumns, binlog_paths, replay_to_parquet
from service.batch.resp import pack_batch
from service.batch.verify import verify_mirror
from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.sink.bulk import pack_ops, table_keys
from service.sink.ir import WriteRow
from service.sink.keys import KeyLayout
from service.transactions import TableFilter
from tests.integration.mirror_helpers import (
    actual,
    expected,
    master_position,
    mirror_settings,
    root,
    run_sql,
    stop_replicator,
    unique_names,
    wait_applied,
    wait_hooks,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KEYS = {"items": ("id",), "pairs": ("a", "b"), "altered": ("id",)}
LOADED = {"items": ("id",), "pairs": ("a", "b")}


def _binlogs(stack: LocalStack, since: str) -> list[Path]:
    """The closed binlog files from `since` on (FLUSH BINARY LOGS closes the current one)."""
    run_sql(stack, None, "FLUSH BINARY LOGS")
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute("SELECT @@log_bin_basename")
        base = Path(str(cur.fetchone()[0]))  # type: ignore[index]
        cur.execute("SHOW BINARY LOGS")
        names = [str(r[0]) for r in cur.fetchall()][:-1]
    conn.close()
    return [base.parent / n for n in names if n >= since]


def _current_file(stack: LocalStack) -> str:
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file = str(cur.fetchone()[0])  # type: ignore[index]
    conn.close()
    return file


def _workload(stack: LocalStack, db: str) -> None:
    """Inserts, updates (key changes too) and deletes over 6 binlog files; an ALTER in the middle
    adds, retypes and renames columns and drops one."""
    run_sql(
        stack,
        None,
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT NULL, "
        "price DECIMAL(10,2), at DATETIME(3) NULL, ts TIMESTAMP(6) NULL, raw VARBINARY(8) NULL, "
        "doc JSON NULL, gone INT NULL)",
        f"CREATE TABLE {db}.pairs (a VARCHAR(10), b INT, v VARCHAR(20), PRIMARY KEY (a, b))",
        f"CREATE TABLE {db}.altered (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {db}.altered VALUES (1, 1), (2, 2), (3, 3)",
    )
    for part in range(6):
        start, name = part * 40, "title" if part > 2 else "name"
        values = ", ".join(
            f"({i}, 'n{i}', {i % 7 if i % 5 else 'NULL'}, {i}.25, '2024-01-02 03:04:{i % 60:02d}.5', "
            f"'2024-05-06 07:08:09.{i:06d}', x'0a{i % 256:02x}', '{{\"k\": {i}, \"a\": [1, \"x\"]}}', {i})"
            for i in range(start, start + 40)
        )
        stmts = [
            f"INSERT INTO {db}.items VALUES {values}",
            f"INSERT INTO {db}.pairs VALUES ('p{part}', {part}, 'v'), ('q', {part}, 'w')",
            f"UPDATE {db}.items SET qty = COALESCE(qty, 0) + 1, {name} = CONCAT({name}, 'ü') "
            "WHERE id % 3 = 0",
            f"UPDATE {db}.items SET id = id + 1000 WHERE id BETWEEN {start} AND {start + 2}",
            f"DELETE FROM {db}.items WHERE id BETWEEN {start + 10} AND {start + 13}",
            f"UPDATE {db}.pairs SET b = b + 100 WHERE a = 'q' AND b = {part}",
        ]
        if part == 2:  # the ALTER, between files
            stmts += [
                f"ALTER TABLE {db}.items ADD COLUMN extra VARCHAR(10) NULL, MODIFY qty BIGINT NULL, "
                "CHANGE name title VARCHAR(60), DROP COLUMN gone",
                # rows not written since: the binlog cannot say what the ALTER made of them
                f"ALTER TABLE {db}.altered ADD COLUMN c INT NOT NULL DEFAULT 5",
                f"UPDATE {db}.altered SET v = 20 WHERE id = 2",
            ]
        if part == 3:
            stmts.append(f"DELETE FROM {db}.pairs WHERE a = 'p1'")
        run_sql(stack, None, *stmts, "FLUSH BINARY LOGS")
    # every items row is written after its ALTER: its state is exact
    run_sql(stack, None, f"UPDATE {db}.items SET extra = CONCAT('e', id)")


def _source_rows(stack: LocalStack, db: str, table: str) -> dict[Any, dict[str, Any]]:
    conn = stack.root_connection(db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM {table}")
        rows = list(cur.fetchall())
    conn.close()
    return {tuple(r[c] for c in KEYS[table]): r for r in rows}


@pytest.mark.timeout(900)  # five Spark jobs on 2 shared cores: minutes, not seconds
async def test_replay_compact_load_then_run_continues(stack: LocalStack, spark: Any, tmp_path: Path) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    first = _current_file(stack)
    _workload(stack, db)
    files = _binlogs(stack, first)
    assert len(files) >= 5
    wanted = TableFilter((f"{db}.*",))

    log = str(tmp_path / "log")
    summary = replay_to_parquet(spark, binlog_paths(map(str, files)), log, wanted, canonical=True)
    assert summary.files == len(files) and summary.ddl >= 5
    assert set(summary.by_table) == {(db, "items"), (db, "pairs"), (db, "altered")}
    items = spark.read.parquet(f"{log}/changes/{db}/items")
    names = {f.name for f in items.schema["after"].dataType.fields}
    assert {"name", "title", "extra", "gone", "qty"} <= names  # the union across the ALTER
    types = {f.name: f.dataType.simpleString() for f in items.schema["after"].dataType.fields}
    assert types["qty"] == "bigint" and types["price"] == "decimal(10,2)" and types["raw"] == "binary"
    assert types["at"] == types["ts"] == "timestamp_ntz" and types["doc"] == "string"
    assert items.schema["key"].dataType.simpleString() == "struct<id:bigint>"
    seqs = [r["seq"] for r in items.orderBy("seq").select("seq").collect()]
    assert len(set(seqs)) == len(seqs) and len({s >> 32 for s in seqs}) >= 5  # one order across files
    ddl = spark.read.parquet(f"{log}/ddl").collect()
    assert any("ADD COLUMN extra" in r["sql"] and r["kind"] == "alter" for r in ddl)
    row = items.where("op = 'update' and after.title is not null").first()
    assert row is not None and row["gtid"] and row["commit_ts"] >= row["ts"] > 0
    assert row["key"]["id"] == row["after"]["id"] and row["after"]["title"].endswith("ü")
    assert "title" in row["after_columns"] and "name" not in row["after_columns"]
    assert orjson.loads(items.where("before_json is not null").first()["before_json"])

    state = str(tmp_path / "state")
    compacted = compact(spark, log, state)
    assert compacted.by_table[(db, "items")] == len(_source_rows(stack, db, "items"))
    assert compacted.stale == {f"{db}.items": 0, f"{db}.pairs": 0, f"{db}.altered": 2}

    # compact without a JVM (a local master, `compact_arrow`): the same rows, column for column
    arrow = arrow_compact(log, str(tmp_path / "arrow"))
    assert (arrow.by_table, arrow.stale, arrow.checkpoint) == (
        compacted.by_table, compacted.stale, compacted.checkpoint,
    )  # fmt: skip
    _same_rows(spark, state, str(tmp_path / "arrow"), arrow.by_table)
    txns = spark.read.parquet(f"{log}/transactions").orderBy("seq").collect()
    until = BinlogPosition(txns[len(txns) // 2]["end_file"], int(txns[len(txns) // 2]["end_pos"]))
    jvm = compact(spark, log, str(tmp_path / "until"), until=until)
    arrow = arrow_compact(log, str(tmp_path / "arrow-until"), until=until)
    assert (arrow.by_table, arrow.stale, arrow.checkpoint) == (jvm.by_table, jvm.stale, jvm.checkpoint)
    _same_rows(spark, str(tmp_path / "until"), str(tmp_path / "arrow-until"), arrow.by_table)
    _same_packing(state)

    settings = mirror_settings(stack, db, prefix)
    loaded = await asyncio.to_thread(load_mirror, spark, settings, state)
    assert loaded.left == [(db, "altered")]  # left to the service's copy, as after an ALTER
    assert loaded.rows == compacted.by_table[(db, "items")] + compacted.by_table[(db, "pairs")]
    # the loaded tables equal the source as of the end of the replayed files (no writes since)
    assert _diff(actual(info.redis_url, prefix, db, LOADED), expected(stack, db, LOADED)) == []
    # a state pyarrow cannot read (a Hadoop-only path; here a viewfs mount of it) is read by
    # Spark instead of the tasks: the same keys, byte for byte
    spark.sparkContext._jsc.hadoopConfiguration().set(
        "fs.viewfs.mounttable.loadtest.link./state", f"file://{state}"
    )
    assert _parquet_files("viewfs://loadtest/state") is None
    again = mirror_settings(stack, db, prefix + "v")
    await asyncio.to_thread(load_mirror, spark, again, "viewfs://loadtest/state")
    assert actual(info.redis_url, prefix + "v", db, LOADED) == actual(info.redis_url, prefix, db, LOADED)

    # without Spark (this process writes, a local master): the same keys, byte for byte
    alone = await asyncio.to_thread(
        load_mirror, None, mirror_settings(stack, db, prefix + "a"), str(tmp_path / "arrow")
    )
    assert alone.by_table == loaded.by_table and alone.left == loaded.left
    assert actual(info.redis_url, prefix + "a", db, LOADED) == actual(info.redis_url, prefix, db, LOADED)

    run_sql(  # later writes, streamed by `run` from the loaded checkpoint
        stack,
        None,
        f"INSERT INTO {db}.items (id, title, price) VALUES (5000, 'late', 1.50)",
        f"UPDATE {db}.items SET qty = 99 WHERE id = 1000",
        f"DELETE FROM {db}.items WHERE id = 20",
        f"INSERT INTO {db}.pairs VALUES ('late', 1, 'z')",
    )
    r = redis_sync.Redis.from_url(info.redis_url)
    altered_id = KeyLayout(prefix).table_id(db, "altered")
    assert not r.sismember(f"{prefix}:__tables", altered_id)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        target = master_position(stack)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, target)
        await wait_hooks(rep, target)
        for _ in range(600):  # `altered` was left to the service: it copies it from the source
            if not any(t.resync for t in rep.status().tables) and r.sismember(
                f"{prefix}:__tables", altered_id
            ):
                break
            await asyncio.sleep(0.1)
    finally:
        await stop_replicator(rep, task)
    assert _diff(actual(info.redis_url, prefix, db, KEYS), expected(stack, db, KEYS)) == []

    # verify at scale: a corrupted, a missing and an extra key, found and repaired
    try:
        r.hset(f"{prefix}:{db}:items:1000", "qty", "12345")
        r.delete(f"{prefix}:{db}:items:5000")
        r.hset(f"{prefix}:{db}:items:77777", mapping={"id": "77777"})
        r.sadd(f"{prefix}:{db}:items:__keys", "77777")
        report_dir = str(tmp_path / "verify")
        found = await asyncio.to_thread(verify_mirror, spark, settings, report_dir, chunk_rows=50)
        kinds = sorted((d.kind, d.key.rsplit(":", 1)[1]) for d in found.differences)
        assert kinds == [("differs", "1000"), ("extra", "77777"), ("missing", "5000")]
        report = spark.read.parquet(f"{report_dir}/differences").collect()
        assert sorted((x["kind"], x["key"].rsplit(":", 1)[1]) for x in report) == kinds
        fixed = await asyncio.to_thread(
            verify_mirror, spark, settings, str(tmp_path / "verify2"), chunk_rows=50, repair=True
        )
        assert fixed.repaired == 3
        again = await asyncio.to_thread(verify_mirror, spark, settings, str(tmp_path / "verify3"))
        assert again.differences == []
        assert _diff(actual(info.redis_url, prefix, db, KEYS), expected(stack, db, KEYS)) == []
    finally:
        r.close()


def _diff(got: dict[str, Any], want: dict[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """(table, key, mirror, source) of the first differing rows: readable when it fails."""
    out = []
    for table in sorted(set(got) | set(want)):
        g, w = got.get(table, {}), want.get(table, {})
        for key in sorted(set(g) | set(w)):
            if g.get(key) != w.get(key):
                out.append((table, key, g.get(key), w.get(key)))
    return out[:5]


def _same_rows(spark: Any, jvm: str, arrow: str, tables: Any) -> None:
    """Every table's rows and column types equal in compact's output and arrow_compact's."""
    for schema, table in tables:
        a = spark.read.parquet(f"{jvm}/{schema}/{table}")
        b = spark.read.parquet(f"{arrow}/{schema}/{table}")
        assert a.schema.simpleString() == b.schema.simpleString()
        assert sorted(a.collect()) == sorted(b.collect()), (schema, table)


def _same_packing(state: str) -> None:
    """load's commands built a column at a time (service.batch.resp) = the row packer's, byte for
    byte, on every kind the workload has (NULLs, DECIMAL, DATETIME, TIMESTAMP, bytes, JSON text)."""
    import pyarrow.parquet as pq

    meta = orjson.loads(Path(state, "_compact.json").read_bytes())
    layout = KeyLayout("m")
    for doc in meta["tables"]:
        cols = TableColumns.from_json(doc)
        loaded = _loaded_columns(cols)
        kinds = {n: (k, t) for n, k, t in cols.columns if n in loaded}
        keys = table_keys(layout, cols.schema, cols.table)
        for path in _parquet_files(f"{state}/{cols.schema}/{cols.table}") or []:
            for batch in pq.ParquetFile(path, coerce_int96_timestamp_unit="us").iter_batches(columns=loaded):
                columnar = pack_batch(
                    batch, {n: k for n, (k, _) in kinds.items()}, cols.key, keys.base, keys.index, 7
                )
                rows = [row_values(r, kinds, False) for r in batch.to_pylist()]
                by_row = [
                    pack_ops(
                        [
                            WriteRow(keys, layout.row_suffix([r[c] for c in cols.key]), r)
                            for r in rows[i : i + 7]
                        ],
                        json_mode=False,
                    )
                    for i in range(0, len(rows), 7)
                ]
                assert columnar == by_row, (cols.table, path)
