"""Settings: built once at the edge (CLI or app factory) and passed down; never at import time.

Sources, highest priority first: CLI flags (passed as init kwargs), environment variables
(`BINLOG_MIRROR_*`), an optional TOML file (`--config` / `BINLOG_MIRROR_CONFIG`), defaults.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from service.document_settings import DOCUMENT_NAME, DocumentSettings
from service.errors import ConfigError
from service.shaping import IndexSettings, SectionSettings, Shapes, TtlSettings, parse_template, section_tag

__all__ = ["MySQLUrl", "RedisUrl", "Settings", "cluster_nodes", "load_settings", "sentinel_target"]

MYSQL_FORM = "mysql://user:password@host:port"
REDIS_FORM = (
    "redis://[:password@]host:port/db (or rediss:// for TLS; a Redis Cluster: "
    "redis+cluster://[:password@]host:port[,host:port...]; Sentinel: "
    "redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB])"
)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
TLS_SCHEMES = ("rediss", "rediss+cluster", "rediss+sentinel")
# redis-py's names for the TLS files, carried in the URL's query (Redis.from_url reads them; the
# cluster and sentinel clients read them in service/sink/client.py)
TLS_QUERY = {"ca": "ssl_ca_certs", "cert": "ssl_certfile", "key": "ssl_keyfile"}


class MySQLUrl(BaseModel):
    """A parsed `mysql://user:password@host:port` URL; the password never prints."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int = 3306
    user: str
    password: SecretStr = SecretStr("")

    @classmethod
    def parse(cls, url: str) -> MySQLUrl:
        parts = urlsplit(url)
        if parts.scheme not in ("mysql", "mariadb") or not parts.hostname or not parts.username:
            raise ValueError(f"expected {MYSQL_FORM}")
        try:
            port = parts.port or 3306
        except ValueError:
            raise ValueError(f"port is not a number 1-65535; expected {MYSQL_FORM}") from None
        return cls(
            host=parts.hostname,
            port=port,
            user=unquote(parts.username),
            password=SecretStr(unquote(parts.password or "")),
        )

    def redacted(self) -> str:
        return f"mysql://{self.user}:***@{self.host}:{self.port}"

    def with_password(self, password: str) -> MySQLUrl:
        return self.model_copy(update={"password": SecretStr(password)})

    def __str__(self) -> str:
        return self.redacted()


