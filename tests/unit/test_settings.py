from __future__ import annotations

from pathlib import Path

import pytest

from service.errors import ConfigError
from service.settings import load_settings

SECRET = "s3cr3t-pw"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("BINLOG_MIRROR_"):
            monkeypatch.delenv(name)


def test_urls_parse_and_never_print_the_password() -> None:
    s = load_settings(mysql=f"mysql://repl:{SECRET}@db.example:3307", redis="redis://:pw@cache:6380/2")
    assert s.mysql is not None and s.redis is not None
    assert (s.mysql.host, s.mysql.port, s.mysql.user) == ("db.example", 3307, "repl")
    assert s.mysql.password.get_secret_value() == SECRET
    assert SECRET not in repr(s) and SECRET not in str(s.mysql)
    assert str(s.redis) == "redis://***@cache:6380/2"


def test_env_then_flags_then_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "mirror.toml"
    config.write_text('key_prefix = "fromfile"\nserver_id = 7\ntables = ["shop.*"]\n')
    monkeypatch.setenv("BINLOG_MIRROR_SERVER_ID", "8")
    monkeypatch.setenv("BINLOG_MIRROR_TABLES", "shop.orders, shop.items")
    s = load_settings(config, server_id=9)
    assert s.key_prefix == "fromfile"
    assert s.server_id == 9
    assert s.tables == ["shop.orders", "shop.items"]


