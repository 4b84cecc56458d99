"""Preflight: each misconfiguration gives its one actionable line."""

from __future__ import annotations

import ssl
import uuid

import pytest
from stream_helpers import admin, run_sql, settings_for, unique_db

from service.devtools.stack import LocalStack
from service.errors import PreflightError
from service.settings import load_settings
from service.transport.connection import ServerInfo, ssl_context
from service.transport.preflight import check_config, check_grants
from service.transport.source import BinlogSource

pytestmark = pytest.mark.integration


def _info(**variables: str) -> ServerInfo:
    base = {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
    }
    return ServerInfo("mysql", (8, 0, 36), "8.0.36", 1, {**base, **variables})


@pytest.mark.parametrize(
    ("variables", "line"),
    [
        ({"log_bin": "OFF"}, "binary logging is off (log_bin=OFF): restart the server with --log-bin"),
        ({"binlog_format": "MIXED"}, "binlog_format is MIXED, need ROW: SET GLOBAL binlog_format = 'ROW'"),
        ({"binlog_row_value_options": "PARTIAL_JSON"}, "SET GLOBAL binlog_row_value_options = ''"),
    ],
)
def test_config_problems(variables: dict[str, str], line: str) -> None:
    problems, _ = check_config(_info(**variables))
    assert len(problems) == 1 and line in problems[0]


def test_config_warnings_and_clean() -> None:
    assert check_config(_info()) == ([], [])
    # compressed transaction payloads are decoded (decode_events), so not a problem any more
    assert check_config(_info(binlog_transaction_compression="ON")) == ([], [])
    problems, warnings = check_config(_info(binlog_row_metadata="MINIMAL"))
    assert problems == [] and "SET GLOBAL binlog_row_metadata = 'FULL'" in warnings[0]
    assert "column names and ENUM/SET values come from information_schema" in warnings[0]
    # NO_LOG (MariaDB's default): charsets too, so binary and latin1 values depend on it
    _, warnings = check_config(_info(binlog_row_metadata="NO_LOG"))
    assert "column names, character sets (binary or text, which charset) and ENUM/SET values" in warnings[0]
    assert "rows written before a DDL" in warnings[0] and "binlog_row_metadata = 'FULL'" in warnings[0]
    for image in ("MINIMAL", "NOBLOB"):  # partial images are mirrored (merged), with a warning
        problems, warnings = check_config(_info(binlog_row_image=image))
        assert problems == [] and f"binlog_row_image is {image}: partial row images" in warnings[0]


def test_grants() -> None:
    maria = ServerInfo("mariadb", (10, 11, 0), "10.11.0-MariaDB", 1, {})
    assert check_grants(["GRANT ALL PRIVILEGES ON *.* TO `a`@`%`"], maria) == []
    assert check_grants(["GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `a`@`%`"], maria) == []
    missing = check_grants(["GRANT USAGE ON *.* TO `a`@`%`", "GRANT ALL ON `db`.* TO `a`@`%`"], maria)
    assert missing == [
        "missing privilege REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.* TO <user>",
        "missing privilege BINLOG MONITOR (to read the binlog position): "
        "GRANT BINLOG MONITOR ON *.* TO <user>",
    ]


@pytest.mark.parametrize(
    ("flavor", "version", "status", "replicas"),
    [
        ("mysql", (5, 7, 44), "SHOW MASTER STATUS", "SHOW SLAVE HOSTS"),
        ("mysql", (8, 0, 36), "SHOW MASTER STATUS", "SHOW REPLICAS"),
        ("mysql", (8, 4, 3), "SHOW BINARY LOG STATUS", "SHOW REPLICAS"),
        ("mysql", (9, 1, 0), "SHOW BINARY LOG STATUS", "SHOW REPLICAS"),
        ("mariadb", (11, 4, 2), "SHOW MASTER STATUS", "SHOW SLAVE HOSTS"),
    ],
)
def test_statements_per_flavour_and_version(
    flavor: str, version: tuple[int, int, int], status: str, replicas: str
) -> None:
    info = ServerInfo(flavor, version, ".".join(map(str, version)), 1, {})  # type: ignore[arg-type]
    assert (info.status_statement, info.replicas_statement) == (status, replicas)


