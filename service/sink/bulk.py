"""Rows copied in bulk from outside the stream (the snapshot's Spark tasks): written in the
mirror's key layout and value form, synchronously (an executor has no event loop).

Only for a mirror that has no checkpoint yet, under the writer lease the copy's driver holds
through `RedisMirror` (acquire_lease/renew_lease), which also stores the hand-over checkpoint
(`RedisMirror.apply` of an empty transaction ending where the copy began, with the tables
registered): the stream's own writer, so the service resumes from it as from any checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import hiredis
import redis as redis_sync
from redis._parsers import hiredis as redis_hiredis

from service.sink.ir import TableKeys, WriteRow
from service.sink.keys import KeyLayout
from service.sink.plain import pack_hset
from service.sink.values import json_document, row_fields

__all__ = ["InFlight", "clear_table", "pack_ops", "send_packed", "table_keys", "write_ops", "write_rows"]

# what redis-py's hiredis reader returns while a reply is incomplete (redis-py 5.1+; False before)
_NOT_ENOUGH_DATA: Any = getattr(redis_hiredis, "NOT_ENOUGH_DATA", False)


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
    t = table_keys(layout, schema, table)
    write_ops(
        r, [WriteRow(t, layout.row_suffix([row[c] for c in key]), row) for row in rows], json_mode=json_mode
    )


def table_keys(layout: KeyLayout, schema: str, table: str) -> TableKeys:
    return TableKeys(
        schema,
        table,
        layout.table_base(schema, table),
        layout.index_key(schema, table),
        layout.table_id(schema, table),
        layout.touched_key(schema, table),
    )


def write_ops(r: redis_sync.Redis, ops: Sequence[WriteRow], *, json_mode: bool) -> None:
    """pack_ops' commands sent at once."""
    send_packed(r, *pack_ops(ops, json_mode=json_mode))


def pack_ops(ops: Sequence[WriteRow], *, json_mode: bool) -> tuple[bytes, int]:
    """The IR's whole-row writes as plain commands, packed here and sent at once, without the apply
    script (no lease check, no resync marks: a copy into a mirror no stream writes yet). Packed
    as the plain form packs a row's HSET (service.sink.plain.pack_hset): redis-py's pipeline
    cost 56 µs a row of 12 columns in Python, most of a load's time."""
    out: list[bytes] = []
    replies = 0
    indexes: dict[str, list[str]] = {}
    for op in ops:
        row_key = f"{op.table.base}:{op.suffix}"
        indexes.setdefault(op.table.index, []).append(op.suffix)
        if json_mode:
            out.append(hiredis.pack_command(cast(Any, ("SET", row_key, json_document(op.row)))))
            replies += 1
            continue
        out.append(hiredis.pack_command(cast(Any, ("DEL", row_key))))
        pairs = pack_hset(out, row_key, op.row)
        if pairs < 0:  # a value pack_hset leaves to hiredis
            out.append(hiredis.pack_command(cast(Any, ("HSET", row_key, *row_fields(op.row)))))
        replies += 2 if pairs else 1
    for index, suffixes in indexes.items():
        out.append(hiredis.pack_command(cast(Any, ("SADD", index, *suffixes))))
        replies += 1
    return b"".join(out), replies


def send_packed(r: redis_sync.Redis, packed: bytes, replies: int) -> None:
    """Write the commands and read their replies; the first error reply raises (after every reply
    was read: the connection stays in step)."""
    conn: Any = r.connection_pool.get_connection()  # redis-py's Connection: untyped methods
    try:
        conn.send_packed_command([packed])
        error = _read_replies(conn, replies)
    except (redis_sync.ConnectionError, redis_sync.TimeoutError):
        conn.disconnect()
        raise
    finally:
        r.connection_pool.release(conn)
    if error is not None:
        raise error


class InFlight:
    """Packed commands sent on one connection with their replies read later (`drain`), so the
    caller builds the next commands while Redis runs these (load: packing and Redis' own work
    overlap instead of taking turns). The first error reply raises at `drain`."""

    def __init__(self, r: redis_sync.Redis) -> None:
        self._pool = r.connection_pool
        self._conn: Any = self._pool.get_connection()
        self._replies = 0

    def send(self, packed: bytes, replies: int) -> None:
        try:
            self._conn.send_packed_command([packed])
        except (redis_sync.ConnectionError, redis_sync.TimeoutError):
            self._conn.disconnect()
            raise
        self._replies += replies

    def drain(self) -> None:
        n, self._replies = self._replies, 0
        try:
            error = _read_replies(self._conn, n)
        except (redis_sync.ConnectionError, redis_sync.TimeoutError):
            self._conn.disconnect()
            raise
        if error is not None:
            raise error

    def close(self) -> None:
        if self._replies:  # left unread by an error: the connection is out of step
            self._conn.disconnect()
        self._pool.release(self._conn)


def _read_replies(conn: Any, n: int) -> Exception | None:
    """Read n replies; the first error reply, if any. From redis-py's hiredis reader itself where it
    has one (a Python call per reply through read_response cost as much as packing the row)."""
    parser: Any = getattr(conn, "_parser", None)
    reader = getattr(parser, "_reader", None)
    error: Exception | None = None
    if reader is None:
        for _ in range(n):
            try:
                conn.read_response()
            except redis_sync.ResponseError as exc:
                error = error or exc
        return error
    while n:
        reply = reader.gets()
        if reply is _NOT_ENOUGH_DATA:
            parser.read_from_socket()
            continue
        n -= 1
        if isinstance(reply, Exception) and error is None:
            error = reply
    return error


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
