"""The pipeline's CLI paths end to end, as a user runs them (one process each, Spark `local[2]`, the
local MariaDB and Redis): `replay --json`, `compact --until`, `load --value-mode json`,
`verify --master`, and `replay --schema` for binlogs logged without column names. A table keyed
only by a unique NOT NULL key (no primary key) goes through replay, compact and load like any."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from tests.integration.mirror_helpers import actual, expected, master_position, run_sql, unique_names

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
KEYS = {"items": ("id",), "uk": ("code", "n")}  # uk: UNIQUE KEY (code, n), no primary key


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "service", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    return proc


def _ok(*args: str) -> subprocess.CompletedProcess[str]:
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _binlog_dir(stack: LocalStack, since: str, into: Path) -> Path:
    """The closed binlog files from `since` on, copied into a directory of their own."""
    run_sql(stack, None, "FLUSH BINARY LOGS")
    base = Path(str(run_sql(stack, None, "SELECT @@log_bin_basename")[0][0]))
    names = [str(r[0]) for r in run_sql(stack, None, "SHOW BINARY LOGS")][:-1]
    into.mkdir()
    for n in names:
        if n >= since:
            (into / n).write_bytes((base.parent / n).read_bytes())
    return into


def _source_json(stack: LocalStack, db: str) -> dict[str, Any]:
    return _utc(expected(stack, db, KEYS, json=True))


def _utc(tables: dict[str, Any]) -> dict[str, Any]:
    """`at` (a TIMESTAMP) as one form on both sides: SELECT gives the UTC wall time, the mirror
    the canonical "...Z" text of the decoded value."""
    for rows in tables.values():
        for row in rows.values():
            if row.get("at"):
                row["at"] = dt.datetime.fromisoformat(row["at"].removesuffix("Z").replace(" ", "T"))
    return tables


@pytest.mark.timeout(1500)  # six CLI runs, each starting a JVM, on 2 shared cores
def test_cli_replay_compact_until_load_json_verify(stack: LocalStack, tmp_path: Path) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    first = master_position(stack).file
    run_sql(
        stack,
        None,
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(20), doc JSON NULL, "
        "at TIMESTAMP(3) NULL, amount DECIMAL(8,2))",
        f"CREATE TABLE {db}.uk (code VARCHAR(8) NOT NULL, n INT NOT NULL, v INT NULL, UNIQUE KEY (code, n))",
    )
    for i in range(0, 60, 10):
        values = ", ".join(
            f"({j}, 'n{j}', '{{\"k\": {j}, \"l\": [1, \"x\"]}}', '2024-05-06 07:08:09.{j:03d}', {j}.5)"
            for j in range(i, i + 10)
        )
        run_sql(
            stack,
            None,
            f"INSERT INTO {db}.items VALUES {values}",
            f"INSERT INTO {db}.uk VALUES ('c{i}', {i}, 1)",
        )
    run_sql(stack, None, "FLUSH BINARY LOGS")  # `until` right after a ROTATE: its end is not compared
    then = _source_json(stack, db)  # the state at `until`
    until = master_position(stack)
    run_sql(
        stack,
        None,
        f"UPDATE {db}.items SET name = CONCAT(name, 'ü'), doc = NULL WHERE id % 4 = 0",
        f"UPDATE {db}.uk SET n = n + 1000, v = 2 WHERE code = 'c10'",  # the key changes
        f"DELETE FROM {db}.items WHERE id BETWEEN 20 AND 24",
        f"DELETE FROM {db}.uk WHERE code = 'c20'",
    )
    binlogs = _binlog_dir(stack, first, tmp_path / "binlogs")
    log, state, state_then = tmp_path / "log", tmp_path / "state", tmp_path / "state-then"

    _ok("replay", str(binlogs), "--out", str(log), "--tables", f"{db}.*", "--json", "--master", "local[2]")
    changes = orjson.loads((log / "_replay.json").read_bytes())
    assert changes["changes"] == 60 + 6 + 15 + 1 + 5 + 1
    assert {t["table"]: t["key"] for t in changes["tables"]} == {"items": ["id"], "uk": ["code", "n"]}

    done = _ok("compact", str(log), "--out", str(state_then), "--until", f"{until.file}:{until.pos}",
               "--master", "local[2]")  # fmt: skip
    meta = orjson.loads((state_then / "_compact.json").read_bytes())
    assert meta["checkpoint"]["file"] == until.file and meta["checkpoint"]["pos"] <= until.pos
    assert meta["rows"] == {f"{db}.items": len(then["items"]), f"{db}.uk": len(then["uk"])}, done.stderr
    bad = _cli("compact", str(log), "--out", str(tmp_path / "x"), "--until", "nope", "--master", "local[1]")
    assert bad.returncode != 0 and "expected FILE:POS" in bad.stderr

    done = _ok("compact", str(log), "--out", str(state), "--master", "local[2]")
    assert "skipped" not in done.stdout, done.stdout  # the unique-keyed table is compacted

    redis = ["--redis", info.redis_url, "--prefix", prefix, "--value-mode", "json"]
    _ok("load", str(state), *redis, "--master", "local[2]")
    # the mirror's keys and json documents are the service's: (code, n) is the unique key's order
    got, want = _utc(actual(info.redis_url, prefix, db, tuple(KEYS), json=True)), _source_json(stack, db)
    assert got == want, [
        (t, k, got[t].get(k), want[t].get(k)) for t in want for k in want[t] if got[t].get(k) != want[t][k]
    ][:3]

    source = ["--mysql", info.mysql_url, "--tables", f"{db}.*", *redis]
    _ok("verify", *source, "--master", "local[2]", "--report", str(tmp_path / "report"))
    r = redis_sync.Redis.from_url(info.redis_url)
    try:
        key = next(k for k in r.scan_iter(match=f"{prefix}:{db}:items:*") if not k.endswith(b"__keys"))
        r.set(key, b'{"id": -1}')
    finally:
        r.close()
    differs = _cli("verify", *source, "--master", "local[2]", "--report", str(tmp_path / "report2"))
    assert differs.returncode == 1, differs.stderr[-3000:]
    summary = orjson.loads((tmp_path / "report2" / "summary.json").read_bytes())
    assert summary["differs"] == 1, summary


@pytest.mark.timeout(900)
def test_cli_replay_schema_names_binlogs_without_names(stack: LocalStack, tmp_path: Path) -> None:
    """binlog_row_metadata=MINIMAL: the binlog has no column names; `replay --schema` takes them
    (and ENUM members) from `schema export`'s file; without it the columns are @1, @2, ..."""
    info = stack.load()
    assert info is not None
    db, _ = unique_names()
    first = master_position(stack).file
    run_sql(stack, None, "SET GLOBAL binlog_row_metadata = 'MINIMAL'")
    try:
        run_sql(
            stack,
            None,
            f"CREATE DATABASE {db}",
            f"CREATE TABLE {db}.t (id INT PRIMARY KEY, label VARCHAR(10), state ENUM('new','paid'))",
            f"INSERT INTO {db}.t VALUES (1, 'a', 'paid'), (2, 'b', 'new')",
            f"UPDATE {db}.t SET label = 'c' WHERE id = 2",
        )
    finally:
        run_sql(stack, None, "SET GLOBAL binlog_row_metadata = 'FULL'")
    binlogs = _binlog_dir(stack, first, tmp_path / "binlogs")
    schema = tmp_path / "schema.json"
    _ok("schema", "export", "--mysql", info.mysql_url, "--tables", f"{db}.*", "--out", str(schema))

    bare, named = tmp_path / "bare", tmp_path / "named"
    _ok("replay", str(binlogs), "--out", str(bare), "--tables", f"{db}.*", "--master", "local[2]")
    _ok("replay", str(binlogs), "--out", str(named), "--tables", f"{db}.*", "--schema", str(schema),
        "--json", "--master", "local[2]")  # fmt: skip
    columns = {
        out.name: [
            c["name"] for c in orjson.loads((out / "_replay.json").read_bytes())["tables"][0]["columns"]
        ]
        for out in (bare, named)
    }
    assert columns == {"bare": ["@1", "@2", "@3"], "named": ["id", "label", "state"]}
    import pyarrow.parquet as pq

    rows = pq.read_table(named / "changes" / db / "t").sort_by("seq").to_pylist()
    assert [r["op"] for r in rows] == ["insert", "insert", "update"]
    assert rows[0]["after"] == {"id": 1, "label": "a", "state": "paid"}  # the ENUM's member, by name
    assert orjson.loads(rows[2]["after_json"]) == {"id": 2, "label": "c", "state": "new"}
    assert rows[0]["key"] is None  # MINIMAL metadata names no primary key