def test_tls_settings() -> None:
    assert ssl_context(load_settings(mysql="mysql://u:p@h:1")) is None
    ctx = ssl_context(load_settings(mysql="mysql://u:p@h:1", mysql_ssl=True))
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    ctx = ssl_context(load_settings(mysql="mysql://u:p@h:1", mysql_ssl=True, mysql_ssl_verify=False))
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


async def test_statement_format_is_refused(stack: LocalStack) -> None:
    run_sql(stack, ["SET GLOBAL binlog_format = 'STATEMENT'"])
    try:
        with pytest.raises(PreflightError) as err:
            await BinlogSource(settings_for(stack), "now").start()
    finally:
        run_sql(stack, ["SET GLOBAL binlog_format = 'ROW'"])
    assert "- binlog_format is STATEMENT, need ROW: SET GLOBAL binlog_format = 'ROW'" in str(err.value)


async def test_user_without_grants_is_refused(stack: LocalStack) -> None:
    user, password = f"nogrants_{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    run_sql(
        stack, ["SET SESSION sql_log_bin = 0", f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'"]
    )
    info = stack.load()
    assert info is not None
    try:
        settings = settings_for(stack, f"mysql://{user}:{password}@127.0.0.1:{info.mysql_port}")
        with pytest.raises(PreflightError) as err:
            await BinlogSource(settings, "now").start()
    finally:
        run_sql(stack, ["SET SESSION sql_log_bin = 0", f"DROP USER '{user}'@'127.0.0.1'"])
    lines = str(err.value).splitlines()
    assert (
        f"- missing privilege REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.* TO `{user}`@`127.0.0.1`"
        in lines
    )
    assert any(line.startswith("- missing privilege BINLOG MONITOR") for line in lines)


async def test_duplicate_server_id_is_refused(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    first = BinlogSource(settings_for(stack, info.admin_url), "now")
    async with first:  # registered as a replica with its server_id
        twin = BinlogSource(settings_for(stack, info.admin_url, server_id=first.server_id), "now")
        with pytest.raises(
            PreflightError, match=f"server_id {first.server_id} is already used by a connected"
        ):
            await twin.start()
        await twin.close()
    own = BinlogSource(settings_for(stack, server_id=1), "now")
    with pytest.raises(PreflightError, match="server_id 1 is the source's own server_id"):
        await own.start()
    await own.close()


async def test_mariadb_5_3_temporal_columns_with_fractions_are_refused(stack: LocalStack) -> None:
    """MariaDB logs a 5.3-format DATETIME(3) as a plain DATETIME: the row's length is not in the
    binlog (the decoder's side: test_binlog_cli_and_purity.py). Preflight names the column and the
    fix, for the selected tables only. Nothing here is binlogged: every test reads the same binlog."""
    db = unique_db("old_hires")
    with admin(stack) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("SET GLOBAL mysql56_temporal_format = OFF")
        try:
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, d3 DATETIME(3), t0 TIME)")
        finally:
            cur.execute("SET GLOBAL mysql56_temporal_format = ON")
        cur.execute(f"CREATE TABLE {db}.fine (id INT PRIMARY KEY)")
    try:
        settings = settings_for(stack, tables=[f"{db}.*"])
        with pytest.raises(PreflightError) as err:
            await BinlogSource(settings, "now").start()
        assert (
            f"- {db}.t.d3 is a MariaDB 5.3-format datetime(3) /* mariadb-5.3 */: its rows cannot be "
            f"decoded from the binlog; rewrite the table with ALTER TABLE `{db}`.`t` FORCE" in str(err.value)
        )
        assert "t0" not in str(err.value)  # no fractional seconds: the old format is self-describing
        async with BinlogSource(settings_for(stack, tables=[f"{db}.fine"]), "now"):
            pass
    finally:
        run_sql(stack, ["SET SESSION sql_log_bin = 0", f"DROP DATABASE {db}"])
