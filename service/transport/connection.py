"""aiomysql connections to the source, server facts, and the one place driver errors are mapped.

Every aiomysql/pymysql exception raised while talking to the source passes through
`map_errors()`: ERR 1236 (the requested position is purged or unknown) becomes `PositionLost`,
an authentication or privilege error `SourceAccessDenied` (permanent: an operator must act),
everything else `SourceError` (retriable).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiomysql
import pymysql

from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import PositionLost, SourceAccessDenied, SourceError
from service.settings import MySQLUrl, Settings
from service.sqltext import bind, quote_ident

__all__ = [
    "ER_MASTER_FATAL_ERROR_READING_BINLOG",
    "BinlogRoom",
    "ServerInfo",
    "binlog_expiry",
    "binlog_files",
    "close_connection",
    "connect",
    "connect_args",
    "current_checkpoint",
    "fetch",
    "map_errors",
    "quote_ident",
    "server_info",
    "ssl_context",
]

ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
# access denied (db, user/password, table, column, "you need the X privilege"), no password
# given, auth plugin unsupported, password expired, account locked (MySQL 3118, MariaDB 4151)
ACCESS_DENIED_CODES = frozenset({1044, 1045, 1142, 1143, 1227, 1251, 1698, 1820, 1862, 3118, 4151})
CR_SERVER_LOST = 2013
CONNECT_TIMEOUT = 10.0
# The longest any reply packet may take on a query connection (side, catalog, resync, the dump's
# setup): a connection that goes silent without closing (a black-holed path, a NAT that forgot it)
# fails with 2013 after this instead of holding its caller (and any lock it holds) forever.
QUERY_TIMEOUT = 10.0


@contextlib.contextmanager
def map_errors(what: str) -> Iterator[None]:
    """Translate driver and socket errors into the service's error tree."""
    try:
        yield
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        message = exc.args[1] if len(exc.args) > 1 else str(exc)
        if exc.__cause__ is not None:  # "Can't connect" hides why: refused, TLS verification, ...
            message = f"{message}: {exc.__cause__}"
        if code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
            raise PositionLost(
                f"{what}: the source cannot serve this position: {message} "
                "(purged or never written: check SHOW BINARY LOGS / @@gtid_purged and start from "
                "a position the source still has, e.g. `stream --from now|start|FILE:POS`)"
            ) from exc
        if code in ACCESS_DENIED_CODES:
            setting = SourceAccessDenied.setting
            raise SourceAccessDenied(
                f"mysql: {message} ({code}), {what} (check {setting} or --mysql)"
            ) from exc
        raise SourceError(f"{what}: ({code}) {message}" if code else f"{what}: {message}") from exc
    except (OSError, TimeoutError, asyncio.IncompleteReadError, EOFError) as exc:
        raise SourceError(f"{what}: {exc!r}") from exc


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """TLS from settings: on with `mysql_ssl` (system CAs), a CA file, or a client cert/key;
    verify=False skips name + chain checks."""
    if not (settings.mysql_ssl or settings.mysql_ssl_ca or settings.mysql_ssl_cert):
        return None
    ctx = ssl.create_default_context(cafile=str(settings.mysql_ssl_ca) if settings.mysql_ssl_ca else None)
    if settings.mysql_ssl_cert:
        key = str(settings.mysql_ssl_key) if settings.mysql_ssl_key else None
        ctx.load_cert_chain(str(settings.mysql_ssl_cert), key)
    if not settings.mysql_ssl_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connect_args(settings: Settings, url: MySQLUrl) -> dict[str, Any]:
    """Where and how to connect, for aiomysql and pymysql alike (autocommit)."""
    return {
        "host": url.host,
        "port": url.port,
        "user": url.user,
        "password": url.password.get_secret_value(),
        "ssl": ssl_context(settings),
        "autocommit": True,
        "charset": "utf8mb4",  # service/sqltext.py writes strings as _utf8mb4 literals
    }


