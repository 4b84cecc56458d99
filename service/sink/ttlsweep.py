"""The sweep of ttl tables (docs/mirror.md, "Expiry").

Redis removes an expired row (and its copy at its key template) by itself; what points at it (set
and zset members, a unique key, the row's `__keys` member and `__derived` record) goes with the
next sweep, lua/sweep.lua, which the replicator runs every `ttl_sweep_seconds` (default 1 s).
"""

from __future__ import annotations

from redis.asyncio import Redis

from service.sink.keys import KeyLayout
from service.sink.replies import map_redis_errors
from service.sink.scripts import SWEEP

__all__ = ["TtlSweep"]


class TtlSweep:
    def __init__(self, redis: Redis, layout: KeyLayout, batch: int = 1000) -> None:
        self.layout = layout
        self.batch = batch  # rows looked at per script call: each call is short, the loop yields
        self.script = redis.register_script(SWEEP)
        self.route: list[str] = []  # KEYS: a Redis Cluster routes by them (its slot group's)

    async def sweep(self, schema: str, table: str) -> int:
        """Sweep the table's rows whose expiry passed; the rows swept."""
        lay, total = self.layout, 0
        args: list[str | int] = [lay.table_base(schema, table), lay.index_key(schema, table), self.batch]
        while True:
            with map_redis_errors(f"sweeping the expired rows of {schema}.{table}"):
                swept, looked = await self.script(keys=self.route, args=args)
            total += int(swept)
            if int(looked) < self.batch:
                return total