class RedisUrl(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: SecretStr  # may carry a password

    @classmethod
    def parse(cls, url: str) -> RedisUrl:
        parts = urlsplit(url)
        if parts.scheme in CLUSTER_SCHEMES:
            cluster_nodes(url)  # validates the node list
            return cls(url=SecretStr(url))
        if parts.scheme in SENTINEL_SCHEMES:
            sentinel_target(url)  # validates the sentinels, the service and the database
            return cls(url=SecretStr(url))
        if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
            raise ValueError(f"expected {REDIS_FORM}")
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError:
            raise ValueError(f"port is not a number 1-65535; expected {REDIS_FORM}") from None
        db = parts.path.lstrip("/")
        if parts.scheme != "unix" and db and not db.isdigit():
            raise ValueError(f"database must be a number; expected {REDIS_FORM}")
        return cls(url=SecretStr(url))

    @property
    def cluster(self) -> bool:
        """A Redis Cluster (`redis+cluster://`): the mirror applies per slot group (docs/mirror.md)."""
        return urlsplit(self.url.get_secret_value()).scheme in CLUSTER_SCHEMES

    @property
    def sentinel(self) -> bool:
        """Redis Sentinel (`redis+sentinel://`): the master of a service, found through sentinels."""
        return urlsplit(self.url.get_secret_value()).scheme in SENTINEL_SCHEMES

    def with_tls_files(self, ca: str | None, cert: str | None, key: str | None) -> RedisUrl:
        """The URL with the TLS files in its query, as redis-py names them (`TLS_QUERY`)."""
        parts = urlsplit(self.url.get_secret_value())
        query = dict(parse_qsl(parts.query))
        for name, value in (("ca", ca), ("cert", cert), ("key", key)):
            if value:
                query[TLS_QUERY[name]] = value
        if ca:
            query["ssl_cert_reqs"] = "required"
        return RedisUrl(url=SecretStr(urlunsplit(parts._replace(query=urlencode(query)))))

    def with_password(self, password: str) -> RedisUrl:
        parts = urlsplit(self.url.get_secret_value())
        netloc = parts.netloc.rsplit("@", 1)[-1]
        user = quote(unquote(parts.username or ""), safe="")
        netloc = f"{user}:{quote(password, safe='')}@{netloc}"
        return RedisUrl(url=SecretStr(urlunsplit(parts._replace(netloc=netloc))))

    def redacted(self) -> str:
        parts = urlsplit(self.url.get_secret_value())
        if self.cluster or self.sentinel:
            nodes = ",".join(f"{h}:{p}" for h, p in cluster_nodes(self.url.get_secret_value()))
            return f"{parts.scheme}://{'***@' if parts.password else ''}{nodes}{parts.path}"
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        if parts.password:
            netloc = "***@" + netloc
        return f"{parts.scheme}://{netloc}{parts.path}"

    def __str__(self) -> str:
        return self.redacted()


# issue 40's per-table settings this version does not apply yet: refused, never ignored
_OFFSET = re.compile(r"[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]")


def _checked_template(value: str, placeholders: bool) -> str:
    """A key template whose syntax is valid (service.shaping.parse_template), else its reason."""
    try:
        parse_template(value, placeholders)
    except ValueError as exc:
        raise ValueError(f"{value!r}: {exc}") from None
    return value


class TableIndexSettings(BaseModel):
    """A `[[table."schema.table".index]]` entry (docs/mirror.md, "Key templates and index keys")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["unique", "set", "zset"]
    key: str  # its key template
    score: str | None = None  # zset: the numeric or temporal column of the score

    @field_validator("key")
    @classmethod
    def _template(cls, value: str) -> str:
        return _checked_template(value, placeholders=False)


class TableTtlSettings(BaseModel):
    """A section's `ttl` (docs/mirror.md, "Expiry"): `{ at = "column" }` or `{ seconds = N }`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str | None = None  # a DATE/DATETIME/TIMESTAMP or integer (epoch seconds) column
    seconds: int | None = Field(default=None, gt=0)  # renewed on each write of the row
    timezone: str | None = None  # `at` on a DATETIME/DATE: "UTC" or a fixed offset, "+02:00"

    @model_validator(mode="after")
    def _one_kind(self) -> TableTtlSettings:
        if (self.at is None) == (self.seconds is None):
            raise ValueError("ttl: give one of `at` (a column) or `seconds`")
        if self.timezone is not None:
            if self.at is None:
                raise ValueError("ttl: timezone is for `at` only")
            if self.timezone != "UTC" and not _OFFSET.fullmatch(self.timezone):
                raise ValueError(
                    f"ttl: timezone {self.timezone!r}: expected UTC or a fixed offset like +02:00 "
                    "(a zone with daylight saving time would make an expiry depend on the rules "
                    "the mirror ran with; store the column as TIMESTAMP or in UTC)"
                )
        return self

    def offset_seconds(self) -> int:
        """The timezone's offset east of UTC, in seconds (a DATETIME `at` is local time there)."""
        if self.timezone is None or self.timezone == "UTC":
            return 0
        sign = -1 if self.timezone[0] == "-" else 1
        return sign * (int(self.timezone[1:3]) * 3600 + int(self.timezone[4:6]) * 60)


class TableShapeSettings(BaseModel):
    """A `[table."schema.table"]` section (docs/mirror.md, "Shaping"); checked against the
    table's columns when its definition is read (service/shaping.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str | None = None  # a row key template: literal text and {column} placeholders
    columns: list[str] | None = None  # the fields kept (key columns always)
    exclude: list[str] = []  # or: the columns left out
    rename: dict[str, str] = {}  # column -> its field name in the mirror
    index: list[TableIndexSettings] = []  # lookup and index keys
    ttl: TableTtlSettings | None = None  # the rows' expiry
    value: Literal["hash", "json"] | None = None  # the rows' form (None: the global value_mode)

    @field_validator("key")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        return None if value is None else _checked_template(value, placeholders=True)

    @field_validator("rename")
    @classmethod
    def _field_names(cls, value: dict[str, str]) -> dict[str, str]:
        for col, to in value.items():
            if not to:
                raise ValueError(f"rename: {col} gets an empty name")
        return value

    @model_validator(mode="after")
    def _one_list(self) -> TableShapeSettings:
        if self.columns is not None and self.exclude:
            raise ValueError("columns and exclude: give one of them")
        return self

    def section(self) -> SectionSettings:
        return SectionSettings(
            key=self.key,
            columns=tuple(self.columns) if self.columns is not None else None,
            exclude=tuple(self.exclude),
            rename=tuple(self.rename.items()),
            indexes=tuple(IndexSettings(i.kind, i.key, i.score) for i in self.index),
            ttl=None
            if self.ttl is None
            else TtlSettings(self.ttl.at, self.ttl.seconds, self.ttl.offset_seconds()),
            value=self.value,
        )


def read_secret_file(setting: str, path: Path) -> SecretStr:
    """A password or token: the first line of a file (a mounted secret), without its line ending
    (spaces are kept: they may be part of a password); an empty one is an error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{setting}: {path}: {exc.strerror}") from None
    first = text.splitlines()[0] if text else ""
    if not first.strip():
        raise ValueError(f"{setting}: {path}: the first line is empty")
    return SecretStr(first)


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The startup nodes of a `redis+cluster://[user:password@]host:port[,host:port...]` URL."""
    netloc = urlsplit(url).netloc.rsplit("@", 1)[-1]
    nodes: list[tuple[str, int]] = []
    for part in netloc.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"cluster node {part!r} is not host:port; expected {REDIS_FORM}")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def sentinel_target(url: str) -> tuple[list[tuple[str, int]], str, int]:
    """(sentinels, service name, db) of `redis+sentinel://[user:password@]host:port[,...]/SERVICE[/DB]`."""
    parts = urlsplit(url)
    sentinels = cluster_nodes(url)
    service, _, db = parts.path.strip("/").partition("/")
    if not service:
        raise ValueError(f"the master's service name is missing; expected {REDIS_FORM}")
    if db and not db.isdigit():
        raise ValueError(f"database must be a number; expected {REDIS_FORM}")
    return sentinels, unquote(service), int(db or 0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BINLOG_MIRROR_", env_ignore_empty=True, extra="forbid", frozen=True
    )

    mysql: MySQLUrl | None = None
    redis: RedisUrl | None = None
    # The password in a file (a mounted secret), not in the URL: argv shows in `ps`.
    mysql_password_file: Path | None = None
    redis_password_file: Path | None = None
    # TLS to Redis (rediss://, rediss+cluster://, rediss+sentinel://): the CA that signed the
    # server's certificate, and a client certificate + key for servers with tls-auth-clients
    redis_tls_ca_file: Path | None = None
    redis_tls_cert_file: Path | None = None
    redis_tls_key_file: Path | None = None
    mysql_ssl: bool = False  # TLS even without a CA file (verified against the system's CAs)
    mysql_ssl_ca: Path | None = None
    mysql_ssl_cert: Path | None = None
    mysql_ssl_key: Path | None = None
    mysql_ssl_verify: bool = True
    server_id: int = Field(default=4242, ge=1, le=2**32 - 1)
    tables: list[str] = []
    exclude_tables: list[str] = []
    key_prefix: str = Field(default="mirror", pattern=r"^[A-Za-z0-9_.\-]+$")
    start: str = "now"  # now | start | FILE:POS | GTID set
    on_no_checkpoint: Literal["now", "start", "refuse"] = "now"
    # the source's event at the checkpoint is another one (a rebuilt or replaced server):
    # stop, or copy the selected tables again from this source (docs/mirror.md, "History check")
    on_history_mismatch: Literal["stop", "recopy"] = "stop"
    heartbeat_seconds: float = Field(default=1.0, gt=0, le=3600)  # silence > 2.5x: reconnect
    queue_size: int = Field(default=256, ge=1)  # transactions read ahead (the source's queue)
    queue_rows: int = Field(default=20_000, ge=1)  # and at most this many of their rows (memory bound)
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    # API access (docs/api.md, "Authentication"): the control token may do everything, the read
    # token only read (status, metrics, /ws/events); each also from a file's first line (a secret
    # mount). Bound to a non-loopback address with no token, the data and control endpoints are
    # refused unless api_allow_unauthenticated says otherwise.
    api_token: SecretStr | None = None
    api_token_file: Path | None = None
    api_read_token: SecretStr | None = None
    api_read_token_file: Path | None = None
    api_allow_unauthenticated: bool = False
    max_lag_seconds: float = Field(default=30.0, gt=0)
    # mirror (service/sink, docs/mirror.md)
    value_mode: Literal["hash", "json"] = "hash"  # one hash per row, or one JSON string per row
    chunk_rows: int = Field(default=1000, ge=1)  # a bigger transaction is applied in chunks
    plain_inserts: bool = True  # hash layout: insert-only calls as MULTI/EXEC, not the script
    changelog_maxlen: int = Field(default=0, ge=0)  # >0: keep a change-log stream of ~this many entries
    lease_ttl_seconds: float = Field(default=3.0, gt=0.1, le=600)  # writer lease; standby takes over after it
    resync_chunk_rows: int = Field(default=1000, ge=1)  # rows per SELECT when re-reading a table
    # background verifier (docs/mirror.md): rows/s compared with the source; 0 = off
    verify_rows_per_second: float = Field(default=0.0, ge=0)
    verify_repair: bool = False  # rewrite the rows it finds different (else only count them)
    table_step_rows: int = Field(default=500, ge=1)  # rows per call of DROP/TRUNCATE/RENAME/resync work
    ttl_sweep_seconds: float = Field(
        default=1.0, gt=0, le=60
    )  # ttl tables: expired rows' index entries go within it
    api_cors_origins: list[str] = []  # "*" or exact origins; empty = no CORS headers
    ws_buffer_events: int = Field(default=10_000, ge=0)  # ring kept for websocket resume
    ws_queue_events: int = Field(default=1_000, ge=1)  # per subscriber; overflow closes it (1013)
    ws_ping_seconds: float = Field(default=20.0, gt=0)  # websocket ping interval and pong timeout
    # per-table shaping (docs/mirror.md, "Shaping"): `[table."schema.table"]` sections of the
    # config file, a glob allowed, the most specific match wins
    table: dict[str, TableShapeSettings] = {}
    document: dict[str, DocumentSettings] = {}  # [document.NAME] sections: docs/mirror.md, "Documents"

    @model_validator(mode="before")
    @classmethod
    def _password_files(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name in ("mysql", "redis"):
            path = data.get(f"{name}_password_file")
            url = data.get(name)
            if not path or url is None:
                continue
            password = read_secret_file(f"{name}_password_file", Path(path)).get_secret_value()
            if isinstance(url, str):
                url = MySQLUrl.parse(url) if name == "mysql" else RedisUrl.parse(url)
            data[name] = url.with_password(password)
        return _redis_tls_files(data)

    @model_validator(mode="before")
    @classmethod
    def _token_files(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name in ("api_token", "api_read_token"):
            path = data.get(f"{name}_file")
            if not path:
                continue
            if data.get(name):
                raise ValueError(f"{name}_file: {name} is set too; give one of them")
            data[name] = read_secret_file(f"{name}_file", Path(path))
        return data

    @model_validator(mode="after")
    def _distinct_tokens(self) -> Settings:
        if (
            self.api_token is not None
            and self.api_read_token is not None
            and self.api_token.get_secret_value() == self.api_read_token.get_secret_value()
        ):
            raise ValueError(
                "api_read_token: equals api_token; the read token must differ from the control token"
            )
        return self

    @model_validator(mode="after")
    def _cluster_limits(self) -> Settings:
        if self.redis is not None and self.redis.cluster and self.verify_rows_per_second > 0:
            raise ValueError(
                "verify_rows_per_second: the background verifier reads the single-node key layout "
                "and does not run against a Redis Cluster (redis+cluster://) yet; set it to 0"
            )
        if self.redis is not None and self.redis.cluster:
            for pattern, section in self.table_sections().items():
                # a table's rows, entries and bookkeeping are written by one call: one slot
                try:
                    tag = section_tag(section)
                except ValueError as exc:
                    raise ValueError(f'table: [table."{pattern}"]: {exc}') from None
                if tag == self.key_prefix:
                    raise ValueError(
                        f'table: [table."{pattern}"]: key/index: hash tag {{{tag}}} is the slot of the '
                        f"mirror's global keys ({{{self.key_prefix}}}:...); give its templates another tag"
                    )
            try:  # a document's tables in its key's slot (Shapes.placement)
                self.shapes()
            except ConfigError as exc:
                raise ValueError(f"document: {exc}") from None
        return self

    @field_validator("table", "document", mode="before")
    @classmethod
    def _table_json(cls, value: Any) -> Any:
        """BINLOG_MIRROR_TABLE / _DOCUMENT: the sections as one JSON object ({"shop.users": {...}})."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not a JSON object of sections ({exc})") from None
        return value

    @field_validator("document")
    @classmethod
    def _document_names(cls, value: dict[str, DocumentSettings]) -> dict[str, DocumentSettings]:
        for name in value:
            if not re.fullmatch(DOCUMENT_NAME, name):
                raise ValueError(f"document name {name!r}: use letters, digits, '_' and '-'")
        return value

    @field_validator("table")
    @classmethod
    def _table_patterns(cls, value: dict[str, TableShapeSettings]) -> dict[str, TableShapeSettings]:
        for pattern in value:
            if pattern.count(".") != 1:
                raise ValueError(f"table pattern {pattern!r} must be schema.table (globs allowed: db.*)")
        return value

    def table_sections(self) -> dict[str, SectionSettings]:
        """The `[table."…"]` sections, for service.shaping.Shapes."""
        return {pattern: t.section() for pattern, t in self.table.items()}

    def shapes(self) -> Shapes:
        """The tables' shapes and documents these settings ask for (service/shaping.py)."""
        cluster = self.redis is not None and self.redis.cluster
        return Shapes(
            self.table_sections(), self.key_prefix, self.value_mode == "json", self.document, cluster
        )

    @field_validator("redis_tls_ca_file", "redis_tls_cert_file", "redis_tls_key_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                value.open("rb").close()
            except OSError as exc:
                raise ValueError(f"{value}: {exc.strerror}") from None
        return value

    @field_validator("mysql", mode="before")
    @classmethod
    def _parse_mysql(cls, value: Any) -> Any:
        return MySQLUrl.parse(value) if isinstance(value, str) else value

    @field_validator("redis", mode="before")
    @classmethod
    def _parse_redis(cls, value: Any) -> Any:
        return RedisUrl.parse(value) if isinstance(value, str) else value

    @field_validator("api_cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: Any) -> Any:
        return [o.strip() for o in value.split(",") if o.strip()] if isinstance(value, str) else value

    @field_validator("tables", "exclude_tables", mode="before")
    @classmethod
    def _split_patterns(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [p.strip() for p in value.split(",") if p.strip()]
        for pattern in value or []:
            if not isinstance(pattern, str) or pattern.count(".") != 1:
                raise ValueError(f"table pattern {pattern!r} must be schema.table (globs allowed: db.*)")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_settings() merges file, env and flags itself, so env values stay plain text
        # ("db.a,db.b", "mysql://...") rather than pydantic-settings' JSON-for-lists convention.
        return (init_settings,)


def _redis_tls_files(data: dict[str, Any]) -> dict[str, Any]:
    """The redis_tls_* files, carried into the Redis URL's query (every client is built from it)."""
    files = {n: data.get(f"redis_tls_{n}_file") for n in ("ca", "cert", "key")}
    url = data.get("redis")
    if not any(files.values()) or url is None:
        return data
    url = RedisUrl.parse(url) if isinstance(url, str) else url
    scheme = urlsplit(url.url.get_secret_value()).scheme
    given = next(f"redis_tls_{n}_file" for n, v in files.items() if v)
    if scheme not in TLS_SCHEMES:
        raise ValueError(
            f"{given}: the Redis URL is {scheme}://, without TLS: give it as rediss:// "
            "(rediss+cluster://, rediss+sentinel://) to use the TLS files"
        )
    if files["key"] and not files["cert"]:
        raise ValueError("redis_tls_key_file: given without redis_tls_cert_file (the client certificate)")
    ca, cert, key = (str(v) if v else None for v in files.values())
    return {**data, "redis": url.with_tls_files(ca, cert, key)}


_FLAGS = {"key_prefix": "--prefix", "start": "--from"}  # flags named unlike their setting


def _env_values() -> dict[str, str]:
    names = (f"BINLOG_MIRROR_{name.upper()}" for name in Settings.model_fields)
    return {
        name.removeprefix("BINLOG_MIRROR_").lower(): os.environ[name]
        for name in names
        if os.environ.get(name)
    }


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Build Settings from defaults < TOML file < env < overrides; one clear line on error."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}  # where each value came from, for the error message
    config_file = config_file or os.environ.get("BINLOG_MIRROR_CONFIG")
    if config_file:
        path = Path(config_file)
        try:
            from_file = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: not valid TOML ({exc})") from None
        for key in from_file:
            if key not in Settings.model_fields:
                raise ConfigError(f"config file {path}: unknown key '{key}'")
        values.update(from_file)
        origins.update({key: f"key '{key}' in config file {path}" for key in from_file})
    env = _env_values()
    values.update(env)
    origins.update({key: f"env BINLOG_MIRROR_{key.upper()}" for key in env})
    flags = {k: v for k, v in overrides.items() if v is not None}
    values.update(flags)
    origins.update({key: _FLAGS.get(key, f"--{key.replace('_', '-')}") for key in flags})
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origins)) from None


def _describe(exc: ValidationError, origins: dict[str, str] | None = None) -> str:
    err = exc.errors(include_url=False, include_input=False)[0]
    message = err["msg"].removeprefix("Value error, ")
    field = ".".join(str(p) for p in err["loc"])
    if not field:  # a check across settings: its message starts with the setting it names
        named, _, rest = message.partition(" ")
        field = named.rstrip(":") if named.rstrip(":") in Settings.model_fields else "settings"
        message = rest if field != "settings" and rest else message
    if err["type"] == "extra_forbidden":
        message = "unknown setting"
    top = field.split(".")[0]
    origins = origins or {}
    origin = origins.get(top) or origins.get(f"{top}_file") or f"env BINLOG_MIRROR_{top.upper()}"
    return f"invalid setting '{field}' ({origin}): {message}"
