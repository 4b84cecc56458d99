"""Rows copied in bulk from outside the stream (the snapshot's Spark tasks): written in the
mirror's key layout and value form, synchronously (an executor has no event loop).

Only for a mirror that has no checkpoint yet, under the writer lease the copy's driver holds
through `RedisMirror` (acquire_lease/renew_lease), which also stores the hand-over checkpoint
(`RedisMirror.apply` of an empty transaction ending where the copy began, with the tables
registered): the stream's own writer, so the service resumes from it as from any checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis as redis_sync

from service.sink.keys import KeyLayout
from service.sink.values import field_value, json_document

__all__ = ["clear_table", "write_rows"]


def write_rows(
    r: redis_sync.Redis,
    layout: KeyLayout,
    schema: str,
    table: str,
    key: Sequence[str],
    rows: Sequence[dict[str, Any]],
    *,
    json_mode: bool,
) -> None:
    """Write whole rows (as SELECT gives them, TIMESTAMPs aware UTC) and index their keys, in
    one pipeline; a row replaces what its key held."""
    base, index = layout.table_base(schema, table), layout.index_key(schema, table)
    pipe = r.pipeline(transaction=False)
    suffixes = []
    for row in rows:
        suffix = layout.row_suffix([row[c] for c in key])
        suffixes.append(suffix)
        row_key = f"{base}:{suffix}"
        if json_mode:
            pipe.set(row_key, json_document(row))
            continue
        pipe.delete(row_key)
        present = {k: field_value(v) for k, v in row.items() if v is not None}
        if present:
            pipe.hset(row_key, mapping=present)  # type: ignore[arg-type]
    if suffixes:
        pipe.sadd(index, *suffixes)
    pipe.execute()


def clear_table(r: redis_sync.Redis, layout: KeyLayout, schema: str, table: str) -> None:
    """Remove the rows an earlier copy or mirror left for this table."""
    index, base = layout.index_key(schema, table), layout.table_base(schema, table)
    batch: list[str] = []
    for member in r.sscan_iter(index, count=1000):
        batch.append(f"{base}:{member.decode()}")
        if len(batch) >= 1000:
            r.delete(*batch)
            batch = []
    if batch:
        r.delete(*batch)
    r.unlink(index)  # a big set is freed off Redis' main thread
