"""The asyncio Redis client the mirror uses: redis-py, with commands packed by hiredis.

redis-py's asyncio connections pack commands in Python (`pack_command`), one bytes join per
argument; an apply script call carries several arguments per row, and packing was a third of the
replicator's CPU on 1,000-row transactions. hiredis (a dependency of `redis[hiredis]`) packs the
same RESP bytes in C; redis-py's sync client already uses it this way.
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

__all__ = ["redis_client"]


class _HiredisPacking:
    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " in head:  # "SCRIPT LOAD": the server wants two arguments
            args = (*head.split(), *args[1:])
        return [hiredis.pack_command(args)]


class _Tcp(_HiredisPacking, Connection):
    pass


class _Tls(_HiredisPacking, SSLConnection):
    pass


class _Unix(_HiredisPacking, UnixDomainSocketConnection):
    pass


_HIREDIS_PACKING: dict[type[Any], type[Any]] = {
    Connection: _Tcp,
    SSLConnection: _Tls,
    UnixDomainSocketConnection: _Unix,
}


def redis_client(url: str, **options: Any) -> Redis:
    """`Redis.from_url(url, **options)` with hiredis command packing (redis-py picks the
    connection class from the URL's scheme; this swaps in the same class with hiredis packing)."""
    client = Redis.from_url(url, **options)
    pool = client.connection_pool
    pool.connection_class = _HIREDIS_PACKING.get(pool.connection_class, pool.connection_class)
    return client
