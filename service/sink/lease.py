"""WriterLease: the lease (`{prefix}:__lease`) that makes one instance the mirror's writer, and the
probes (renewal, ping) that must end a session before the lease could expire."""

from __future__ import annotations

import asyncio
import contextlib

from redis import exceptions as rexc
from redis.asyncio import Redis

from service.errors import LeaseLost, SinkError
from service.sink.chain import ApplyChain
from service.sink.diagnose import lease_loss
from service.sink.keys import KeyLayout
from service.sink.replies import map_redis_errors, redis_access_denied
from service.sink.scripts import ACQUIRE, RELEASE, RENEW
from service.sink.unreachable import UNREACHABLE

__all__ = ["WriterLease", "ping"]


class WriterLease:
    """The lease of the writer whose token `chain` carries in its calls."""

    def __init__(self, redis: Redis, layout: KeyLayout, chain: ApplyChain, ttl: float) -> None:
        self.redis = redis
        self.layout = layout
        self.chain = chain
        self.ttl = ttl  # seconds
        self.acquire_script = redis.register_script(ACQUIRE)
        self.renew_script = redis.register_script(RENEW)
        self.release_script = redis.register_script(RELEASE)

    @property
    def probe_timeout(self) -> float:
        """How long a lease renewal or a ping may take: half the lease's TTL, so a Redis that went
        silent ends the session (and readiness) before the lease could expire, not after the
        client's socket timeout."""
        return self.ttl / 2

    async def acquire(self) -> bool:
        """Take the lease if free (or already ours); True if this instance is now the writer.
        Each taking counts in `__fence`, which the plain apply calls of a writer before watch."""
        ttl = int(self.ttl * 1000)
        keys = [self.layout.lease_key, self.layout.fence_key]
        with map_redis_errors("taking the writer lease"):
            return bool(await self.acquire_script(keys=keys, args=[self.chain.token, ttl]))

    async def renew(self) -> bool:
        """Extend the lease; False when it expired or another instance holds it."""
        ttl = int(self.ttl * 1000)
        with map_redis_errors("renewing the writer lease"):
            async with asyncio.timeout(self.probe_timeout):
                keys = [self.layout.lease_key]
                return bool(await self.renew_script(keys=keys, args=[self.chain.token, ttl]))

    async def lost(self, exc: LeaseLost) -> LeaseLost:
        """`exc` saying what happened to the lease, as Redis shows it now: another instance holds
        it, it expired, or Redis lost the mirror's keys (FLUSHALL, a restart without persistence)."""
        chain = self.chain
        why = await lease_loss(self.redis, self.layout, chain.token, had_checkpoint=bool(chain.prev))
        return exc if why is None else LeaseLost(why)

    async def release(self) -> bool:
        """Delete the lease if this instance holds it; False if not held or Redis is unreachable."""
        with contextlib.suppress(SinkError), map_redis_errors("releasing the writer lease"):
            async with asyncio.timeout(self.probe_timeout):  # a stop must not wait for a silent Redis
                keys = [self.layout.lease_key]
                return bool(await self.release_script(keys=keys, args=[self.chain.token]))
        return False


async def ping(redis: Redis, timeout: float) -> tuple[bool, str | None]:
    """Whether Redis answers within `timeout`, and why not. Refused credentials raise
    SinkAccessDenied (permanent: waiting cannot help)."""
    try:
        async with asyncio.timeout(timeout):
            ok = bool(await redis.ping())
    except (rexc.AuthenticationError, rexc.AuthorizationError, rexc.NoPermissionError) as exc:
        raise redis_access_denied("ping", exc) from exc
    except rexc.ResponseError as exc:
        if str(exc).startswith(("WRONGPASS", "NOAUTH", "NOPERM")):
            raise redis_access_denied("ping", exc) from exc
        return False, f"{type(exc).__name__}: {exc}"
    except UNREACHABLE as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return ok, None
