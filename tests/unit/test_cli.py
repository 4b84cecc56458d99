"""The command line's shape: the `binlog-mirror` entry point (`service.cli:main`, whose typer app is
`service.cli.app`) and `python -m service` reach every command group of the service/cli package."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.settings import load_settings
from service.startup import check_access

COMMANDS = ("stream", "decode", "run", "snapshot", "replay", "compact", "load", "verify", "stack")


def test_the_app_registers_every_command_group() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    for command in COMMANDS:
        assert command in result.output
    stack = CliRunner().invoke(app, ["stack", "--help"])
    assert stack.exit_code == 0, stack.output
    for command in ("up", "down", "status"):
        assert command in stack.output


def test_python_m_service_runs_the_same_app() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "service", "stack", "--help"], check=True, capture_output=True, text=True
    ).stdout
    assert "binlog-mirror stack" in out and "status" in out


def test_the_cli_imports_no_server_client_until_a_command_needs_one() -> None:
    # `decode` and the short commands (--help, ctl, stack) paid ~0.8 s of imports they never used
    heavy = ("redis", "pydantic", "aiomysql", "pymysql", "fastapi", "rich")
    probe = f"import sys, service.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_the_spark_jobs_refuse_a_sentinel_url_with_one_line(tmp_path: object) -> None:
    sentinel = "redis+sentinel://127.0.0.1:1/svc"
    for args in (
        ["load", str(tmp_path), "--redis", sentinel],
        ["snapshot", "--mysql", "mysql://u@127.0.0.1:1", "--redis", sentinel, "--tables", "a.*"],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1, result.output
        assert "does not support Redis Sentinel" in result.output, result.output
    # a refused `load` has not made this (test) process refuse pandas (replay_local.refuse_pandas)
    assert not any(type(f).__name__ == "_NoPandas" for f in sys.meta_path)


def test_a_plain_decode_skips_click_and_prints_the_same_bytes(tmp_path: object) -> None:
    # `binlog-mirror decode FILE...` alone runs the command without typer's parsing (start-up,
    # issue 42); an option, or a log setting in the environment, takes typer's path. Same output.
    import os
    from pathlib import Path

    from service.cli import plain_decode

    assert plain_decode(["decode", "a", "b"]) == [Path("a"), Path("b")]
    for argv in (["decode"], ["decode", "--events", "a"], ["decode", "a", "-v"], ["stream", "a"], []):
        assert plain_decode(argv) is None, argv
    vector = Path(__file__).parents[1] / "fixtures/binlog/vectors/mysql-5.7/mysql-bin.checksum-none"
    run = [sys.executable, "-m", "service", "decode", str(vector), str(vector)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOG_MIRROR_LOG_")}
    fast = subprocess.run(run, check=True, capture_output=True, env=env)
    slow = subprocess.run(
        run, check=True, capture_output=True, env={**env, "BINLOG_MIRROR_LOG_LEVEL": "info"}
    )
    assert fast.stdout == slow.stdout and fast.stdout.count(b"\n") == 72
    assert fast.stderr == slow.stderr == b""
    probe = (  # typer's standalone mode exits: report at exit
        "import atexit, sys; from service.cli import app;"
        " atexit.register(lambda: print('typer._adapters' in sys.modules)); app()"
    )
    for extra, parsed in (({}, b"False"), ({"BINLOG_MIRROR_LOG_LEVEL": "info"}, b"True")):
        argv = [sys.executable, "-c", probe, "decode", str(vector)]
        out = subprocess.run(argv, check=True, capture_output=True, env={**env, **extra}).stdout
        assert out.endswith(parsed + b"\n"), out[-200:]
    missing = [sys.executable, "-m", "service", "decode", str(Path(str(tmp_path)) / "nope")]
    for extra in ({}, {"BINLOG_MIRROR_LOG_LEVEL": "info"}):
        failed = subprocess.run(missing, capture_output=True, env={**env, **extra})
        assert failed.returncode == 1 and failed.stderr.startswith(b"error: "), failed


def test_an_error_line_keeps_the_settings_brackets(tmp_path: Path) -> None:
    """`[document.orders]` and `[table]` are setting names, not console markup."""
    config = tmp_path / "c.toml"
    config.write_text('[document.orders]\nroot = "shop.orders"\nkey = "app:order:{id}"\n')
    args = ["run", "--config", str(config), "--redis", "redis+cluster://127.0.0.1:1", "--no-api"]
    done = subprocess.run([sys.executable, "-m", "service", *args], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip()
    assert "[document.orders] key: 'app:order:{id}' has no hash tag" in line, line
    assert "every document and [table] template of its tables" in line and "\n" not in line


async def test_a_redis_cluster_that_does_not_answer_is_logged_and_left_to_the_retries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No node answers (a closed port): a warning naming it, no traceback; the replicator retries."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = load_settings(None, redis=f"redis+cluster://127.0.0.1:{port}", tables=["a.*"])
    with caplog.at_level(logging.WARNING):
        await check_access(settings)
    assert f"redis at redis+cluster://127.0.0.1:{port} does not answer yet" in caplog.text
    assert "RedisClusterException" in caplog.text
