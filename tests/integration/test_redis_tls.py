"""Redis over TLS with a client certificate (redis_tls_ca_file, redis_tls_cert_file,
redis_tls_key_file), against a real redis-server that requires one (`tls-auth-clients yes`) and
listens on TLS only; a CA that did not sign the server's certificate stops `run` with one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from service.devtools.stack import LocalStack
from service.devtools.stack_tls import ensure_tls_files
from service.sink.keys import group_layout
from service.verify import Verifier
from tests.integration.mirror_helpers import (
    KEYS,
    Workload,
    actual,
    create_schema,
    expected,
    mirror_settings,
    replicating,
    settle,
    unique_names,
    until,
    wait_applied,
)
from tests.integration.redis_servers import Server, free_port, servers, start_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TlsFiles = tuple[Path, Path, Path]


def tls_server_lines(ca: Path, cert: Path, key: Path) -> list[str]:
    return [
        f"tls-cert-file {cert}",
        f"tls-key-file {key}",
        f"tls-ca-cert-file {ca}",
        "tls-auth-clients yes",  # a client without a certificate signed by the CA is refused
        "appendonly yes",
    ]


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[Server, TlsFiles]]:
    """A TLS-only redis-server; the stack's throwaway CA signs its certificate, and the same
    certificate serves as the mirror's client certificate (the CA is what the server checks)."""
    ca, cert, key = ensure_tls_files(tmp_path / "tls")
    client = {"ssl_ca_certs": str(ca), "ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    with servers() as started:
        started.append(start_server(tmp_path / "redis", tls_server_lines(ca, cert, key), tls=client))
        yield started[0], (ca, cert, key)


async def test_the_mirror_runs_over_tls_with_a_client_certificate(
    stack: LocalStack, tls_redis: tuple[Server, TlsFiles]
) -> None:
    server, (ca, cert, key) = tls_redis
    db, prefix = unique_names()
    create_schema(stack, db)
    wl = Workload(stack, db, seed=7)
    for _ in range(10):  # copied by the bootstrap
        wl.step(allow_ddl=False)
    settings = mirror_settings(
        stack, db, prefix,
        redis=f"rediss://127.0.0.1:{server.port}/0",
        redis_tls_ca_file=ca, redis_tls_cert_file=cert, redis_tls_key_file=key,
    )  # fmt: skip
    url = settings.redis.url.get_secret_value() if settings.redis else ""
    async with replicating(settings) as rep:
        await asyncio.to_thread(wait_applied, url, prefix, None)  # streaming from now on
        await asyncio.to_thread(lambda: [wl.step() for _ in range(40)])
        await settle(rep, stack)
        assert actual(url, prefix, db) == expected(stack, db)
        report = await Verifier(settings).run()
        assert report.equal, report.differences
    wl.close()
    assert "ssl_certfile" in url and str(settings.redis) == f"rediss://127.0.0.1:{server.port}/0"


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BINLOG_MIRROR_")}
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_ca_that_did_not_sign_the_server_certificate_stops_run_with_one_line(
    stack: LocalStack, tls_redis: tuple[Server, TlsFiles], tmp_path: Path
) -> None:
    info = stack.load()
    assert info is not None
    server, (_, cert, key) = tls_redis
    other_ca, _, _ = ensure_tls_files(tmp_path / "other")  # another throwaway CA
    env = {
        "BINLOG_MIRROR_MYSQL": info.mysql_url,
        "BINLOG_MIRROR_REDIS": f"rediss://127.0.0.1:{server.port}/0",
        "BINLOG_MIRROR_REDIS_TLS_CA_FILE": str(other_ca),
        "BINLOG_MIRROR_REDIS_TLS_CERT_FILE": str(cert),
        "BINLOG_MIRROR_REDIS_TLS_KEY_FILE": str(key),
    }
    done = _run("run", "--no-api", "--tables", "nothing.*", env=env)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "certificate was refused" in errors[0] and "BINLOG_MIRROR_REDIS_TLS_CA_FILE" in errors[0]
    assert "--redis-tls-ca-file" in errors[0] and f"rediss://127.0.0.1:{server.port}/0" in errors[0]


async def test_a_tls_cluster_with_client_certificates(stack: LocalStack, tmp_path: Path) -> None:
    """`rediss+cluster://`: the TLS files reach every node, those found through the slot map too
    (the cluster's query parameters used to be ignored)."""
    ca, cert, key = ensure_tls_files(tmp_path / "tls")
    client = {"ssl_ca_certs": str(ca), "ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    lines = [*tls_server_lines(ca, cert, key), "tls-cluster yes", "cluster-enabled yes"]
    with servers() as started:
        for i in range(3):
            # the bus port chosen too: port + 10000 falls in the ephemeral range, maybe taken
            node_lines = [
                *lines,
                f"cluster-config-file {tmp_path / f'nodes-{i}.conf'}",
                f"cluster-port {free_port()}",
            ]
            started.append(start_server(tmp_path / f"node{i}", node_lines, tls=client))
        nodes = [f"127.0.0.1:{s.port}" for s in started]
        tls_args = ["--tls", "--cacert", str(ca), "--cert", str(cert), "--key", str(key)]
        create = ["redis-cli", *tls_args, "--cluster", "create", *nodes, "--cluster-replicas", "0"]
        subprocess.run([*create, "--cluster-yes"], check=True, capture_output=True, timeout=60)
        for server in started:
            with server.client() as r:
                await until("the cluster", lambda r=r: r.cluster("info")["cluster_state"] == "ok")  # type: ignore[misc]
        db, prefix = unique_names()
        create_schema(stack, db)
        wl = Workload(stack, db, seed=21)
        settings = mirror_settings(
            stack, db, prefix,
            redis=f"rediss+cluster://{nodes[0]}",  # one node: the others come from the slot map
            redis_tls_ca_file=ca, redis_tls_cert_file=cert, redis_tls_key_file=key,
        )  # fmt: skip
        async with replicating(settings) as rep:
            await until("streaming", lambda: rep.status().applied is not None)
            await asyncio.to_thread(lambda: [wl.step(allow_ddl=False) for _ in range(40)])
            await settle(rep, stack)
        wl.close()
        with RedisCluster(host="127.0.0.1", port=started[0].port, ssl=True, **client) as rc:
            for table in KEYS:
                g = group_layout(prefix, db, table)
                members = {m.decode() for m in rc.smembers(g.index_key(db, table))}
                rows = {m: rc.hgetall(f"{g.prefix}:{m}") for m in members}
                assert rows == expected(stack, db)[table], table
