"""Delete every key of a mirror (`binlog-mirror ctl clear`), safely.

It refuses while a writer holds the lease (a running `binlog-mirror run` would write again
behind it, or lose its checkpoint mid-stream), and holds the lease itself while it deletes, so no
writer starts meanwhile. Keys go in SCAN batches with UNLINK (freed in the background by Redis).
"""

from __future__ import annotations

import orjson
from redis.asyncio import Redis

from service.errors import LeaseLost
from service.sink.client import redis_client
from service.sink.derive import Entry, decode_entries
from service.sink.keys import DERIVED_SUFFIX, DOCREC_SUFFIX, KeyLayout, glob_literal
from service.sink.mirror import MirrorOptions, RedisMirror, map_redis_errors

__all__ = ["clear_prefix"]


def _entries_of_any_layout(raw: bytes) -> tuple[str, list[Entry]]:
    """A `__derived` record's member and entries, in this layout's form (a 12-hex derivation tag
    first) or key layout 2's (no tag, no index numbers): `ctl clear` is the way out of the
    older one (layoutversion.py), so it must read both."""
    try:
        tag, member, entries = decode_entries(raw)
        if len(tag) == 12 and all(c in "0123456789abcdef" for c in tag):
            return member, entries
    except (ValueError, IndexError, UnicodeDecodeError):
        pass
    _, member, entries = decode_entries(raw, layout2=True)
    return member, entries


BATCH = 1000


async def clear_prefix(redis_url: str, prefix: str, lease_ttl: float = 10.0) -> int:
    """Delete `{prefix}:*` (the lease last); returns how many keys were deleted."""
    layout = KeyLayout(prefix)
    redis = redis_client(redis_url, socket_timeout=10, socket_connect_timeout=5)
    mirror = RedisMirror(redis, layout, lambda s, t: None, MirrorOptions(lease_ttl=lease_ttl))
    try:
        if not await mirror.acquire_lease():
            holder = await redis.get(layout.lease_key)
            who = holder.decode() if isinstance(holder, bytes) else str(holder or "?")
            raise LeaseLost(
                f"a writer holds the lease {layout.lease_key} (instance {who}): "
                "stop `binlog-mirror run` for this prefix first, then clear"
            )
        deleted = 0
        lease = layout.lease_key.encode()
        with map_redis_errors(f"deleting the derived keys of {prefix}:*"):
            # first the keys shaped tables' templates and documents name (outside the prefix): the
            # `__derived` hashes under it say which they are, and for documents (lua/document.lua)
            # the root rows' `__docrec` records. One SCAN for both, the lease renewed as it goes.
            ends = (f":{DERIVED_SUFFIX}".encode(), f":{DOCREC_SUFFIX}".encode())
            books = []
            async for key in redis.scan_iter(match=f"{glob_literal(prefix)}:*:__d*", count=BATCH):
                if key.endswith(ends):
                    books.append(key)
                await mirror.renew_lease()
            for key in books:
                documents = key.endswith(ends[1])
                async for field, raw in redis.hscan_iter(key, count=BATCH):
                    if not documents:
                        member, entries = _entries_of_any_layout(raw)
                        deleted += await _drop(redis, member, entries)
                    elif field != b"__nodes" and (
                        docs := [v[1] for v in orjson.loads(raw).values() if v[0] == "k"]
                    ):
                        deleted += await redis.unlink(*docs)
                await mirror.renew_lease()
        with map_redis_errors(f"deleting {prefix}:*"):
            batch: list[bytes] = []
            async for key in redis.scan_iter(match=f"{glob_literal(prefix)}:*", count=BATCH):
                if key == lease:  # bytes: a key name may be binary
                    continue
                batch.append(key)
                if len(batch) >= BATCH:
                    deleted += await redis.unlink(*batch)
                    batch = []
                    await mirror.renew_lease()
            if batch:
                deleted += await redis.unlink(*batch)
        return deleted
    finally:
        await mirror.release_lease()
        await mirror.close()
        await redis.aclose()


async def _drop(redis: Redis, member: str, entries: list[Entry]) -> int:
    """Remove a row's derived entries (as lua/derive.lua's `drop_entry`); the keys deleted."""
    gone = 0
    for e in entries:
        if e.kind == "k":
            gone += await redis.unlink(e.key)
        elif e.kind == "u":
            if await redis.get(e.key) == member.encode():
                gone += await redis.unlink(e.key)
        else:  # a set or zset: deleted with its last member
            removed = await (redis.srem(e.key, member) if e.kind == "s" else redis.zrem(e.key, member))
            gone += bool(removed) and not await redis.exists(e.key)
    return gone
