"""The writer lease as the replicator holds it: wait for it (standby), renew it during a session.

Only one instance writes a mirror: it holds the lease key (`RedisMirror.acquire_lease`); the
others wait here as standbys. A session renews it every ttl/3; `renew_lease` raises LeaseLost
when another instance took it, which ends the session (`watch`) and sends the replicator back
to `wait()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from service.pipeline.progress import Progress
from service.sink.mirror import RedisMirror

__all__ = ["LeaseKeeper", "sleep_unless", "watch"]

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(
        self, mirror: RedisMirror, ttl: float, progress: Progress, stop: asyncio.Event, redis_url: str
    ) -> None:
        self.mirror, self.ttl, self.progress, self._stop = mirror, ttl, progress, stop
        self.redis_url = redis_url  # redacted, for the log

    async def wait(self) -> None:
        """Until this instance holds the lease, or stop is set."""
        progress = self.progress
        waited: set[bool] = set()  # the reasons already logged: True = standby, False = no Redis
        while not self._stop.is_set():
            progress.redis_ok = await self.mirror.ping()
            if progress.redis_ok and await self.mirror.acquire_lease():
                if not progress.leader:  # taken, not kept across a session restart: counts
                    progress.lease_acquisitions += 1
                progress.leader, progress.standby = True, False
                if True in waited:
                    log.info("took over the writer lease (instance %s)", self.mirror.token)
                return
            # a standby only while it sees the other holder: with Redis unreachable, nobody may hold it
            progress.standby = progress.redis_ok
            if progress.redis_ok:  # another instance holds it: this one is no longer the writer
                progress.leader = False
            if progress.redis_ok not in waited:
                if progress.redis_ok:
                    lease_key = self.mirror.layout.lease_key
                    log.info("standby: another instance holds the writer lease %s", lease_key)
                else:  # not "standby": nobody may hold the lease, it just cannot be seen
                    log.warning(
                        "waiting for Redis at %s to take the writer lease: unreachable (%s)",
                        self.redis_url,
                        self.mirror.ping_error,
                    )
                waited.add(progress.redis_ok)
            await sleep_unless(self._stop, self.ttl / 3)

    async def renew_loop(self) -> None:
        """Renew until cancelled; raises LeaseLost (or SinkError) when renewing fails."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            await self.mirror.renew_lease()
            self.progress.redis_ok = True

    async def release(self) -> None:
        if self.progress.leader and await self.mirror.release_lease():
            log.info("writer lease released")


async def watch(task: asyncio.Task[None]) -> None:
    """Inside the session's TaskGroup: fail with the outer task's error (LeaseLost) when it fails."""
    await asyncio.shield(task)


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep, or less if `stop` is set. Not asyncio.wait_for(): on Python 3.11 it can swallow a
    cancellation (service/sink/client.py)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
