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
