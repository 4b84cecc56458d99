"""Verify of a shaped table's derived entries (service/sink/derive.py): each row's copy at its
template key, unique keys, set and zset members and the entries the mirror recorded for it,
recomputed from the source's row and compared with Redis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis

from service.sink.derive import HIDDEN, Derivation, Entry, encode_entries
from service.sink.mirror import map_redis_errors
from service.sink.values import field_value, json_document

__all__ = ["entries_wrong", "stored_text"]


def stored_text(row: Mapping[str, Any]) -> dict[str, str | bytes]:
    """A source row (in its stored form: shaped, TIMESTAMPs in UTC) as its hash's fields."""
    return {k: field_value(v) for k, v in row.items() if v is not None}


def _bytes(v: str | bytes) -> bytes:
    return v if isinstance(v, bytes) else v.encode()


async def entries_wrong(
    redis: Redis, d: Derivation, base: str, derived: str, rows: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, tuple[str, ...]]:
    """Suffix -> the keys of its entries that are not as the source row says (an entry missing
    or wrong, or the recorded entries not these), for the rows the source has; `rows`: suffix ->
    the source row in its stored form (None: the source has no such row; its entries go with
    the row, which the row comparison reports)."""
    checks: list[tuple[str, Entry | None, Any]] = []  # suffix, entry (None: the record), expected
    async with redis.pipeline(transaction=False) as pipe:
        for suffix, row in rows.items():
            if row is None:
                continue
            text = stored_text(row)
            found, entries = d.entries(text, f"{base}:{suffix}")
            shown = {k: v for k, v in row.items() if not k.startswith(HIDDEN)} if d.hidden else row
            member = found or ""  # (a source row has every key column: never None here)
            pipe.hget(derived, suffix)
            checks.append((suffix, None, encode_entries(d.tag, member, entries).encode()))
            for e in entries:
                if e.kind == "k" and d.json is not None:  # a json row: its document
                    pipe.get(e.key)
                    checks.append((suffix, e, json_document(shown)))
                elif e.kind == "k":
                    pipe.hgetall(e.key)
                    copy = stored_text(shown)
                    checks.append((suffix, e, {_bytes(k): _bytes(v) for k, v in copy.items()}))
                elif e.kind == "u":
                    pipe.get(e.key)
                    checks.append((suffix, e, member.encode()))
                elif e.kind == "s":
                    pipe.sismember(e.key, member)
                    checks.append((suffix, e, 1))
                else:
                    pipe.zscore(e.key, member)
                    checks.append((suffix, e, float(e.score)))
        with map_redis_errors("reading the mirror's index entries"):
            replies = await pipe.execute() if checks else []
    out: dict[str, list[str]] = {}
    for (suffix, entry, want), got in zip(checks, replies, strict=True):
        if entry is not None and entry.kind == "s":
            got = int(got)
        if got != want:
            out.setdefault(suffix, []).append(entry.key if entry is not None else derived)
    return {s: tuple(keys) for s, keys in out.items()}
