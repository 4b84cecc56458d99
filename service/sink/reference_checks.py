"""The checks of an apply call in the reference executor (service/sink/reference.py): what
lua/apply.lua (and common.lua's `fence`) verify before the first write, with their error texts.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.sink.ir import ApplyHeader, Op, UpdateChanged
from service.sink.reference_keyspace import Keyspace, ScriptError, as_bytes

__all__ = ["check_call", "fence"]


def check_call(ks: Keyspace, h: ApplyHeader, ops: Sequence[Op]) -> tuple[int | None, bool]:
    """The writer lease, the checkpoint chain, a chunk's progress and the rows of UpdateChanged
    ops (op Q), in the script's order; ScriptError with its text when one fails. Returns the
    first chunk's sequence number (a later chunk of a transaction replies it) and whether
    `__progress` was left by another transaction (the call drops it)."""
    fence(ks, as_bytes(h.lease_key), h.token)
    prev = ks.hget(as_bytes(h.checkpoint_key), b"id") or b""
    if prev != as_bytes(h.expected_prev):
        raise ScriptError(f"CHECKPOINT_MOVED expected {h.expected_prev} found {prev.decode()}")
    first_chunk_seq: int | None = None
    stale_progress = False
    if h.chunk > 0:
        txn = as_bytes(h.txn_id)
        p_txn, p_rows, p_first = ks.hmget(as_bytes(h.progress_key), [b"txn", b"rows", b"first"])
        at = 0
        if p_txn == txn:
            at = _number(p_rows) or 0
            first_chunk_seq = _number(p_first)
        if at != h.done:
            raise ScriptError(f"PROGRESS_MOVED {h.txn_id}: expected {h.done} rows done, found {at}")
        stale_progress = p_txn != txn  # left by a transaction that never finished
    _check_rows(ks, as_bytes(h.resync_key), ops)
    return first_chunk_seq, stale_progress


def fence(ks: Keyspace, lease_key: bytes, token: str) -> None:
    if token == "":
        return
    if token.startswith("#"):  # a cluster group: a fencing number, not the lease's token
        n, seen = int(token[1:]), int(ks.get(lease_key) or b"0")
        if seen > n:
            raise ScriptError(f"LEASE_LOST a newer writer (fencing number {seen}) wrote here")
        if seen < n:
            ks.set(lease_key, str(n).encode())
        return
    holder = ks.get(lease_key)
    if holder == token.encode():
        return
    if holder is None:
        raise ScriptError("LEASE_LOST the writer lease is gone (expired, or Redis lost its keys)")
    raise ScriptError("LEASE_LOST the writer lease is held by another instance")


def _check_rows(ks: Keyspace, resync: bytes, ops: Sequence[Op]) -> None:
    """The rows of UpdateChanged ops are stored and their tables not in resync (op Q), table by
    table in their first op's order."""
    rows: dict[str, list[bytes]] = {}
    for op in ops:
        if isinstance(op, UpdateChanged):
            rows.setdefault(op.table.tid, []).append(as_bytes(op.table.base) + b":" + as_bytes(op.suffix))
    for tid, keys in rows.items():
        named = f"{len(tid.encode())}:{tid}"
        if ks.hexists(resync, tid.encode()):
            raise ScriptError(f"ROWS_MISSING resync {named}")
        for key in keys:
            if not ks.exists(key):
                raise ScriptError(f"ROWS_MISSING row {named} {key.decode(errors='surrogateescape')}")


def _number(v: bytes | None) -> int | None:
    """Lua's tonumber: None for a missing or non-numeric value."""
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return None