@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        pytest.param(
            {"mysql": f"postgres://u:{SECRET}@h:1"}, "mysql", "mysql://user:password@host:port", id="scheme"
        ),
        pytest.param({"mysql": f"mysql://u:{SECRET}@h:notaport"}, "mysql", "port", id="mysql-port"),
        pytest.param({"mysql": "mysql://@h:3306"}, "mysql", "mysql://user:password@host:port", id="no-user"),
        pytest.param({"redis": "http://cache:6379"}, "redis", "redis://", id="redis-scheme"),
        pytest.param({"redis": "redis://cache:6379/x"}, "redis", "database must be a number", id="redis-db"),
        pytest.param({"server_id": "0"}, "server_id", "greater than or equal to 1", id="server-id-low"),
        pytest.param({"server_id": "abc"}, "server_id", "integer", id="server-id-type"),
        pytest.param({"tables": "shop"}, "tables", "schema.table", id="table-pattern"),
        pytest.param({"key_prefix": "a b"}, "key_prefix", "pattern", id="key-prefix"),
        pytest.param({"api_port": "70000"}, "api_port", "less than or equal to 65535", id="api-port"),
        pytest.param({"heartbeat_seconds": "-1"}, "heartbeat_seconds", "greater than 0", id="heartbeat"),
        pytest.param(
            {"on_no_checkpoint": "maybe"}, "on_no_checkpoint", "'now', 'start' or 'refuse'", id="policy"
        ),
        pytest.param({"no_such_setting": "1"}, "no_such_setting", "unknown setting", id="unknown"),
    ],
)
def test_each_bad_value_is_one_clear_line(overrides: dict[str, str], field: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(**overrides)
    message = str(info.value)
    assert "\n" not in message
    assert f"'{field}'" in message and expected in message
    assert SECRET not in message


def test_bad_config_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("server_id = \n")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_settings(bad)
    with pytest.raises(ConfigError, match="missing.toml"):
        load_settings(tmp_path / "missing.toml")


def test_an_unknown_toml_key_is_named_as_a_key_of_the_file(tmp_path: Path) -> None:
    config = tmp_path / "mirror.toml"
    config.write_text('bogus = 1\nkey_prefix = "x"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert str(info.value) == f"config file {config}: unknown key 'bogus'"


def test_an_invalid_value_names_where_it_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "mirror.toml"
    config.write_text("server_id = 0\n")
    with pytest.raises(ConfigError, match=rf"'server_id' \(key 'server_id' in config file {config}\)"):
        load_settings(config)
    monkeypatch.setenv("BINLOG_MIRROR_SERVER_ID", "0")
    with pytest.raises(ConfigError, match=r"'server_id' \(env BINLOG_MIRROR_SERVER_ID\)"):
        load_settings()
    monkeypatch.delenv("BINLOG_MIRROR_SERVER_ID")
    with pytest.raises(ConfigError, match=r"'key_prefix' \(--prefix\)"):
        load_settings(key_prefix="a b")


def test_passwords_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mysql").write_text(f"{SECRET}\n")
    (tmp_path / "redis").write_text("p@ss:w/rd\n")
    monkeypatch.setenv("BINLOG_MIRROR_REDIS_PASSWORD_FILE", str(tmp_path / "redis"))
    s = load_settings(
        mysql="mysql://repl@db:3306", redis="redis://cache:6380/2", mysql_password_file=tmp_path / "mysql"
    )
    assert s.mysql is not None and s.mysql.password.get_secret_value() == SECRET
    assert s.redis is not None and s.redis.url.get_secret_value() == "redis://:p%40ss%3Aw%2Frd@cache:6380/2"
    assert str(s.redis) == "redis://***@cache:6380/2" and SECRET not in repr(s)
    named = r"'mysql_password_file' \(--mysql-password-file\): .*nope: No such file"
    with pytest.raises(ConfigError, match=named):
        load_settings(mysql="mysql://repl@db:3306", mysql_password_file=tmp_path / "nope")


def test_background_verifier_is_refused_on_a_cluster() -> None:
    with pytest.raises(ConfigError, match="verify_rows_per_second"):
        load_settings(
            None,
            mysql="mysql://u@h:3306",
            redis="redis+cluster://h:7000",
            tables=["a.*"],
            verify_rows_per_second=5,
        )


def test_redis_tls_files_go_into_the_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ca", "cert", "key"):
        (tmp_path / f"{name}.pem").write_text("x")
    monkeypatch.setenv("BINLOG_MIRROR_REDIS_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    s = load_settings(
        redis="rediss://:pw@cache:6380/2",
        redis_tls_cert_file=tmp_path / "cert.pem",
        redis_tls_key_file=tmp_path / "key.pem",
    )
    assert s.redis is not None and str(s.redis) == "rediss://***@cache:6380/2"
    url = s.redis.url.get_secret_value()
    assert url.startswith("rediss://:pw@cache:6380/2?ssl_ca_certs=")
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_cert_reqs=required"):
        assert name in url


@pytest.mark.parametrize(
    ("redis", "files", "expected"),
    [
        (
            "rediss://cache:6380/0",
            {"redis_tls_ca_file": "nope.pem"},
            "invalid setting 'redis_tls_ca_file' (--redis-tls-ca-file): {tmp}/nope.pem: "
            "No such file or directory",
        ),
        (
            "redis://cache:6380/0",
            {"redis_tls_ca_file": "ca.pem"},
            "invalid setting 'redis_tls_ca_file' (--redis-tls-ca-file): the Redis URL is redis://, without "
            "TLS: give it as rediss:// (rediss+cluster://, rediss+sentinel://) to use the TLS files",
        ),
        (
            "rediss+cluster://h1:7000,h2:7001",
            {"redis_tls_key_file": "ca.pem"},
            "invalid setting 'redis_tls_key_file' (--redis-tls-key-file): given without "
            "redis_tls_cert_file (the client certificate)",
        ),
    ],
)
def test_bad_redis_tls_settings_are_one_line(
    tmp_path: Path, redis: str, files: dict[str, str], expected: str
) -> None:
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(ConfigError) as err:
        load_settings(redis=redis, **{k: tmp_path / v for k, v in files.items()})
    assert str(err.value) == expected.format(tmp=tmp_path)


def test_sentinel_urls() -> None:
    from service.settings import sentinel_target

    s = load_settings(redis="redis+sentinel://mirror:pw@s1:26379,s2:26380/mymaster/3")
    assert s.redis is not None and s.redis.sentinel and not s.redis.cluster
    assert str(s.redis) == "redis+sentinel://***@s1:26379,s2:26380/mymaster/3"
    assert sentinel_target(s.redis.url.get_secret_value()) == ([("s1", 26379), ("s2", 26380)], "mymaster", 3)
    assert sentinel_target("rediss+sentinel://s1:26379/m") == ([("s1", 26379)], "m", 0)
    for bad, why in (
        ("redis+sentinel://s1:26379", "service name is missing"),
        ("redis+sentinel://s1:26379/m/x", "database must be a number"),
        ("redis+sentinel://s1/m", "not host:port"),
    ):
        with pytest.raises(ConfigError, match=why):
            load_settings(redis=bad)
