"""Replay of real binlog files (written by the local MariaDB) into Parquet with Spark."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from service.batch.changes import pyarrow_writes
from service.batch.replay import binlog_paths, replay_to_parquet
from service.batch.replay_local import replay_locally
from service.binlog.canonical import row_to_json
from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.transactions import TableFilter
from tests.integration.mirror_helpers import unique_names

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]


def _sql(stack: LocalStack, *statements: str) -> list[tuple[Any, ...]]:
    conn = stack.root_connection()
    try:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
            conn.commit()
            return list(cur.fetchall())
    finally:
        conn.close()


def _closed_binlogs(stack: LocalStack) -> list[Path]:
    """The stack's binlog files, the current one closed first (FLUSH BINARY LOGS)."""
    _sql(stack, "FLUSH BINARY LOGS")
    base = Path(str(_sql(stack, "SELECT @@log_bin_basename")[0][0]))
    names = [str(r[0]) for r in _sql(stack, "SHOW BINARY LOGS")][:-1]  # the new, open one is left out
    return [base.parent / n for n in names]


def _workload(stack: LocalStack, db: str) -> None:
    _sql(
        stack,
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT NULL, "
        "price DECIMAL(10,2), at DATETIME(3) NULL, raw VARBINARY(4) NULL)",
        f"CREATE TABLE {db}.other (id INT PRIMARY KEY)",
    )
    for start in range(0, 300, 50):
        values = ", ".join(
            f"({i}, 'n{i}', {i % 7 if i % 5 else 'NULL'}, {i}.25, "
            f"'2024-01-02 03:04:{i % 60:02d}.5', x'0a{i % 256:02x}')"
            for i in range(start, start + 50)
        )
        _sql(stack, f"INSERT INTO {db}.items VALUES {values}", f"INSERT INTO {db}.other VALUES ({start})")
        if start == 150:
            _sql(stack, "FLUSH BINARY LOGS")  # the changes span two files
    _sql(
        stack,
        f"UPDATE {db}.items SET qty = qty + 1, name = CONCAT(name, 'ü') WHERE id % 3 = 0",
        f"UPDATE {db}.items SET id = id + 1000 WHERE id < 10",  # primary-key changes
        f"DELETE FROM {db}.items WHERE id BETWEEN 100 AND 119",
    )


