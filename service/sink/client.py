"""The asyncio Redis client the mirror uses: redis-py, with commands packed by hiredis.

redis-py's asyncio connections pack commands in Python (`pack_command`), one bytes join per
argument; an apply script call carries several arguments per row, and packing was a third of the
replicator's CPU on 1,000-row transactions. hiredis (a dependency of `redis[hiredis]`) packs the
same RESP bytes in C; redis-py's sync client already uses it this way.

Its writes are bounded with `asyncio.timeout`, not redis-py's `asyncio.wait_for`: on Python 3.11
`wait_for` swallows a cancellation that arrives as the write completes (CPython gh-86296, fixed in
3.12), and a task cancelled there carried on: 267 of 400 cancellations with `socket_timeout=10`
against a real Redis (tests/integration/test_redis_client_io.py, before this). A session's lease
renewal did so, kept renewing the lease of a session that had ended, and `stop()` waited forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import hiredis
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.errors import ConfigError
from service.settings import CLUSTER_SCHEMES, SENTINEL_SCHEMES, TLS_QUERY, cluster_nodes, sentinel_target

__all__ = ["is_cluster_url", "redis_client", "sentinel_client"]


class _MirrorConnection:
    """Mixed into redis-py's connection classes: hiredis packing, writes bounded safely."""

    socket_timeout: float | None

    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " in head:  # "SCRIPT LOAD": the server wants two arguments
            args = (*head.split(), *args[1:])
        return [hiredis.pack_command(args)]

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        timeout = self.socket_timeout
        if timeout is None:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        self.socket_timeout = None  # else redis-py wraps the write in wait_for()
        try:
            async with asyncio.timeout(timeout):  # the health check's PING included
                await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except TimeoutError as exc:  # as redis-py's own: its retries and callers expect that type
            raise RedisTimeoutError("Timeout writing to socket") from exc
        finally:
            self.socket_timeout = timeout


class _Tcp(_MirrorConnection, Connection):
    pass


class _Tls(_MirrorConnection, SSLConnection):
    pass


class _Unix(_MirrorConnection, UnixDomainSocketConnection):
    pass


class _SentinelReconnect:
    """redis-py (8.1) reconnects a dropped connection in `send_packed_command` straight to the
    address it had, not through the sentinels: after a failover, to the old master, which may
    still accept writes for a while (and lose them when it becomes a replica). Reconnect
    through the sentinels (SentinelManagedConnection.connect) instead."""

    is_connected: bool

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        if not self.is_connected:
            await self.connect()  # type: ignore[attr-defined]
        await super().send_packed_command(command, check_health)  # type: ignore[misc]


class _SentinelTcp(_SentinelReconnect, _MirrorConnection, SentinelManagedConnection):
    pass


class _SentinelTls(_SentinelReconnect, _MirrorConnection, SentinelManagedSSLConnection):
    pass


_MIRROR_CONNECTIONS: dict[type[Any], type[Any]] = {
    Connection: _Tcp,
    SSLConnection: _Tls,
    UnixDomainSocketConnection: _Unix,
    SentinelManagedConnection: _SentinelTcp,
    SentinelManagedSSLConnection: _SentinelTls,
}


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def redis_client(url: str, *, cluster_ok: bool = False, **options: Any) -> Redis:
    """`Redis.from_url(url, **options)` with the connections above (redis-py picks the
    connection class from the URL's scheme; this swaps in the same class with the mixin).

    A `redis+cluster://` URL gives redis-py's RedisCluster (typed as Redis: the callers that
    accept one, `cluster_ok`, only use the commands both have, or check `is_cluster_url`).
    The others refuse it: they read and write the single-node key layout."""
    if is_cluster_url(url):
        if not cluster_ok:
            raise ConfigError(
                "this command does not support a Redis Cluster (redis+cluster://) yet: only "
                "`binlog-mirror run` does (docs/mirror.md, Redis Cluster)"
            )
        return cast(Redis, cluster_client(url, **options))
    if urlsplit(url).scheme in SENTINEL_SCHEMES:
        return sentinel_client(url, **options)
    client = Redis.from_url(url, **options)
    pool = client.connection_pool
    pool.connection_class = _MIRROR_CONNECTIONS.get(pool.connection_class, pool.connection_class)
    return client


