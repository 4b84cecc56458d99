"""The background verifier (docs/mirror.md, "Background verifier"): off by default
(`verify_rows_per_second` 0). When on, it walks the selected tables over and over with the code of
`binlog-mirror verify` (service/verify.py): key-range chunks read from the source, compared with
their Redis keys, suspects read again once the mirror has applied past them. Its budget is rows/s
read from the source; it has its own source connection and Redis client and runs in its own task
of the session, so the apply never waits for it. A difference it confirms is counted
(`binlog_mirror_drift_rows_total{table, kind}`, and per table in `/tables`) and, with
`verify_repair`, rewritten through the sink under the service's writer lease
(`VerifyRun.repair_live`: fenced by the checkpoint chain).

It never stops replication: its errors are logged and the pass is tried again later.
"""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import Counter

from service.errors import ReplicatorError
from service.pipeline.progress import Progress, TableCounters
from service.settings import Settings
from service.sink.client import redis_client
from service.sink.mirror import MirrorOptions, RedisMirror
from service.transport.connection import close_connection, connect, map_errors, server_info
from service.verify import Difference, Verifier, VerifyRun

__all__ = ["DRIFT_KINDS", "BackgroundVerifier", "drift_counter"]

log = logging.getLogger(__name__)

# verify's kinds -> the metric's
DRIFT_KINDS = {"differs": "changed", "missing": "missing", "extra": "extra", "entries": "entries"}
RETRY_SECONDS = 10.0  # after a pass failed (source or Redis away: the session handles those)
PAUSE_SECONDS = 1.0  # between two passes over the tables


def drift_counter() -> Counter:
    """Not registered anywhere: the API registers it in its app registry (api/metrics.py)."""
    return Counter(
        "binlog_mirror_drift_rows_total",
        "Rows the background verifier found different from the source (kind changed: a field "
        "differs; missing: not in Redis; extra: in Redis, not on the source)",
        ["table", "kind"],
        registry=None,
    )


class BackgroundVerifier:
    def __init__(self, settings: Settings, progress: Progress, token: str, drift: Counter) -> None:
        self.settings = settings
        self.rate = settings.verify_rows_per_second
        self.repair = settings.verify_repair
        self.progress = progress
        self.token = token  # the service's writer lease: repairs are fenced by it
        self.drift = drift
        self.passes = 0
        chunk = max(1, min(1000, int(self.rate)))
        self._verify = Verifier(settings, chunk_rows=chunk)

    async def run(self) -> None:
        """Verify pass after pass until cancelled; never raises but CancelledError."""
        while True:
            try:
                await self._pass()
                self.passes += 1
                await asyncio.sleep(PAUSE_SECONDS)
            except ReplicatorError as exc:
                log.warning("background verify pass failed (%s); again in %gs", exc, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)
            except Exception:  # a bug must not stop replication
                log.exception("background verify pass failed; again in %gs", RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)

    async def _pace(self, rows: int) -> None:
        await asyncio.sleep(rows / self.rate)

    async def _pass(self) -> None:
        v, settings = self._verify, self.settings
        assert settings.redis is not None
        conn = await connect(settings)
        redis = redis_client(settings.redis.url.get_secret_value(), socket_timeout=10)
        options = MirrorOptions(
            json_mode=v.json_mode,
            chunk_size=settings.chunk_rows,
            changelog_maxlen=settings.changelog_maxlen or None,
            lease_ttl=settings.lease_ttl_seconds,
        )
        mirror = RedisMirror(
            redis,
            v.layout,
            v.catalog.key_columns,
            options,
            token=self.token,
            derive_of=v.catalog.derive_spec,
            json_of=v.catalog.shapes.json_of,
        )
        try:
            with map_errors("background verify"):
                async with conn.cursor() as cur:
                    await cur.execute("SET SESSION time_zone = '+00:00'")  # TIMESTAMPs as UTC
            run = VerifyRun(v, conn, await server_info(conn), redis, mirror, pace=self._pace)
            for schema, table in await v.catalog.wanted_tables(conn):
                t = await v.catalog.load(conn, schema, table)
                report, suspects = await run.check_table(t)
                counters = self.progress.tables.setdefault((schema, table), TableCounters())
                for d in report.differences:
                    self._count(d, counters)
                repaired = 0
                if self.repair and suspects and report.keyed:
                    repaired = await run.repair_live(t, sorted(suspects))
                    counters.repaired += repaired
                counters.verified_ts = time.time()
                if report.differences:
                    log.warning(
                        "background verify: %s.%s differs from the source in %d row(s)%s",
                        schema,
                        table,
                        len(report.differences),
                        f"; {repaired} repaired" if self.repair else " (verify_repair is off)",
                    )
        finally:
            # never release_lease(): the lease is the service's
            await mirror.close()
            await redis.aclose()
            await close_connection(conn)

    def _count(self, d: Difference, counters: TableCounters) -> None:
        kind = DRIFT_KINDS.get(d.kind, d.kind)
        self.drift.labels(f"{d.schema}.{d.table}", kind).inc()
        counters.drift[kind] = counters.drift.get(kind, 0) + 1