class _TimedConnection(aiomysql.Connection):  # type: ignore[misc]
    """aiomysql has no read timeout: every packet read here is bounded by `read_timeout`. On
    expiry aiomysql closes the connection (`_close_on_cancel`) and the read fails as pymysql's
    own read timeout does, with 2013 (mapped to a retriable SourceError by `map_errors`)."""

    read_timeout: float = QUERY_TIMEOUT

    async def _read_packet(self, packet_type: Any = None) -> Any:
        args = () if packet_type is None else (packet_type,)
        try:
            async with asyncio.timeout(self.read_timeout):
                return await super()._read_packet(*args)
        except TimeoutError:
            raise pymysql.err.OperationalError(
                CR_SERVER_LOST, f"Lost connection to server: no reply within {self.read_timeout:g} s"
            ) from None


async def connect(settings: Settings, url: MySQLUrl | None = None) -> aiomysql.Connection:
    """An autocommit connection; mysql_native_password and caching_sha2_password (full auth over
    TLS, or RSA key exchange without TLS; aiomysql fetches the server's public key) both work."""
    url = url or settings.mysql
    if url is None:
        raise SourceError("no MySQL URL configured (--mysql or BINLOG_MIRROR_MYSQL)")
    with map_errors(f"connecting to {url}"):
        try:
            # Bounded here: aiomysql's connect_timeout is asyncio.wait_for(), which on Python 3.11
            # can swallow a cancellation (service/sink/client.py); aiomysql closes the socket
            # of a handshake cut short.
            async with asyncio.timeout(CONNECT_TIMEOUT):
                conn = _TimedConnection(**connect_args(settings, url), program_name="binlog-mirror")
                await conn._connect()  # what aiomysql.connect() does, with our class
                return conn
        except TimeoutError:
            raise SourceError(f"connecting to {url}: no answer within {CONNECT_TIMEOUT:g} s") from None


async def close_connection(conn: aiomysql.Connection) -> None:
    """Close and wait (at most a second) until the socket is gone: a TLS transport shuts down over
    a few loop turns, and a loop that stops before would leave its socket unclosed."""
    writer = conn._writer  # private, like the packet layer in stream.py; None once closed
    conn.close()
    if writer is not None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1):
                await writer.wait_closed()


async def fetch(
    conn: aiomysql.Connection, sql: str, args: Sequence[Any] | None = None
) -> list[tuple[Any, ...]]:
    with map_errors(f"query {sql.split()[0]} ..."):
        async with conn.cursor() as cur:
            await cur.execute(bind(sql, args))
            return list(await cur.fetchall())


@dataclass(frozen=True, slots=True)
class ServerInfo:
    flavour: Literal["mysql", "mariadb"]
    version: tuple[int, int, int]
    version_string: str
    server_id: int
    variables: dict[str, str]  # the replication-relevant globals, lower-case names

    @property
    def mariadb(self) -> bool:
        return self.flavour == "mariadb"

    @property
    def status_statement(self) -> str:
        if not self.mariadb and self.version >= (8, 4, 0):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"

    @property
    def replicas_statement(self) -> str:
        if not self.mariadb and self.version >= (8, 0, 22):
            return "SHOW REPLICAS"
        return "SHOW SLAVE HOSTS"

    def var(self, name: str, default: str = "") -> str:
        return self.variables.get(name, default)

    @property
    def gtids(self) -> bool:
        """The source writes GTIDs a dump can start from (MariaDB always; MySQL with gtid_mode=ON)."""
        return self.mariadb or self.var("gtid_mode").upper() == "ON"

    @property
    def identity(self) -> str:
        """Which server this is, stored with each checkpoint (a change is a failover): server_id,
        and MySQL's server_uuid or MariaDB's GTID domain."""
        if self.mariadb:
            return f"server_id={self.server_id} domain={self.var('gtid_domain_id', '0')}"
        return f"server_id={self.server_id} uuid={self.var('server_uuid')}"


