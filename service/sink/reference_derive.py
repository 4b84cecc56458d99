"""The reference executor's derived entries (lua/derive.lua's key-space effects, over the
in-memory keyspace): the twin the differential tests compare with the real script."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cache

from service.sink.derive import Derivation, Entry, counts_field, decode_entries, encode_entries, spec_tag
from service.sink.keys import DERIVED_COUNTS_SUFFIX, DERIVED_SUFFIX
from service.sink.reference_keyspace import Keyspace, members

__all__ = ["derive", "underive"]


@cache
def _spec(text: str) -> Derivation:
    return Derivation.from_spec(text)


def _count(deltas: Counter[bytes], tag: str, entries: Sequence[Entry], by: int) -> None:
    for e in entries:
        deltas[counts_field(tag, e.index).encode()] += by


def _recount(ks: Keyspace, derived: bytes, deltas: Counter[bytes]) -> None:
    """`__derivedcounts` follows the entries (a count at 0 goes)."""
    counts = derived[: -len(DERIVED_SUFFIX)] + DERIVED_COUNTS_SUFFIX.encode()
    for f, d in deltas.items():
        if d and ks.hincrby(counts, f, d) == 0:
            ks.hdel(counts, [f])


def _drop(ks: Keyspace, e: Entry, member: bytes) -> None:
    key = e.key.encode()
    if e.kind == "k":
        ks.delete(key)
    elif e.kind == "u":
        if ks.get(key) == member:
            ks.delete(key)
    elif e.kind == "s":
        ks.srem(key, [member])
    else:
        ks.zrem(key, member)


def underive(ks: Keyspace, derived: bytes, suffix: bytes) -> None:
    raw = ks.hget(derived, suffix)
    if raw is None:
        return
    tag, member, entries = decode_entries(raw)
    for e in entries:
        _drop(ks, e, member.encode())
    ks.hdel(derived, [suffix])
    deltas: Counter[bytes] = Counter()
    _count(deltas, tag, entries, -1)
    _recount(ks, derived, deltas)


def _copy(ks: Keyspace, key: bytes, row: dict[bytes, bytes] | bytes) -> None:
    if isinstance(row, bytes):  # a json row's document
        ks.set(key, row)
        return
    ks.delete(key)  # (the script's HSET + HLEN check ends the same)
    ks.hset(key, row.items())


def _visible(row: dict[bytes, bytes] | bytes) -> dict[bytes, bytes] | bytes:
    """The row less its hidden fields (derive.HIDDEN: a NUL first), as the copy holds it."""
    if isinstance(row, dict):
        return {k: v for k, v in row.items() if not k.startswith(b"\0")}
    keys, vals = members(row)
    return b"{" + b",".join(k + b":" + vals[k] for k in keys if not k.startswith(b'"\\u0000')) + b"}"


def derive(ks: Keyspace, spec_text: str, key: bytes, derived: bytes, suffix: bytes) -> None:
    """The entries of the row stored at `key` replace those recorded for `suffix`."""
    spec = _spec(spec_text)
    row: dict[bytes, bytes] | bytes | None = ks.get(key) if spec.json is not None else ks.hgetall(key)
    if not row:
        return underive(ks, derived, suffix)
    text_row = spec.stored_fields(row)
    if spec.hidden:
        row = _visible(row)
    member, new = spec.entries(text_row, key.decode())
    if member is None:
        return underive(ks, derived, suffix)
    tag = spec_tag(spec_text)
    text = encode_entries(tag, member, new).encode()
    raw = ks.hget(derived, suffix)
    keep: set[tuple[str, str, str]] = set()
    deltas: Counter[bytes] = Counter()
    if raw == text:
        if spec.key is not None:
            _copy(ks, member.encode(), row)
        return
    if raw is not None:
        old_tag, old_member, old = decode_entries(raw)
        _count(deltas, old_tag, old, -1)
        held = {(e.kind, e.key, e.score) for e in old} if old_member == member else set()
        keep = {(e.kind, e.key, e.score) for e in new} & held
        for e in old:
            if (e.kind, e.key, e.score) not in keep:
                _drop(ks, e, old_member.encode())
    m = member.encode()
    for e in new:
        k = e.key.encode()
        if e.kind == "k":
            _copy(ks, k, row)
        elif (e.kind, e.key, e.score) in keep:
            continue
        elif e.kind == "u":
            ks.set(k, m)
        elif e.kind == "s":
            ks.sadd(k, [m])
        else:
            ks.zadd(k, float(e.score), m)
    ks.hset(derived, [(suffix, text)])
    _count(deltas, tag, new, 1)
    _recount(ks, derived, deltas)