def test_replay_to_parquet_rebuilds_the_table(stack: LocalStack, spark: Any, tmp_path: Path) -> None:
    db, _ = unique_names()
    _workload(stack, db)
    files = _closed_binlogs(stack)
    out = str(tmp_path / "changes")
    summary = replay_to_parquet(
        spark, binlog_paths(map(str, files)), out, TableFilter((f"{db}.items",)), canonical=True
    )
    assert summary.files == len(files)
    assert set(summary.by_table) == {(db, "items")}  # the filter kept one table

    changes = spark.read.parquet(f"{out}/changes/{db}/items").orderBy("seq").collect()
    assert {c["file"] for c in changes} >= {files[-1].name, files[-2].name}
    state: dict[int, dict[str, Any]] = {}
    for c in changes:  # replay the log in `seq` order, from the canonical JSON columns
        if c["before_json"] is not None:
            state.pop(orjson.loads(c["before_json"])["id"])
        if c["after_json"] is not None:
            after = orjson.loads(c["after_json"])
            state[after["id"]] = after
    conn = stack.root_connection(db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM items")
        rows = {r["id"]: row_to_json(r) for r in cur.fetchall()}
    conn.close()
    assert state == rows
    ops = {op: sum(1 for c in changes if c["op"] == op) for op in ("insert", "update", "delete")}
    assert ops == {"insert": 300, "update": 100 + 10, "delete": 20}
    typed = {c["key"]["id"]: c["after"] for c in changes if c["after"] is not None}
    assert typed[1003]["price"] == Decimal("3.25") and typed[1003]["raw"] == bytearray(b"\x0a\x03")


@pytest.mark.timeout(900)  # three CLI runs, one starting a JVM, on 2 shared cores
def test_replay_cli_names_the_corrupt_file_and_offset(stack: LocalStack, tmp_path: Path) -> None:
    """One error line (no JVM stack), from a worker process (a local master: no JVM) and from a
    Spark task alike (a path only Hadoop writes: viewfs://, Spark); a failed job leaves no output
    behind, so the same command on good input then succeeds (no Spark PATH_ALREADY_EXISTS)."""
    good = _closed_binlogs(stack)[-2:]
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    for f in good:
        shutil.copy(f, bad_dir / f.name)
    bad = bad_dir / good[-1].name
    with bad.open("r+b") as fh:
        fh.truncate(bad.stat().st_size - 7)  # the last event loses its tail
    (tmp_path / "mounted").mkdir()
    viewfs = f"spark.hadoop.fs.viewfs.mounttable.replaycli.link./logs=file://{tmp_path / 'mounted'}"
    spark_env = {"PYSPARK_SUBMIT_ARGS": f"--conf {viewfs} pyspark-shell"}
    for out, master, env in (
        (tmp_path / "o", "local[2]", {}),  # two files: the scan and the decode in worker processes
        ("viewfs://replaycli/logs/o", "local[1]", spark_env),
    ):
        proc = _cli("replay", str(bad_dir), "--out", str(out), "--master", master, env=env)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert proc.stdout.strip().endswith(str(bool(env))), proc.stdout[-200:]  # pyspark: Spark only
        assert "TruncatedEvent" in proc.stderr and bad.name in proc.stderr and "offset" in proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "TruncatedEvent" in errors[0], proc.stderr[-2000:]
        assert "\tat org.apache" not in proc.stderr, proc.stderr[-3000:]  # no JVM stack
        details = Path(errors[0].rsplit("(details: ", 1)[1].rstrip(")"))
        assert "Traceback" in details.read_text() and "TruncatedEvent" in details.read_text()  # all of it
        details.unlink()
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.__tmp__").exists()
    assert not list((tmp_path / "mounted").iterdir())

    again = _cli("replay", *map(str, good), "--out", str(tmp_path / "o"), "--master", "local[2]")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "rows/s" in again.stderr and (tmp_path / "o" / "_replay.json").exists()
    assert again.stdout.strip().endswith("False")  # no JVM: pyspark not even imported


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own; its last stdout line says whether it imported pyspark."""
    probe = (  # typer's standalone mode exits: report at exit
        "import atexit, sys; from service.cli import app;"
        " atexit.register(lambda: print('pyspark' in sys.modules)); app(prog_name='binlog-mirror')"
    )
    return subprocess.run(
        [sys.executable, "-c", probe, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
        env={**os.environ, **(env or {})},
    )


def test_binlog_paths(stack: LocalStack, tmp_path: Path) -> None:
    files = _closed_binlogs(stack)
    (tmp_path / "mysql-bin.000002").write_bytes(b"")
    (tmp_path / "mysql-bin.000001").write_bytes(b"")
    (tmp_path / "mysql-bin.index").write_bytes(b"")
    with pytest.raises(ConfigError, match="no binlog files"):
        binlog_paths([str(tmp_path / "nothing-*")])
    numbered = tmp_path / "numbered"
    numbered.mkdir()
    for f in (files[-1], files[0]):
        shutil.copy(f, numbered / f.name)
    (numbered / "mysql-bin.index").write_text("not a binlog")  # skipped: no binlog magic
    assert [Path(p).name for p in binlog_paths([str(numbered)])] == [files[0].name, files[-1].name]

    # names without a numeric suffix: ordered by when each file was opened (its first event)
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(files[0], plain / "zzz-oldest")  # the stack's first file, opened at its start
    shutil.copy(files[-1], plain / "aaa-newest")
    (plain / "notes.txt").write_text("skipped")
    assert [Path(p).name for p in binlog_paths([str(plain)])] == ["zzz-oldest", "aaa-newest"]


def _rows(spark: Any, path: str) -> list[dict[str, Any]]:
    """A dataset's rows in `seq` order, without `seq` (a split file's seqs carry the range index)."""
    rows = spark.read.parquet(path).orderBy("seq").collect()
    return [{k: v for k, v in r.asDict(recursive=True).items() if k != "seq"} for r in rows]


def test_split_file_replay_equals_the_whole_file(stack: LocalStack, spark: Any, tmp_path: Path) -> None:
    """One file cut into ranges at transaction boundaries (each decoded with the file's
    FORMAT_DESCRIPTION and its own TABLE_MAPs, the GTID state handed over by the scan) gives the
    change log of the file decoded whole, row for row; an ALTER inside the file included."""
    db, _ = unique_names()
    _sql(stack, "FLUSH BINARY LOGS")
    _workload(stack, db)
    _sql(stack, f"ALTER TABLE {db}.items ADD COLUMN extra VARCHAR(8) NULL")
    _sql(stack, f"UPDATE {db}.items SET extra = 'x' WHERE id < 30", f"DELETE FROM {db}.other WHERE id < 100")
    files = _closed_binlogs(stack)[-2:]  # the workload's two files (it flushes once)
    wanted = TableFilter((f"{db}.*",))
    whole, split, local = str(tmp_path / "whole"), str(tmp_path / "split"), str(tmp_path / "local")
    a = replay_to_parquet(spark, [str(f) for f in files], whole, wanted, canonical=True)
    b = replay_to_parquet(spark, [str(f) for f in files], split, wanted, canonical=True, split_bytes=2048)
    # no JVM (a local master): the same tasks in 2 worker processes write the same change log
    c = replay_locally([str(f) for f in files], local, wanted, 2, canonical=True, split_bytes=2048)
    assert (c.changes, c.by_table, c.ddl, c.transactions, c.end) == (
        b.changes, b.by_table, b.ddl, b.transactions, b.end
    )  # fmt: skip
    assert Path(local, "_replay.json").read_bytes() == Path(split, "_replay.json").read_bytes()
    for part in (f"changes/{db}/items", f"changes/{db}/other", "ddl", "transactions"):
        got, want = spark.read.parquet(f"{local}/{part}"), spark.read.parquet(f"{split}/{part}")
        assert got.schema == want.schema, part
        assert got.orderBy("seq").collect() == want.orderBy("seq").collect(), part  # seq too
    meta_a = orjson.loads(Path(whole, "_replay.json").read_bytes())
    meta_b = orjson.loads(Path(split, "_replay.json").read_bytes())
    assert meta_a["ranges"] == len(files) and meta_b["ranges"] > 2 * len(files)
    assert (a.changes, a.by_table, a.ddl, a.transactions, a.end) == (
        b.changes, b.by_table, b.ddl, b.transactions, b.end
    )  # fmt: skip
    assert a.changes == 300 + 100 + 10 + 20 + 6 + 20 + 2
    for t in meta_a["tables"]:  # `since` is a seq: compared through the rows below
        t.pop("since")
    for t in meta_b["tables"]:
        t.pop("since")
    assert meta_a["tables"] == meta_b["tables"] and meta_a["end"] == meta_b["end"]
    for part in (f"changes/{db}/items", f"changes/{db}/other", "ddl", "transactions"):
        assert _rows(spark, f"{whole}/{part}") == _rows(spark, f"{split}/{part}"), part
    # the GTID state handed over at each cut: every transaction's executed set, as decoded whole
    assert all(r["gtid_set"] for r in _rows(spark, f"{split}/transactions"))


def test_replay_to_a_hadoop_only_path_equals_the_pyarrow_written_log(
    stack: LocalStack, spark: Any, tmp_path: Path
) -> None:
    """`--out` on a Hadoop filesystem pyarrow cannot write (here viewfs://, a mount table onto a
    local directory; s3a:// and abfs:// take the same path): Spark writes the tasks' batches, and
    the change log is the one the tasks write with pyarrow, row for row, with the same schema;
    an output with no rows (the last file holds no DDL) is an empty dataset there too."""
    db, _ = unique_names()
    _sql(stack, "FLUSH BINARY LOGS")
    _workload(stack, db)
    files = [str(f) for f in _closed_binlogs(stack)[-2:]]
    (tmp_path / "mounted").mkdir()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.viewfs.mounttable.replaytest.link./logs", f"file://{tmp_path / 'mounted'}")
    wanted = TableFilter((f"{db}.*",))
    assert not pyarrow_writes("viewfs://replaytest/logs/both")  # the path through Spark
    for name, inputs in (("both", files), ("last", files[-1:])):
        local, hadoop = str(tmp_path / name), f"viewfs://replaytest/logs/{name}"
        a = replay_to_parquet(spark, inputs, local, wanted, canonical=True, split_bytes=4096)
        b = replay_to_parquet(spark, inputs, hadoop, wanted, canonical=True, split_bytes=4096)
        assert (a.changes, a.by_table, a.ddl, a.transactions, a.end) == (
            b.changes, b.by_table, b.ddl, b.transactions, b.end
        )  # fmt: skip
        assert (
            Path(tmp_path, "mounted", name, "_replay.json").read_bytes()
            == Path(local, "_replay.json").read_bytes()
        )
        for part in (f"changes/{db}/items", f"changes/{db}/other", "ddl", "transactions"):
            assert (
                spark.read.parquet(f"{hadoop}/{part}").schema == spark.read.parquet(f"{local}/{part}").schema
            )
            assert _rows(spark, f"{local}/{part}") == _rows(spark, f"{hadoop}/{part}"), part
    assert a.ddl == 0 and a.changes > 0  # the last file: no DDL, an empty `ddl` dataset
    assert sorted(p.name for p in (tmp_path / "mounted").iterdir()) == ["both", "last"]  # no staging left
