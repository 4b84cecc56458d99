"""The resync scripts in the reference executor: lua/resync_rows.lua, resync_reread.lua and
resync_finish.lua over the in-memory keyspace, taking what codec.py's `resync_*_args` encode.

Each call checks the writer lease and that the table's resync is still the header's generation
(a TRUNCATE, DROP, RENAME or newer resync moved it: -1, nothing written). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.sink.ir import ResyncHeader, WriteRow
from service.sink.keys import DERIVED_SUFFIX, MARK_FENCED
from service.sink.reference import partial_key_of, row_pairs
from service.sink.reference_checks import fence
from service.sink.reference_derive import derive, underive
from service.sink.reference_keyspace import Keyspace, as_bytes
from service.sink.values import json_document

__all__ = ["resync_finish", "resync_reread", "resync_rows"]

_GENERATION = re.compile(rb"([0-9]+) ")
_FENCED = MARK_FENCED.encode() + b" "


def _current(ks: Keyspace, h: ResyncHeader) -> bool:
    """Whether the table's resync in flight is `h.generation` (common.lua's `generation`: a fenced
    mark is no copy's generation, a mark without one counts as 0)."""
    v = ks.hget(as_bytes(h.resync_key), as_bytes(h.table.tid))
    if v is None:
        return False
    if v.startswith(_FENCED):
        return h.generation == -1
    m = _GENERATION.match(v)
    return (int(m.group(1)) if m else 0) == h.generation


def _stream_wrote(ks: Keyspace, touched: bytes, partial: bytes, suffix: bytes) -> bool:
    return ks.sismember(touched, suffix) or ks.hexists(partial, suffix)


def _write_copy(ks: Keyspace, h: ResyncHeader, op: WriteRow) -> None:
    """A row read from the source replaces the stored one (common.lua's write_copy)."""
    t = h.table
    key = as_bytes(t.base) + b":" + as_bytes(op.suffix)
    if t.json:
        ks.set(key, json_document(op.row))
    else:
        ks.delete(key)
        ks.hset(key, row_pairs(op.row))
    ks.sadd(as_bytes(t.index), [as_bytes(op.suffix)])
    if t.derive:  # a shaped table's entries follow (resync_rows.lua, resync_reread.lua)
        derive(ks, t.derive, key, as_bytes(t.base) + b":" + DERIVED_SUFFIX.encode(), as_bytes(op.suffix))


def resync_rows(ks: Keyspace, h: ResyncHeader, stale_key: str, rows: Sequence[WriteRow]) -> int:
    """The rows a resync read, written unless the stream wrote them since its mark; each leaves
    `__stale`. The rows written, or -1."""
    fence(ks, as_bytes(h.lease_key), h.token)
    if not _current(ks, h):
        return -1
    touched = as_bytes(h.table.touched)
    partial = partial_key_of(touched)
    written = 0
    for op in rows:
        if not _stream_wrote(ks, touched, partial, as_bytes(op.suffix)):
            _write_copy(ks, h, op)
            written += 1
        ks.srem(as_bytes(stale_key), [as_bytes(op.suffix)])
    return written


def resync_reread(ks: Keyspace, h: ResyncHeader, entries: Sequence[tuple[str, str, WriteRow | None]]) -> int:
    """`__partial` entries (suffix, merges, the row read again or None): written whole when no
    merge came since the entry was read, and dropped from `__partial`. The entries done, or -1."""
    fence(ks, as_bytes(h.lease_key), h.token)
    if not _current(ks, h):
        return -1
    partial = partial_key_of(h.table.touched)
    done = 0
    for suffix, merges, op in entries:
        if ks.hget(partial, as_bytes(suffix)) == as_bytes(merges):
            if op is not None:
                _write_copy(ks, h, op)
            ks.hdel(partial, [as_bytes(suffix)])
            done += 1
    return done


def resync_finish(
    ks: Keyspace, h: ResyncHeader, stale_key: str, limit: int, settle_key: str, copied_at: str
) -> int | list[int]:
    """Remove up to `limit` stale rows the stream did not write (SPOP: here in sorted order); once
    none is stale or waits in `__partial`, end the resync (and open the settle window until
    `copied_at`, if not ""). [removed, stale left, to read again], or -1."""
    fence(ks, as_bytes(h.lease_key), h.token)
    if not _current(ks, h):
        return -1
    t = h.table
    touched, stale = as_bytes(t.touched), as_bytes(stale_key)
    partial = partial_key_of(touched)
    removed = 0
    for m in ks.spop(stale, limit):
        if not _stream_wrote(ks, touched, partial, m):
            ks.delete(as_bytes(t.base) + b":" + m)
            underive(ks, as_bytes(t.base) + b":" + DERIVED_SUFFIX.encode(), m)
            ks.srem(as_bytes(t.index), [m])
            removed += 1
    left, again = ks.scard(stale), ks.hlen(partial)
    if left == 0 and again == 0:
        ks.delete(touched)
        ks.hdel(as_bytes(h.resync_key), [as_bytes(t.tid)])
        if copied_at:
            ks.hset(as_bytes(settle_key), [(as_bytes(t.tid), as_bytes(copied_at))])
    return [removed, left, again]
