"""What the mirror asks of its Redis (docs/mirror.md, "What the mirror asks of its Redis"),
checked from INFO at every session start and every few seconds while it runs: managed Redis
services often rename CONFIG away.

A Redis that may evict keys stops the mirror. When it has evicted keys already (`evicted_keys`),
the mirror may be incomplete: the checkpoint hash's recopy marker is set (service/sink/checkpoints.py)
so that the next start copies the selected tables again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.sentinel import SentinelConnectionPool

from service.errors import ConfigError, SinkError
from service.sink.checkpoints import RECOPY_FIELD
from service.sink.replies import map_redis_errors

__all__ = ["check_info", "check_master", "check_server", "mark_recopy"]

log = logging.getLogger(__name__)

SENTINEL_TIMEOUT = 2.0  # seconds the master check waits for the sentinels' answer


async def check_server(redis: Redis, checkpoint_key: str, *, warned_aof: bool = False) -> bool:
    """Raise ConfigError for a Redis Cluster node given as one Redis, or a Redis that may evict
    keys; returns whether the no-append-only-file warning has been given (`warned_aof`: already)."""
    with map_redis_errors("reading the Redis server's settings"):
        info = await redis.info("memory", "persistence", "cluster", "stats")
    await check_master(redis)
    if int(info.get("cluster_enabled", 0)):
        raise ConfigError(
            "this Redis is a Redis Cluster node: give it as a cluster, redis+cluster://host:port"
            "[,host:port...] (the mirror then applies each table's rows in that table's slot, "
            "docs/mirror.md); a plain redis:// URL writes a transaction's rows, whatever their "
            "hash slots, in one atomic call"
        )
    return await check_info(redis, checkpoint_key, info, warned_aof=warned_aof)


async def check_master(redis: Redis) -> None:
    """Behind Redis Sentinel: raise SinkError when a connection of this client still points at
    another server than the master the sentinels name now (a failover). The old master may accept
    writes for a while after it (until the sentinels turn it into a replica), and those are lost;
    the session that ends here resumes from the new master's checkpoint and applies them again
    (docs/mirror.md, "Redis Sentinel"). Without this check an idle mirror would report a position
    the new master does not hold until the next source transaction."""
    pool = redis.connection_pool
    if not isinstance(pool, SentinelConnectionPool):
        return
    try:
        with map_redis_errors(f"asking the sentinels for the master of {pool.service_name!r}"):
            # bounded: redis-py retries an unreachable sentinel with backoff for seconds
            async with asyncio.timeout(SENTINEL_TIMEOUT):
                master = await pool.sentinel_manager.discover_master(pool.service_name)
    except SinkError as exc:
        if exc.permanent:  # a sentinel that wants a password (they are asked without one)
            raise
        # no sentinel answers (or none sees a master up): the writes say whether the master is
        # still there; a sentinel outage alone must not stop the mirror. Logged once per outage.
        if not getattr(pool, "_mirror_sentinels_silent", False):
            log.warning("%s; the mirror goes on with the master it has", exc)
            pool._mirror_sentinels_silent = True  # type: ignore[attr-defined]
        return
    pool._mirror_sentinels_silent = False  # type: ignore[attr-defined]
    # redis-py asks the sentinels only when a connection connects: one opened before the
    # failover (the apply channel's, held for a whole session) keeps writing to the old master
    conns = [*pool._get_free_connections(), *pool._get_in_use_connections()]
    old = {(getattr(c, "host", ""), getattr(c, "port", 0)) for c in conns if c.is_connected} - {master}
    if old:
        # every one, those in use included (the apply channel's): a command on a dropped
        # connection reconnects through the sentinels (service/sink/client.py)
        await pool.disconnect(inuse_connections=True)
        was = ", ".join(f"{h}:{p}" for h, p in sorted(old))
        raise SinkError(
            f"the Redis master of {pool.service_name!r} is now {master[0]}:{master[1]}, no longer "
            f"{was} (a Sentinel failover): resuming from the checkpoint stored on the new master"
        )


async def check_info(redis: Redis, checkpoint_key: str, info: Mapping[str, Any], *, warned_aof: bool) -> bool:
    """The eviction and persistence checks on one server's INFO (on a cluster: each master's)."""
    policy = str(info.get("maxmemory_policy", "noeviction"))
    if int(info.get("maxmemory", 0)) > 0 and policy.startswith("allkeys-"):
        evicted = int(info.get("evicted_keys", 0))
        if evicted:
            await mark_recopy(redis, checkpoint_key, f"Redis evicted keys (maxmemory-policy {policy})")
            lost = (
                f"Redis has evicted {evicted} key(s) since it started: the mirror is now "
                "incomplete (rows or key indexes may be gone). It is marked for a re-copy: the next "
                "start copies the selected tables again. "
            )
        else:
            lost = "No key was evicted yet (evicted_keys 0): the mirror is still complete. "
        raise ConfigError(
            f"this Redis has maxmemory-policy {policy} and a maxmemory limit: it may evict "
            "mirrored rows and the mirror's own keys (checkpoint, key indexes), and the mirror "
            f"would silently stop matching the source. {lost}Set maxmemory-policy noeviction "
            "(writes then wait while Redis is full) or a volatile-* policy, or give the mirror a "
            "Redis of its own"
        )
    if not warned_aof and not int(info.get("aof_enabled", 0)):
        log.warning(
            "this Redis keeps no append-only file (appendonly no): after a Redis restart the "
            "mirror resumes from the checkpoint of its last RDB snapshot, if any (the binlog "
            "must still hold that position), else as on_no_checkpoint says"
        )
        return True
    return warned_aof


async def mark_recopy(redis: Redis, checkpoint_key: str, reason: str) -> None:
    """Persist that the mirror is incomplete: the next start copies the selected tables again
    (the checkpoint hash's recopy field; the checkpoint of the next apply clears it)."""
    with map_redis_errors("marking the mirror for a re-copy"):
        await redis.hset(checkpoint_key, RECOPY_FIELD, reason)
    log.warning("the mirror is marked for a re-copy of the selected tables: %s", reason)
