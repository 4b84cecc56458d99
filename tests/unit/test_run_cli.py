"""`binlog-mirror run` flags reach the settings (the replicator itself is not started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.cli import run as run_cli
from service.settings import Settings

URLS = ["--mysql", "mysql://repl:pw@db:3306", "--redis", "redis://cache:6379/0"]


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    for name in ("BINLOG_MIRROR_TABLES", "BINLOG_MIRROR_EXCLUDE_TABLES", "BINLOG_MIRROR_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    seen: list[Settings] = []

    async def main(settings: Settings, **_: Any) -> None:
        seen.append(settings)

    monkeypatch.setattr(run_cli, "_main", main)
    return seen


def test_exclude_tables_flag_like_tables(started: list[Settings]) -> None:
    args = ["run", *URLS, "--tables", "shop.*,crm.users", "--exclude-tables", "shop.tmp_*,shop.log"]
    result = CliRunner().invoke(app, [*args, "--exclude-tables", "crm.audit"])
    assert result.exit_code == 0, result.output
    assert started[0].tables == ["shop.*", "crm.users"]
    assert started[0].exclude_tables == ["shop.tmp_*", "shop.log", "crm.audit"]


def test_exclude_tables_flag_overrides_the_environment(
    started: list[Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BINLOG_MIRROR_EXCLUDE_TABLES", "shop.env")
    assert CliRunner().invoke(app, ["run", *URLS]).exit_code == 0
    assert CliRunner().invoke(app, ["run", *URLS, "--exclude-tables", "shop.flag"]).exit_code == 0
    assert [s.exclude_tables for s in started] == [["shop.env"], ["shop.flag"]]


def test_exclude_tables_flag_refuses_a_pattern_without_schema(started: list[Settings]) -> None:
    result = CliRunner().invoke(app, ["run", *URLS, "--exclude-tables", "tmp"])
    assert result.exit_code == 1 and not started
    assert "exclude_tables" in result.output and "must be schema.table" in result.output


def test_run_flags_from_api_host_token_password_file_and_exclude_alias(
    started: list[Settings], tmp_path: Path
) -> None:
    (tmp_path / "pw").write_text("from-file\n")
    args = ["run", "--mysql", "mysql://repl@db:3306", "--redis", "redis://cache:6379/0"]
    args += ["--mysql-password-file", str(tmp_path / "pw"), "--from", "mysql-bin.000002:4"]
    args += ["--api-host", "0.0.0.0", "--api-token", "tkn", "--exclude", "shop.tmp", "--log-level", "debug"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    s = started[0]
    assert s.mysql is not None and s.mysql.password.get_secret_value() == "from-file"
    assert s.start == "mysql-bin.000002:4" and s.api_host == "0.0.0.0"
    assert s.api_token is not None and s.api_token.get_secret_value() == "tkn"
    assert s.exclude_tables == ["shop.tmp"]


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        ([], {}, "BINLOG_MIRROR_MYSQL and BINLOG_MIRROR_REDIS"),
        (URLS[:2], {}, "BINLOG_MIRROR_REDIS"),
        ([], {"BINLOG_MIRROR_REDIS": "redis://cache:6379/0"}, "BINLOG_MIRROR_MYSQL"),
    ],
)
def test_run_without_servers_names_the_missing_settings(
    started: list[Settings],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    named: str,
) -> None:
    """No demo fallback: in a container a forgotten setting must not start (or install) a stack."""
    for name in ("BINLOG_MIRROR_MYSQL", "BINLOG_MIRROR_REDIS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 1 and not started
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert f"set {named} (" in lines[0] and "binlog-mirror demo" in lines[0]


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith(f"binlog-mirror {version('binlog-mirror')} (")  # "(compiled ...)"


def test_demo_is_its_own_command() -> None:
    result = CliRunner().invoke(app, ["demo", "--help"])
    assert result.exit_code == 0 and "throwaway local MariaDB" in result.output


def test_integrity_flags_and_their_env_vars(started: list[Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    """--on-history-mismatch, --verify-rows-per-second, --verify-repair (docs/mirror.md)."""
    args = ["run", *URLS, "--on-history-mismatch", "recopy", "--verify-rows-per-second", "250"]
    result = CliRunner().invoke(app, [*args, "--verify-repair"])
    assert result.exit_code == 0, result.output
    s = started[0]
    assert (s.on_history_mismatch, s.verify_rows_per_second, s.verify_repair) == ("recopy", 250, True)
    defaults = CliRunner().invoke(app, ["run", *URLS])
    assert defaults.exit_code == 0, defaults.output
    assert (started[1].on_history_mismatch, started[1].verify_rows_per_second) == ("stop", 0)
    assert started[1].verify_repair is False
    monkeypatch.setenv("BINLOG_MIRROR_ON_HISTORY_MISMATCH", "recopy")
    monkeypatch.setenv("BINLOG_MIRROR_VERIFY_ROWS_PER_SECOND", "10")
    monkeypatch.setenv("BINLOG_MIRROR_VERIFY_REPAIR", "true")
    assert CliRunner().invoke(app, ["run", *URLS]).exit_code == 0
    assert (started[2].on_history_mismatch, started[2].verify_rows_per_second, started[2].verify_repair) == (
        "recopy",
        10,
        True,
    )
    bad = CliRunner().invoke(app, ["run", *URLS, "--on-history-mismatch", "ignore"])
    assert (
        bad.exit_code != 0 and "on_history_mismatch" in bad.output and "--on-history-mismatch" in bad.output
    )


def test_run_token_file_flags(started: list[Settings], tmp_path: Path) -> None:
    (tmp_path / "control").write_text("ctl\n")
    (tmp_path / "read").write_text("rd\n")
    args = ["run", *URLS, "--api-token-file", str(tmp_path / "control")]
    args += ["--api-read-token-file", str(tmp_path / "read")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    s = started[0]
    assert s.api_token is not None and s.api_token.get_secret_value() == "ctl"
    assert s.api_read_token is not None and s.api_read_token.get_secret_value() == "rd"
