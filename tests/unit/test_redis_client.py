"""The mirror's Redis client packs commands with hiredis: the bytes must be redis-py's own."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection

from service.sink.client import redis_client


@pytest.mark.parametrize(
    "args",
    [
        (b"EVALSHA", "3f0a", 2, "mirror:db:t:1", "mirror:__checkpoint", "ü", b"\x00\xff", 0, -7, 1.5),
        ("SCRIPT LOAD", "return 1"),
        ("SET", "k", memoryview(b"v"), "PX", 600),
    ],
)
def test_same_bytes_as_redis_py(args: tuple[object, ...]) -> None:
    ours = redis_client("redis://127.0.0.1:1/0").connection_pool.make_connection()
    assert b"".join(ours.pack_command(*args)) == b"".join(Connection().pack_command(*args))


def test_connection_class_follows_the_scheme() -> None:
    for url, kind in (("redis://h:1/0", "_Tcp"), ("rediss://h:1/0", "_Tls"), ("unix:///tmp/r.sock", "_Unix")):
        assert redis_client(url).connection_pool.connection_class.__name__ == kind


async def test_tls_files_reach_every_kind_of_client() -> None:
    """The files the settings put in the URL's query: redis-py reads them for rediss://; the
    cluster and sentinel clients are given them here (the cluster's used to be ignored)."""
    from service.sink.client import cluster_client, sentinel_client

    query = "ssl_ca_certs=%2Fca.pem&ssl_certfile=%2Fc.pem&ssl_keyfile=%2Fk.pem&ssl_cert_reqs=required"
    want = {"ssl_ca_certs": "/ca.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem"}
    single = redis_client(f"rediss://h:1/0?{query}")
    cluster = cluster_client(f"rediss+cluster://h:1,h:2?{query}")
    sentinel = sentinel_client(f"rediss+sentinel://s:26379/svc/2?{query}")
    for kwargs in (
        single.connection_pool.connection_kwargs,
        cluster.connection_kwargs,
        sentinel.connection_pool.connection_kwargs,
        sentinel.sentinels.sentinels[0].connection_pool.connection_kwargs,  # type: ignore[attr-defined]
    ):
        assert {k: kwargs.get(k) for k in want} == want
    assert sentinel.connection_pool.connection_class.__name__ == "_SentinelTls"
    assert sentinel.connection_pool.connection_kwargs["db"] == 2
    plain = sentinel_client("redis+sentinel://u:pw@s:26379,t:26380/svc")
    assert plain.connection_pool.connection_class.__name__ == "_SentinelTcp"
    assert plain.connection_pool.connection_kwargs["password"] == "pw"
    for client in (single, cluster, sentinel, plain):
        await client.aclose()


async def test_the_master_check_goes_on_when_no_sentinel_answers(caplog: pytest.LogCaptureFixture) -> None:
    """A sentinel outage alone does not end the session: the master the mirror writes to is still
    there (a failover needs the sentinels). Said once, shortly (port 1: nothing listens)."""
    from service.sink.client import sentinel_client
    from service.sink.server import check_master

    client = sentinel_client("redis+sentinel://127.0.0.1:1/svc", socket_connect_timeout=1)
    for _ in range(3):
        await check_master(client)
    said = [r.getMessage() for r in caplog.records if "asking the sentinels" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0] == (
        "asking the sentinels for the master of 'svc': MasterNotFoundError: no sentinel at 127.0.0.1:1 "
        "answered with a master of 'svc' that is up; the mirror goes on with the master it has"
    )
    await client.aclose()
