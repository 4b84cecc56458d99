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

from service.sink.ir import TableKeys, WriteRow
from service.sink.keys import KeyLayout
from service.sink.values import json_document, row_fields

__all__ = ["clear_table", "write_ops", "write_rows"]


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
    t = TableKeys(
        schema,
        table,
        layout.table_base(schema, table),
        layout.index_key(schema, table),
        layout.table_id(schema, table),
        layout.touched_key(schema, table),
    )
    write_ops(
        r, [WriteRow(t, layout.row_suffix([row[c] for c in key]), row) for row in rows], json_mode=json_mode
    )


def write_ops(r: redis_sync.Redis, ops: Sequence[WriteRow], *, json_mode: bool) -> None:
    """The IR's whole-row writes as plain commands in one pipeline, without the apply script
    (no lease check, no resync marks: a copy into a mirror no stream writes yet)."""
    pipe = r.pipeline(transaction=False)
    indexes: dict[str, list[str]] = {}
    for op in ops:
        row_key = f"{op.table.base}:{op.suffix}"
        indexes.setdefault(op.table.index, []).append(op.suffix)
        if json_mode:
            pipe.set(row_key, json_document(op.row))
            continue
        pipe.delete(row_key)
        fields = row_fields(op.row)
        if fields:
            pipe.hset(row_key, items=fields)
    for index, suffixes in indexes.items():
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
