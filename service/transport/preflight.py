"""Preflight: is the source configured so that it can be mirrored? One actionable line per problem.

`check_source()` returns (problems, warnings); `preflight()` raises `PreflightError` with every
problem on its own line: what is wrong, then the statement that fixes it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import aiomysql

from service.errors import PreflightError, SourceError
from service.transactions import TableFilter
from service.transport.columns import SYSTEM_SCHEMAS
from service.transport.connection import ServerInfo, fetch
from service.transport.stream import REPLICA_HOST

__all__ = ["check_source", "preflight"]

log = logging.getLogger(__name__)


def _persist(var: str, value: str) -> str:
    return f"SET GLOBAL {var} = '{value}' (and {var}={value} in my.cnf so it survives a restart)"


def check_config(info: ServerInfo) -> tuple[list[str], list[str]]:
    """Problems and warnings from the server variables alone (pure)."""
    problems: list[str] = []
    warnings: list[str] = []
    if info.var("log_bin").upper() not in ("ON", "1"):
        problems.append(
            "binary logging is off (log_bin=OFF): "
            "restart the server with --log-bin=mysql-bin and a unique --server-id"
        )
    fmt = info.var("binlog_format").upper()
    if fmt != "ROW":
        problems.append(f"binlog_format is {fmt or 'unknown'}, need ROW: {_persist('binlog_format', 'ROW')}")
    image = info.var("binlog_row_image").upper()
    if image and image != "FULL":
        warnings.append(
            f"binlog_row_image is {image}: partial row images are merged column by column, "
            "omitted INSERT columns get their constant defaults, and generated columns the server "
            f"does not log may be missing; for an exact mirror: {_persist('binlog_row_image', 'FULL')}"
        )
    metadata = info.var("binlog_row_metadata").upper()
    if metadata != "FULL":
        known = "column names and ENUM/SET values"
        if metadata != "MINIMAL":
            known = "column names, character sets (binary or text, which charset) and ENUM/SET values"
        warnings.append(
            f"binlog_row_metadata is {metadata or 'not supported'}: {known} come from "
            "information_schema (needs SELECT), so rows written before a DDL the mirror has not "
            "read yet cannot be decoded exactly (they are re-read by the DDL's resync); better: "
            f"{_persist('binlog_row_metadata', 'FULL')}"
        )
    if "PARTIAL_JSON" in info.var("binlog_row_value_options").upper():
        problems.append(
            "binlog_row_value_options=PARTIAL_JSON writes JSON diffs, not values: "
            "SET GLOBAL binlog_row_value_options = '' (and in my.cnf)"
        )
    # binlog_transaction_compression=ON (MySQL 8.0.20+) is fine: TRANSACTION_PAYLOAD events are
    # decompressed and their inner events decoded (BinlogDecoder.decode_events).
    if info.var("log_bin_compress").upper() in ("ON", "1"):
        warnings.append("log_bin_compress is ON: compressed MariaDB events are decoded (costs CPU)")
    return problems, warnings


_GRANT = re.compile(r"^GRANT (.+?) ON (\S+) TO ", re.I | re.S)


def check_grants(grants: list[str], info: ServerInfo) -> list[str]:
    """Missing global privileges, from SHOW GRANTS lines (pure)."""
    privs: set[str] = set()
    for line in grants:
        m = _GRANT.match(line)
        if m and m.group(2).replace("`", "") == "*.*":
            privs |= {p.strip().upper() for p in m.group(1).split(",")}
    if "ALL PRIVILEGES" in privs or "ALL" in privs:
        return []
    problems = []
    if not privs & {"REPLICATION SLAVE", "REPLICATION REPLICA"}:
        problems.append("missing privilege REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.* TO <user>")
    monitor = {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}
    if not privs & monitor:
        name = "BINLOG MONITOR" if info.mariadb and info.version >= (10, 5, 2) else "REPLICATION CLIENT"
        problems.append(
            f"missing privilege {name} (to read the binlog position): GRANT {name} ON *.* TO <user>"
        )
    return problems


async def _same_server_id(
    conn: aiomysql.Connection, info: ServerInfo, server_id: int, settle: float
) -> list[str]:
    """Hosts of the replicas registered with `server_id`.

    A registration by a binlog-mirror (host REPLICA_HOST) may be this mirror's own previous dump
    thread, still listed after a crash or a quick restart until the server next writes to its
    socket (at the latest one heartbeat later). Those are re-checked for up to `settle` seconds
    before they count: a restart never trips over its own past, a live twin still does."""
    deadline = time.monotonic() + settle
    while True:
        rows = await fetch(conn, info.replicas_statement)
        hosts = [str(r[1] or "") for r in rows if int(r[0]) == server_id]
        if not hosts or any(h != REPLICA_HOST for h in hosts) or time.monotonic() >= deadline:
            return hosts
        await asyncio.sleep(0.2)


_OLD_HIRES = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
    f"WHERE TABLE_SCHEMA NOT IN ({','.join(['%s'] * len(SYSTEM_SCHEMAS))}) "
    "AND COLUMN_TYPE LIKE '%%mariadb-5.3%%' AND DATETIME_PRECISION > 0 "
    "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION"
)


async def old_hires_columns(
    conn: aiomysql.Connection, info: ServerInfo, tables: TableFilter | None
) -> list[str]:
    """MariaDB 5.3-format TIME/DATETIME/TIMESTAMP columns with fractional seconds in the selected
    tables: MariaDB logs their rows under the old type codes without saying how long the values
    are, so no binlog reader (mariadb-binlog included) can decode them."""
    if not info.mariadb:
        return []
    problems = []
    for schema, table, column, ctype in await fetch(conn, _OLD_HIRES, SYSTEM_SCHEMAS):
        if tables is None or tables.wants(str(schema), str(table)):
            problems.append(
                f"{schema}.{table}.{column} is a MariaDB 5.3-format {ctype}: its rows cannot be "
                f"decoded from the binlog; rewrite the table with ALTER TABLE `{schema}`.`{table}` "
                f"FORCE (with mysql56_temporal_format=ON, the default) or leave it out "
                f"(--exclude-tables {schema}.{table})"
            )
    return problems


async def check_source(
    conn: aiomysql.Connection,
    info: ServerInfo,
    *,
    server_id: int,
    settle: float = 0.0,
    tables: TableFilter | None = None,
) -> tuple[list[str], list[str]]:
    """`tables`: the selection (None: every table), for the per-table checks."""
    problems, warnings = check_config(info)
    problems += await old_hires_columns(conn, info, tables)
    grants = [str(r[0]) for r in await fetch(conn, "SHOW GRANTS FOR CURRENT_USER()")]
    problems += [p.replace("<user>", _user_of(grants)) for p in check_grants(grants, info)]
    if server_id == info.server_id:
        problems.append(
            f"server_id {server_id} is the source's own server_id: pick another (--server-id / "
            "BINLOG_MIRROR_SERVER_ID)"
        )
    try:
        twins = await _same_server_id(conn, info, server_id, settle)
    except SourceError as exc:
        warnings.append(f"cannot list replicas to check server_id {server_id} is unique ({exc})")
    else:
        if twins:
            problems.append(
                f"server_id {server_id} is already used by a connected replica ({info.replicas_statement}): "
                "give this mirror its own --server-id / BINLOG_MIRROR_SERVER_ID"
            )
    return problems, warnings


def _user_of(grants: list[str]) -> str:
    for line in grants:
        if m := re.search(r" TO (\S+@\S+)", line):
            return m.group(1)
    return "<user>"


async def preflight(
    conn: aiomysql.Connection,
    info: ServerInfo,
    *,
    server_id: int,
    settle: float = 0.0,
    tables: TableFilter | None = None,
) -> None:
    """`settle`: how long a registration of our server_id by a binlog-mirror may take to go away
    (the caller passes its read timeout, 2.5 heartbeats) before it counts as a live twin."""
    problems, warnings = await check_source(conn, info, server_id=server_id, settle=settle, tables=tables)
    for warning in warnings:
        log.warning("preflight: %s", warning)
    if problems:
        raise PreflightError("the source cannot be mirrored:\n" + "\n".join(f"- {p}" for p in problems))