_VARIABLES = (
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "binlog_row_value_options",
    "binlog_transaction_compression",
    "log_bin_compress",
    "binlog_checksum",
    "gtid_mode",
    "server_id",
    "server_uuid",
    "gtid_domain_id",
)


async def server_info(conn: aiomysql.Connection) -> ServerInfo:
    rows = await fetch(conn, "SELECT VERSION()")
    version_string = str(rows[0][0])
    numbers = version_string.split("-", 1)[0].split(".")
    version = tuple(int("".join(ch for ch in n if ch.isdigit()) or 0) for n in (numbers + ["0", "0"])[:3])
    # SHOW GLOBAL VARIABLES works on every flavour: MySQL 8.0 removed
    # information_schema.GLOBAL_VARIABLES and 5.7 refuses it by default (show_compatibility_56).
    placeholders = ",".join(["%s"] * len(_VARIABLES))
    found = await fetch(conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({placeholders})", _VARIABLES)
    variables = {str(k).lower(): "" if v is None else str(v) for k, v in found}
    return ServerInfo(
        flavour="mariadb" if "mariadb" in version_string.lower() else "mysql",
        version=(version[0], version[1], version[2]),
        version_string=version_string,
        server_id=int(variables.get("server_id") or 0),
        variables=variables,
    )


async def current_checkpoint(conn: aiomysql.Connection, info: ServerInfo) -> Checkpoint:
    """The source's current end of binlog (a transaction boundary) and its executed GTID set."""
    rows = await fetch(conn, info.status_statement)
    if not rows:
        raise SourceError(f"{info.status_statement} returned nothing: is binary logging on (log_bin)?")
    file, pos = str(rows[0][0]), int(rows[0][1])
    if info.mariadb:
        gtid = (await fetch(conn, "SELECT @@gtid_binlog_pos"))[0][0]
    else:
        gtid = rows[0][4] if len(rows[0]) > 4 else ""
    return Checkpoint(BinlogPosition(file, pos), str(gtid or "").replace("\n", ""))


async def binlog_files(conn: aiomysql.Connection) -> list[tuple[str, int]]:
    """SHOW BINARY LOGS: (file name, size) oldest first."""
    return [(str(r[0]), int(r[1])) for r in await fetch(conn, "SHOW BINARY LOGS")]


async def binlog_expiry(conn: aiomysql.Connection) -> float | None:
    """How long the source keeps a binlog file: `binlog_expire_logs_seconds` (MySQL 8+, MariaDB
    10.6+; it wins when not 0), else `expire_logs_days`; None when neither expires files (they
    go when purged by hand, or by a size limit this does not see)."""
    rows = await fetch(
        conn,
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('binlog_expire_logs_seconds', 'expire_logs_days')",
    )
    found = {str(k).lower(): float(v or 0) for k, v in rows}
    if found.get("binlog_expire_logs_seconds", 0) > 0:
        return found["binlog_expire_logs_seconds"]
    days = found.get("expire_logs_days", 0)
    return days * 86400 if days > 0 else None


@dataclass(frozen=True, slots=True)
class BinlogRoom:
    """The source's binlogs as seen from a position `since` (the applied checkpoint)."""

    bytes_behind: int | None  # binlog bytes from `since` to the end of binlog; None: unknown
    listed: bool  # `since`'s file is still on the source (or `since` names no file)
    expiry_seconds: float | None  # the source's binlog expiry (binlog_expiry)

    def retention_left(self, lag_seconds: float | None) -> float | None:
        """Seconds until the source may purge the file the mirror reads next: 0 once it is gone;
        None without an expiry. A lower bound: that file was closed after the last applied
        commit, which is `lag_seconds` old, and expires `expiry_seconds` after it was closed."""
        if not self.listed:
            return 0.0
        if self.expiry_seconds is None:
            return None
        return max(self.expiry_seconds - (lag_seconds or 0.0), 0.0)
