"""Websocket resume past the in-memory ring, from the Redis change log (ops #26).

With `changelog_maxlen` set, every applied change is also in `{prefix}:__changes` (docs/mirror.md).
A subscriber whose `after` is older than the ring (or that resumes after a restart, when the ring
is empty) gets the changes after it read back from that stream first, then the live ones: a gap
only for what the stream no longer holds either.
"""

from __future__ import annotations

from typing import Any

import orjson

from api.broadcast import Batch, Broadcaster, EventFilter, Gap, LoggedEntry
from service.binlog.rowchange import Op
from service.settings import Settings
from service.sink.client import redis_client
from service.sink.cluster import cluster_layout
from service.sink.keys import KeyLayout

__all__ = ["changelog_prelude"]

PAGE = 1000


async def changelog_prelude(
    settings: Settings, hub: Broadcaster, flt: EventFilter, after: int | None
) -> tuple[list[Batch | Gap], int | None]:
    """(items to send first, the `after` to subscribe with): nothing to add when the ring holds
    every change after `after`, or there is no change log."""
    if after is None or not settings.changelog_maxlen or settings.redis is None:
        return [], after
    oldest = hub.oldest_seq
    if hub.last_seq is not None and oldest is not None and after + 1 >= oldest:
        return [], after  # the ring has them
    entries = await _read(settings, after)
    if not entries:
        return [], after
    items: list[Batch | Gap] = []
    if entries[0].seq > after + 1:
        items.append(Gap(after + 1, entries[0].seq - 1, "older than the change log"))
    wanted = [
        e
        for e in entries
        if (not flt.ops or Op(e.doc["op"]) in flt.ops) and flt.wants_table(e.doc["schema"], e.doc["table"])
    ]
    if wanted:
        items.append(Batch(flt.columns, list(wanted), replayed=True))
    return items, entries[-1].seq


async def _read(settings: Settings, after: int) -> list[LoggedEntry]:
    """The change-log entries with seq > after, oldest first (read newest first, in pages)."""
    assert settings.redis is not None
    cluster = settings.redis.cluster  # the log is in the global slot group (docs/mirror.md)
    key = (cluster_layout if cluster else KeyLayout)(settings.key_prefix).changes_key
    url = settings.redis.url.get_secret_value()
    redis = redis_client(url, cluster_ok=True, socket_timeout=10, socket_connect_timeout=5)
    found: list[LoggedEntry] = []
    try:
        top = "+"
        while True:
            page: list[tuple[Any, dict[bytes, bytes]]] = await redis.xrevrange(
                key, max=top, min="-", count=PAGE
            )  # type: ignore[assignment]  # redis-py's union of return types; bytes here
            for _id, fields in page:
                seq = int(fields[b"seq"])
                if seq <= after:
                    return found[::-1]
                found.append(LoggedEntry(seq, _doc(fields)))
            if len(page) < PAGE:
                return found[::-1]
            last_id = page[-1][0]
            top = "(" + (last_id.decode() if isinstance(last_id, bytes) else str(last_id))
    finally:
        await redis.aclose()


def _doc(fields: dict[bytes, bytes]) -> dict[str, Any]:
    return {
        "op": fields[b"op"].decode(),
        "schema": fields[b"schema"].decode(),
        "table": fields[b"table"].decode(),
        "before": orjson.loads(fields[b"before"]),
        "after": orjson.loads(fields[b"after"]),
        "ts": int(fields[b"ts"]),
    }
