"""What happened, read from Redis after the fact, for messages that say it (issue #24, item 5).

A lost writer lease and an update that met no row have several causes that call for different
actions; these probes tell them apart instead of guessing: another instance holds the lease, or it
expired, or Redis lost the mirror's keys (FLUSHALL, a restart without persistence); a table's rows
are keyed by other columns than its current key (catching up across a DDL that changed its
primary key), or rows were removed from Redis behind the mirror's back."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from redis.asyncio import Redis

from service.sink.keys import KeyLayout, split_key
from service.sink.unreachable import UNREACHABLE

__all__ = ["lease_loss", "rows_keyed_otherwise"]

_PROBE_ROWS = 5


async def lease_loss(redis: Redis, layout: KeyLayout, token: str, had_checkpoint: bool) -> str | None:
    """Why this instance (`token`) no longer holds the writer lease; None when Redis cannot say."""
    try:
        holder = await redis.get(layout.lease_key)
        checkpoint = bool(await redis.exists(layout.checkpoint_key))
    except UNREACHABLE:
        return None
    if holder is not None:
        other = holder.decode(errors="replace") if isinstance(holder, bytes) else str(holder)
        if other == token:
            return None
        return f"another instance (token {other}) holds the writer lease {layout.lease_key}"
    if had_checkpoint and not checkpoint:
        return (
            "Redis lost the mirror's keys: the writer lease and the checkpoint are both gone "
            "(FLUSHALL or FLUSHDB, or a restart without persistence); the selected tables are "
            "copied again"
        )
    return (
        f"the writer lease {layout.lease_key} expired: this instance did not renew it within "
        "lease_ttl_seconds (the process or Redis stalled), and no other instance has taken it"
    )


async def rows_keyed_otherwise(
    redis: Redis, layout: KeyLayout, schema: str, table: str, key: Sequence[str], json_mode: bool
) -> bool:
    """True when stored rows of the table carry key values that are not their row key under the
    current key columns `key`: its rows were written under another key definition."""
    base = layout.table_base(schema, table)
    try:
        members = await redis.srandmember(layout.index_key(schema, table), _PROBE_ROWS)
        for member in members or ():
            suffix = member.decode() if isinstance(member, bytes) else str(member)
            if json_mode:
                raw = await redis.get(f"{base}:{suffix}")
                row: Mapping[Any, Any] = orjson.loads(raw) if raw else {}
            else:
                row = await redis.hgetall(f"{base}:{suffix}")
            if row and not _keyed_by(row, suffix, key, json_mode):
                return True
    except (*UNREACHABLE, orjson.JSONDecodeError):
        return False
    return False


def _keyed_by(row: Mapping[Any, Any], suffix: str, key: Sequence[str], json_mode: bool) -> bool:
    """Whether `suffix` is the row key of `row` (a stored hash or JSON object) under `key`."""
    parts = split_key(suffix)
    if len(parts) != len(key):
        return False
    for part, column in zip(parts, key, strict=True):
        value = row.get(column) if json_mode else row.get(column.encode())
        if value is None or part not in _key_forms(value, json_mode):
            return False
    return True


def _key_forms(value: Any, json_mode: bool) -> set[str]:
    """The key texts a stored value may have come from (text, or binary as 0x-hex)."""
    if json_mode:
        forms = {str(value)} if not isinstance(value, bool) else {"1" if value else "0"}
        if isinstance(value, str):
            try:
                forms.add("0x" + base64.b64decode(value, validate=True).hex())
            except (binascii.Error, ValueError):
                pass
        return forms
    raw = bytes(value)
    forms = {"0x" + raw.hex()}
    try:
        forms.add(raw.decode())
    except UnicodeDecodeError:
        pass
    return forms
