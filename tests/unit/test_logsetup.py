"""Logging setup: JSON lines, redaction of secrets, global options before or after the subcommand."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest
from typer.testing import CliRunner

from service.cli import app
from service.cli.options import hoist_global_options
from service.logsetup import configure, redact


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_json_lines_carry_time_level_logger_message_and_fields(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure("info", "json")
    log = logging.getLogger("service.test")
    log.info("resync %s.%s: %d rows", "shop", "orders", 3, extra={"table": "shop.orders", "rows": 3})
    log.debug("not shown at info")
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        log.exception("failed at %s", "mysql-bin.000001:4", extra={"position": "mysql-bin.000001:4"})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2  # one line per record, the traceback inside
    first, second = map(orjson.loads, lines)
    assert first["level"] == "INFO" and first["logger"] == "service.test"
    assert first["message"] == "resync shop.orders: 3 rows"
    assert first["table"] == "shop.orders" and first["rows"] == 3
    assert first["time"].endswith("Z") and "T" in first["time"]
    assert second["level"] == "ERROR" and second["position"] == "mysql-bin.000001:4"
    assert "ValueError: boom" in second["exc"]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_token_or_password_reaches_a_log_line(
    restore_logging: None, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    configure("info", "json" if fmt == "json" else "text")
    # the line uvicorn logs when a websocket is accepted (the example)
    logging.getLogger("uvicorn.error").info(
        '%s - "WebSocket %s" [accepted]', "127.0.0.1:5555", "/ws/events?tables=shop.*&token=s3cret"
    )
    logging.getLogger("x").warning("connecting to redis://:hunter2@cache:6379/0 and mysql://repl:pw@db:3306")
    logging.getLogger("x").info("header Authorization: Bearer abc.def-123")
    err = capsys.readouterr().err
    assert "s3cret" not in err and "hunter2" not in err and ":pw@" not in err and "abc.def" not in err
    assert "token=***" in err and "redis://:***@cache" in err and "mysql://repl:***@db" in err
    assert "Bearer ***" in err


def test_redact_keeps_what_is_no_secret() -> None:
    assert redact("GET /tables?schema=shop") == "GET /tables?schema=shop"
    assert redact("/ws/events?token=a&tables=x") == "/ws/events?token=***&tables=x"
    assert redact("redis://cache:6379/0") == "redis://cache:6379/0"


def test_global_options_are_hoisted_from_after_the_subcommand() -> None:
    args = ["run", "--mysql", "m", "--log-format", "json", "-v", "--log-level=warning", "--", "--version"]
    assert hoist_global_options(args) == [
        "--log-format", "json", "-v", "--log-level=warning", "run", "--mysql", "m", "--", "--version"
    ]  # fmt: skip


def test_version_and_log_options_after_the_subcommand(restore_logging: None) -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("binlog-mirror 0.")
    result = CliRunner().invoke(app, ["decode", "--help", "--log-level", "warning", "--log-format", "json"])
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.WARNING
    result = CliRunner().invoke(app, ["decode", "--log-format", "yaml"])
    assert result.exit_code == 2 and "'yaml' is not one of 'text', 'json'" in result.output