def cluster_client(url: str, **options: Any) -> RedisCluster:
    """redis-py's asyncio RedisCluster for `redis+cluster://[user:password@]host:port[,...]`: it
    follows MOVED/ASK redirects and refreshes the slot map itself."""
    parts = urlsplit(url)
    nodes = [ClusterNode(host, port) for host, port in cluster_nodes(url)]
    if parts.username:
        options.setdefault("username", unquote(parts.username))
    if parts.password:
        options.setdefault("password", unquote(parts.password))
    if parts.scheme.startswith("rediss"):
        options.setdefault("ssl", True)
        options.update(_tls_options(url))
    # a master that is down leaves its slots unserved: the others keep answering (the mirror's
    # calls to that master fail and are retried, docs/mirror.md)
    client = RedisCluster(startup_nodes=nodes, require_full_coverage=False, **options)
    # the connections above for every node, those it learns of later included (the nodes
    # manager builds them from the same connection_kwargs)
    kwargs = client.connection_kwargs
    mixed = _MIRROR_CONNECTIONS.get(kwargs["connection_class"], kwargs["connection_class"])
    kwargs["connection_class"] = mixed
    for node in client.startup_nodes:
        node.connection_class = mixed
    return client


def _tls_options(url: str) -> dict[str, Any]:
    """The TLS files of the URL's query (settings redis_tls_*_file put them there)."""
    query = dict(parse_qsl(urlsplit(url).query))
    names = (*TLS_QUERY.values(), "ssl_cert_reqs")
    return {name: query[name] for name in names if name in query}


class _Sentinels(Sentinel):
    """redis-py's Sentinel, with a short error when no sentinel names a master (its own carries
    the repr of every sentinel client, a few hundred characters each)."""

    async def discover_master(self, service_name: str) -> Any:
        try:
            return await super().discover_master(service_name)
        except MasterNotFoundError:
            where = ",".join(
                f"{s.connection_pool.connection_kwargs.get('host')}:{s.connection_pool.connection_kwargs.get('port')}"
                for s in self.sentinels
            )
            raise MasterNotFoundError(
                f"no sentinel at {where} answered with a master of {service_name!r} that is up"
            ) from None


class _SentinelMaster(Redis):
    """The master of a Sentinel service; closing it closes the sentinels' connections too."""

    sentinels: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinels is not None:
            await self.sentinels.aclose()


def sentinel_client(url: str, **options: Any) -> Redis:
    """The master of `redis+sentinel://[user:password@]host:port[,...]/SERVICE[/DB]`, asked of the
    sentinels at each new connection. After a failover the old master answers writes with
    READONLY, which redis-py turns into a ConnectionError: the session ends as for a Redis
    restart and the next one connects to the new master (docs/mirror.md, "Redis Sentinel").

    The user and password are the Redis servers'; the sentinels are asked without them
    (`rediss+sentinel://`: over TLS, with the same files)."""
    parts = urlsplit(url)
    sentinels, service, db = sentinel_target(url)
    tls = parts.scheme.startswith("rediss")
    to_sentinels: dict[str, Any] = {k: v for k, v in options.items() if k.startswith("socket_")}
    # each sentinel asked once per lookup: redis-py's default retries a dead one with backoff for
    # seconds before it asks the next (often the sentinel beside a dead master is dead too)
    to_sentinels["retry"] = Retry(NoBackoff(), 0)
    if tls:
        to_sentinels.update(ssl=True, **_tls_options(url))
    sentinel = _Sentinels(sentinels, sentinel_kwargs=to_sentinels)  # type: ignore[no-untyped-call]
    if parts.username:
        options.setdefault("username", unquote(parts.username))
    if parts.password:
        options.setdefault("password", unquote(parts.password))
    kind = SentinelManagedConnection
    if tls:
        kind = SentinelManagedSSLConnection
        options.update(_tls_options(url))
    client = sentinel.master_for(
        service, redis_class=_SentinelMaster, connection_class=_MIRROR_CONNECTIONS[kind], db=db, **options
    )
    assert isinstance(client, _SentinelMaster)
    client.sentinels = sentinel
    return client
