"""The command line's shape: the `binlog-mirror` entry point (`service.cli:app`) and
`python -m service` reach every command group of the service/cli package."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from service.cli import app

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
