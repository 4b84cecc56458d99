"""The version of the mirror's key layout, stored at `{prefix}:__layout`, and the migrations to it.

A mirror written by an older layout is brought up to this one when `run` starts (before the
checkpoint is read); one written by a newer version than this is refused with the way out, never
read in a form it does not know.

    1  (no `__layout` key) foreign-key sets named `{table}:__fk:{constraint}:{raw value}`
    2  their names hold the value as hex: `{table}:__fkx:{constraint}:{hex}` (service/sink/fks.py)
    3  a shaped table's `{table}:__derived` records start with the tag of their derivation and
       number each entry's index (service/sink/derive.py), for the per-index counts

1 -> 2: the raw-named sets are dropped, with their `__fkready` and `__fkdefs` entries, so their
tables' sets count as unfilled and those tables are copied again (pipeline/applier.py,
`_fill_fk_sets`): the sets are rebuilt in the new form from the source's rows, never guessed.
2 -> 3: a mirror holding `__derived` records of the older form is refused with the way out
(`ctl clear`, then a start copies every table again): what those records name is not re-read in
a form this version does not write. One without any is only marked 3.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.asyncio import Redis

from service.errors import ConfigError
from service.sink.fks import OLD_SET_MARK, ready_key
from service.sink.keys import DERIVED_SUFFIX, KeyLayout, glob_literal
from service.sink.replies import map_redis_errors

__all__ = ["LAYOUT_VERSION", "ensure_layout"]

LAYOUT_VERSION = 3
BATCH = 1000

log = logging.getLogger(__name__)


async def ensure_layout(redis: Redis, layout: KeyLayout) -> None:
    """Check the stored layout version and migrate an older one (the caller holds the lease)."""
    key = layout.layout_key
    with map_redis_errors("reading the mirror's key-layout version"):
        raw = await redis.get(key)
    if raw is not None:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        if not text.isdigit():
            raise ConfigError(f"{key} holds {text!r}, not a key-layout version: was it written by hand?")
        if int(text) > LAYOUT_VERSION:
            raise ConfigError(
                f"the mirror under key prefix {layout.prefix!r} was written by a newer binlog-mirror "
                f"(key layout {text}; this version knows layouts up to {LAYOUT_VERSION}): run that "
                "version or a newer one, or mirror into a new key_prefix"
            )
        if int(text) == LAYOUT_VERSION:
            return
    with map_redis_errors("migrating the mirror's key layout"):
        base = glob_literal(layout.prefix)
        async for _ in redis.scan_iter(match=f"{base}:*:{DERIVED_SUFFIX}", count=BATCH):
            raise ConfigError(
                f"the mirror under key prefix {layout.prefix!r} holds key-template and index entries "
                "written by an earlier binlog-mirror (key layout 2): stop every instance, run "
                f"`binlog-mirror ctl clear --prefix {layout.prefix}` (it removes them and the "
                "application's keys they name), then start again: the tables are copied anew"
            )
        dropped = await _drop_raw_fk_sets(redis, layout) if raw is None else 0
        await redis.set(key, LAYOUT_VERSION)
    if dropped:
        log.info(
            "key layout 1 -> %d: dropped %d foreign-key sets of the older form; their tables are "
            "copied again to build them anew",
            LAYOUT_VERSION,
            dropped,
        )


def _old(name: bytes | str) -> bool:
    text = name if isinstance(name, bytes) else name.encode()
    return f":{OLD_SET_MARK}:".encode() in text


async def _drop_raw_fk_sets(redis: Redis, layout: KeyLayout) -> int:
    """Unlink every `__fk:` set (one key per command: on a Redis Cluster they are in many slots)
    and the entries naming them in `__fkready` and the tables' `__fkdefs`. An unescaped `:__fk:`
    is nowhere else in a key: a key part starting with `__` is escaped (keys.py)."""
    base = glob_literal(layout.prefix)
    dropped = 0
    batch: list[Any] = []

    async def flush() -> None:
        async with redis.pipeline(transaction=False) as pipe:
            for k in batch:
                pipe.unlink(k)
            await pipe.execute()
        batch.clear()

    async for k in redis.scan_iter(match=f"{base}:*:{OLD_SET_MARK}:*", count=BATCH):
        batch.append(k)
        dropped += 1
        if len(batch) >= BATCH:
            await flush()
    if batch:
        await flush()
    defs = [k async for k in redis.scan_iter(match=f"{base}:*:__fkdefs", count=BATCH)]
    for hash_key in [ready_key(layout), *defs]:
        fields = [f for f in await redis.hkeys(hash_key) if _old(f)]
        if fields:
            await redis.hdel(hash_key, *fields)
    return dropped
