"""Error classes against the real stack: permanent errors at startup stop `binlog-mirror run` with
one line naming the setting; once running they are retried, shown as state `failed`, logged once
a minute; a busy API port stops the process."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import redis as redis_sync
from prometheus_client import CollectorRegistry, generate_latest

from api.main import create_app
from api.metrics import StatusCollector
from api.readiness import readiness
from service.backoff import Backoff
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.settings import load_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BINLOG_MIRROR_")}
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        cwd=ROOT,
        env={**clean, "COLUMNS": "60", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_wrong_mysql_password_stops_run_with_one_line_naming_the_setting(
    stack: LocalStack, tmp_path: Path
) -> None:
    """The password from --mysql-password-file (kept out of argv), and wrong."""
    info = stack.load()
    assert info is not None
    (tmp_path / "pw").write_text(f"wrong-{uuid.uuid4().hex[:6]}\n")
    url = f"mysql://mirror@127.0.0.1:{info.mysql_port}"
    result = _run(
        "run", "--mysql", url, "--mysql-password-file", str(tmp_path / "pw"),
        "--redis", info.redis_url, "--tables", "x.*", "--no-api",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: mysql: Access denied for user 'mirror'"), lines
    assert "(check BINLOG_MIRROR_MYSQL or --mysql)" in lines[0]
    assert "wrong-" not in result.stderr  # the password never prints
    assert "Traceback" not in result.stderr and "retrying" not in result.stderr


def test_wrong_redis_password_stops_run_with_one_line_naming_the_setting(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    user = f"ops{uuid.uuid4().hex[:6]}"
    admin = redis_sync.Redis.from_url(info.redis_url)
    admin.execute_command("ACL", "SETUSER", user, "on", ">right-password", "~*", "+@all")
    try:
        redis = f"redis://{user}:bad-{uuid.uuid4().hex[:6]}@127.0.0.1:{info.redis_port}/0"
        result = _run("run", "--mysql", info.mysql_url, "--redis", redis, "--tables", "x.*", "--no-api")
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()
    assert result.returncode == 1, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: redis: access denied"), result.stderr
    assert "(check BINLOG_MIRROR_REDIS or --redis)" in lines[0]
    assert "bad-" not in result.stderr


def test_busy_api_port_stops_run_with_one_line(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _run(
            "run", "--mysql", info.mysql_url, "--redis", info.redis_url, "--tables", "x.*",
            "--api-port", str(port),
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: api: cannot listen on 127.0.0.1:{port}: "), lines
    assert "BINLOG_MIRROR_API_PORT" in lines[0] and "Errno" not in result.stderr


async def test_a_permanent_error_while_running_is_retried_as_failed_and_logged_once(
    stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    """The user's password changes while streaming: the reconnect is refused (1045); the
    replicator keeps retrying with backoff, reports state `failed` with the reason (status,
    readiness), logs it once, and streams again once the password is right."""
    info = stack.load()
    assert info is not None
    tag = uuid.uuid4().hex[:8]
    user, db = f"ops{tag}", f"ops_{tag}"
    root = stack.root_connection()
    with root.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw1'")
        cur.execute(
            "GRANT REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT, REPLICATION MASTER ADMIN, "
            f"SELECT ON *.* TO '{user}'@'127.0.0.1'"
        )
        cur.execute("SET SESSION sql_log_bin = 1")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    settings = load_settings(
        None,
        mysql=f"mysql://{user}:pw1@127.0.0.1:{info.mysql_port}",
        redis=info.redis_url,
        tables=[f"{db}.*"],
        key_prefix=f"ops{tag}",
        server_id=8000 + int(tag[:4], 16) % 1000,
        heartbeat_seconds=1.0,
    )
    replicator = Replicator(settings, backoff=Backoff(base=0.05, cap=0.2))
    task = asyncio.create_task(replicator.run())

    async def until(state: State, errors: int = 0) -> None:
        async with asyncio.timeout(30):
            while not (replicator.status().state is state and replicator.status().errors.count >= errors):
                await asyncio.sleep(0.05)

    try:
        await until(State.STREAMING)
        caplog.set_level(logging.INFO)
        caplog.clear()
        with root.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"ALTER USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw2'")
            cur.execute(f"SELECT id FROM information_schema.processlist WHERE user = '{user}'")
            for (pid,) in cur.fetchall():
                cur.execute(f"KILL {pid}")
        await until(State.FAILED, errors=4)  # several attempts, all refused
        s = replicator.status()
        assert s.errors.last is not None and "SourceAccessDenied" in s.errors.last
        assert "Access denied for user" in s.errors.last and "pw" not in s.errors.last
        reasons = readiness(s)
        assert "replicator is failed" in reasons
        assert any(r.startswith("failed: SourceAccessDenied") for r in reasons), reasons
        registry = CollectorRegistry()
        registry.register(StatusCollector(replicator.status))
        metrics = generate_latest(registry).decode()
        assert 'binlog_mirror_state{state="failed"} 1.0' in metrics
        assert 'binlog_mirror_failure_info{error="SourceAccessDenied"} 1.0' in metrics
        failed = [r for r in caplog.records if "replication failed" in r.getMessage()]
        assert len(failed) == 1, [r.getMessage() for r in caplog.records]
        assert failed[0].levelno == logging.ERROR
        assert "retrying with backoff" in failed[0].getMessage()
        # the KILL itself is transient (one line); the refused attempts after it log nothing more
        assert len([r for r in caplog.records if "reconnecting in" in r.getMessage()]) <= 1
        assert not [r for r in caplog.records if "retrying in" in r.getMessage()]
        with root.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"ALTER USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw1'")
        await until(State.STREAMING)
    finally:
        replicator.stop()
        async with asyncio.timeout(20):
            await task
        with root.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP USER '{user}'@'127.0.0.1'")
        root.close()


def test_a_failed_preflight_prints_once(stack: LocalStack) -> None:
    """A user without REPLICATION SLAVE connects fine; the preflight refuses it: the error is logged
    once by the replicator (not also by the reader, nor printed again by the CLI), exit 1."""
    info = stack.load()
    assert info is not None
    user = f"ops{uuid.uuid4().hex[:8]}"
    root = stack.root_connection()
    with root.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT SELECT ON *.* TO '{user}'@'127.0.0.1'")
    try:
        url = f"mysql://{user}:pw@127.0.0.1:{info.mysql_port}"
        result = _run("run", "--mysql", url, "--redis", info.redis_url, "--tables", "x.*", "--no-api")
    finally:
        with root.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP USER '{user}'@'127.0.0.1'")
        root.close()
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("the source cannot be mirrored:") == 1, result.stderr
    assert result.stderr.count("missing privilege REPLICATION SLAVE") == 1, result.stderr
    assert "Traceback" not in result.stderr


async def test_a_tables_pattern_matching_nothing_is_warned_and_listed(
    stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    """`--tables 'db.*,db.nope,nosuch.*'`: a WARNING naming each pattern that matches no table,
    at bootstrap and after each DDL, and `unmatched_tables` in GET /tables."""
    info = stack.load()
    assert info is not None
    tag = uuid.uuid4().hex[:8]
    db = f"ops_{tag}"
    root = stack.root_connection()
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    patterns = [f"{db}.t*", f"{db}.nope", f"nosuch_{tag}.*"]
    settings = load_settings(
        None,
        mysql=info.mysql_url,
        redis=info.redis_url,
        tables=patterns,
        key_prefix=f"ops{tag}",
        server_id=8000 + int(tag[:4], 16) % 1000,
    )
    caplog.set_level(logging.WARNING, "service.pipeline")
    replicator = Replicator(settings)
    task = asyncio.create_task(replicator.run())
    app = create_app(settings, replicator)

    def warned() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "matches no" in r.getMessage()
        ]

    try:
        async with asyncio.timeout(30):
            while replicator.status().state is not State.STREAMING:
                await asyncio.sleep(0.05)
        assert len(warned()) == 2 and f"'{db}.nope'" in warned()[0] and f"'nosuch_{tag}.*'" in warned()[1]
        assert "(bootstrap)" in warned()[0]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            body = (await http.get("/tables")).json()
            assert body["unmatched_tables"] == [f"{db}.nope", f"nosuch_{tag}.*"]
            caplog.clear()
            with root.cursor() as cur:
                cur.execute(f"CREATE TABLE {db}.nope (id INT PRIMARY KEY)")
            async with asyncio.timeout(30):
                while replicator.status().unmatched_tables != (f"nosuch_{tag}.*",):
                    await asyncio.sleep(0.05)
            assert len(warned()) == 1 and "after the DDL at" in warned()[0]
            assert (await http.get("/tables")).json()["unmatched_tables"] == [f"nosuch_{tag}.*"]
    finally:
        replicator.stop()
        async with asyncio.timeout(20):
            await task
        root.close()
