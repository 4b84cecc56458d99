from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from service.devtools.processes import alive
from service.devtools.stack import LocalStack

pytestmark = pytest.mark.integration


def test_stack_reports_source_settings_from_the_server(stack: LocalStack) -> None:
    status = stack.status()
    db = status["mariadb"]
    assert status["running"] is True
    assert db["log_bin"] is True
    assert (db["binlog_format"], db["binlog_row_image"], db["binlog_row_metadata"]) == ("ROW", "FULL", "FULL")
    assert db["binlog_checksum"] == "CRC32"
    assert db["server_id"] == 1
    assert status["redis_server"]["aof_enabled"] is True
    assert status["mysql"].startswith("mysql://mirror:")
    assert status["redis"].startswith("redis://127.0.0.1:")


def test_a_write_appears_in_the_binlog(stack: LocalStack) -> None:
    table = f"t_{uuid.uuid4().hex[:8]}"
    conn = stack.root_connection()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS stack_test")
            cur.execute(f"CREATE TABLE stack_test.{table} (id INT PRIMARY KEY, v VARCHAR(10))")
            cur.execute(f"INSERT INTO stack_test.{table} VALUES (1, 'x')")
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            assert row is not None
            cur.execute(f"SHOW BINLOG EVENTS IN '{row[0]}'")
            events = cur.fetchall()
    finally:
        conn.close()
    types = [e[2] for e in events]
    assert "Table_map" in types and "Write_rows_v1" in types
    assert any(table in e[5] for e in events if e[2] == "Table_map")


def test_replication_user_has_the_needed_grants(stack: LocalStack) -> None:
    import pymysql

    info = stack.load()
    assert info is not None
    conn = pymysql.connect(host="127.0.0.1", port=info.mysql_port, user="mirror", password=info.repl_password)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GRANTS")
            grants = " ".join(r[0] for r in cur.fetchall())
    finally:
        conn.close()
    for privilege in ("REPLICATION SLAVE", "BINLOG MONITOR", "SELECT"):
        assert privilege in grants


def test_cli_up_status_down_leaves_no_process(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "service", "stack"]
    env = {**os.environ, "BINLOG_MIRROR_STACK_DIR": str(tmp_path / "s")}
    up = subprocess.run([*cli, "up"], env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    assert "mysql: mysql://mirror:" in up.stdout
    status = subprocess.run([*cli, "status", "--json"], env=env, capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    parsed = json.loads(status.stdout)
    assert parsed["mariadb"]["binlog_format"] == "ROW" and parsed["redis_server"]["up"]
    info = LocalStack(tmp_path / "s").load()
    assert info is not None
    down = subprocess.run([*cli, "down", "--purge"], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert not alive(info.mysql_pid) and not alive(info.redis_pid)
    assert not (tmp_path / "s").exists()
