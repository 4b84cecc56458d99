"""The in-memory keyspace of the reference executor (service/sink/reference.py).

Holds the four types the mirror writes, as Redis stores them: strings (bytes), hashes, sets and
streams. Every command the apply script uses is a method with the same effect, including Redis's
rules that a script relies on: a hash or set left empty is deleted, INCRBY creates its key, RENAME
overwrites its target, a wrong type is an error (`ScriptError`, as the script call fails).

Two commands cannot be reproduced and are documented where they differ: SPOP picks members at
random (here: in sorted order) and a stream's `MAXLEN ~` trims whole nodes (here: exactly
`maxlen` entries are kept). The differential tests (tests/sink/) choose inputs whose outcome does
not depend on either. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Arg", "Dump", "Keyspace", "ScriptError", "Stream", "ZSet", "as_bytes", "members", "merge_json"]

Arg = str | bytes | int  # an argument as redis-py sends it


def as_bytes(value: Arg) -> bytes:
    """What Redis receives for `value` (redis-py's encoding: UTF-8 text, ints in decimal)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, int):
        return str(value).encode()
    return value.encode()


class ScriptError(Exception):
    """The call failed: an error reply of the script (LEASE_LOST, CHECKPOINT_MOVED, ...) or of a
    command it ran (WRONGTYPE). As in Redis, the writes made before stay."""


@dataclass(slots=True)
class Stream:
    """A stream's entries, oldest first; ids are not kept (Redis draws them from its clock)."""

    entries: list[tuple[bytes, ...]] = field(default_factory=list)


@dataclass(slots=True)
class ZSet:
    """A sorted set: member -> score (derived index entries, service/sink/derive.py)."""

    members: dict[bytes, float] = field(default_factory=dict)


Value = bytes | dict[bytes, bytes] | set[bytes] | Stream | ZSet
# key -> (type, contents): what the differential tests compare; a hash as a dict (Redis does not
# keep a big hash's field order), a set as a frozenset, a stream as its entries' field lists.
Dump = dict[bytes, tuple[str, object]]


@dataclass(slots=True)
class Keyspace:
    data: dict[bytes, Value] = field(default_factory=dict)

    def dump(self) -> Dump:
        out: Dump = {}
        for key, v in self.data.items():
            if isinstance(v, bytes):
                out[key] = ("string", v)
            elif isinstance(v, dict):
                out[key] = ("hash", dict(v))
            elif isinstance(v, set):
                out[key] = ("set", frozenset(v))
            elif isinstance(v, ZSet):
                out[key] = ("zset", dict(v.members))
            else:
                out[key] = ("stream", list(v.entries))
        return out

    def _typed(self, key: bytes, kind: type) -> Value | None:
        v = self.data.get(key)
        if v is not None and not isinstance(v, kind):
            raise ScriptError("WRONGTYPE Operation against a key holding the wrong kind of value")
        return v

    def _hash(self, key: bytes) -> dict[bytes, bytes] | None:
        return self._typed(key, dict)  # type: ignore[return-value]

    def _set(self, key: bytes) -> set[bytes] | None:
        return self._typed(key, set)  # type: ignore[return-value]

    # -- keys and strings ------------------------------------------------------------------------
    def exists(self, key: bytes) -> bool:
        return key in self.data

    def delete(self, *keys: bytes) -> None:  # DEL, UNLINK
        for k in keys:
            self.data.pop(k, None)

    def rename(self, src: bytes, dst: bytes) -> None:
        if src not in self.data:
            raise ScriptError("ERR no such key")
        self.data[dst] = self.data.pop(src)

    def get(self, key: bytes) -> bytes | None:
        return self._typed(key, bytes)  # type: ignore[return-value]

    def set(self, key: bytes, value: bytes) -> None:  # SET replaces any type
        self.data[key] = value

    def incrby(self, key: bytes, by: int) -> int:
        cur = self._typed(key, bytes)
        n = int(cur) + by if cur is not None else by  # type: ignore[arg-type]
        self.data[key] = str(n).encode()
        return n

    # -- hashes ----------------------------------------------------------------------------------
    def hget(self, key: bytes, f: bytes) -> bytes | None:
        h = self._hash(key)
        return None if h is None else h.get(f)

    def hmget(self, key: bytes, fields: Iterable[bytes]) -> list[bytes | None]:
        h = self._hash(key) or {}
        return [h.get(f) for f in fields]

    def hgetall(self, key: bytes) -> dict[bytes, bytes]:
        return dict(self._hash(key) or {})

    def hexists(self, key: bytes, f: bytes) -> bool:
        return f in (self._hash(key) or {})

    def hlen(self, key: bytes) -> int:
        return len(self._hash(key) or {})

    def hset(self, key: bytes, pairs: Iterable[tuple[bytes, bytes]]) -> int:
        """HSET; returns the count of fields added (not replaced)."""
        h = self._hash(key)
        if h is None:
            h = {}
        added = 0
        for f, v in pairs:
            added += f not in h
            h[f] = v
        if h:
            self.data[key] = h
        return added

    def hdel(self, key: bytes, fields: Iterable[bytes]) -> None:
        h = self._hash(key)
        if h is None:
            return
        for f in fields:
            h.pop(f, None)
        if not h:
            del self.data[key]

    def hincrby(self, key: bytes, f: bytes, by: int) -> int:
        h = self._hash(key) or {}
        n = int(h.get(f, b"0")) + by
        h[f] = str(n).encode()
        self.data[key] = h
        return n

    # -- sets ------------------------------------------------------------------------------------
    def sadd(self, key: bytes, ms: Iterable[bytes]) -> None:
        s = self._set(key)
        s = set() if s is None else s
        s.update(ms)
        if s:
            self.data[key] = s

    def srem(self, key: bytes, ms: Iterable[bytes]) -> None:
        s = self._set(key)
        if s is None:
            return
        s.difference_update(ms)
        if not s:
            del self.data[key]

    def smembers(self, key: bytes) -> list[bytes]:
        """In sorted order (Redis's is its own: tests keep cascades independent of it)."""
        return sorted(self._set(key) or ())

    def sismember(self, key: bytes, m: bytes) -> bool:
        return m in (self._set(key) or ())

    def scard(self, key: bytes) -> int:
        return len(self._set(key) or ())

    def spop(self, key: bytes, count: int) -> list[bytes]:
        """SPOP key count: the first `count` members in sorted order (Redis: random ones)."""
        out = self.smembers(key)[:count]
        self.srem(key, out)
        return out

    # -- sorted sets -----------------------------------------------------------------------------
    def zadd(self, key: bytes, score: float, member: bytes) -> None:
        z = self._typed(key, ZSet)
        if z is None:
            z = self.data[key] = ZSet()
        assert isinstance(z, ZSet)
        z.members[member] = score

    def zrem(self, key: bytes, member: bytes) -> None:
        z = self._typed(key, ZSet)
        if isinstance(z, ZSet):
            z.members.pop(member, None)
            if not z.members:
                del self.data[key]

    # -- streams ---------------------------------------------------------------------------------
    def xadd(self, key: bytes, maxlen: int, fields: tuple[bytes, ...]) -> None:
        """XADD key MAXLEN ~ maxlen * fields; keeps exactly the last `maxlen` entries (Redis's `~`
        keeps at least that many: it trims whole nodes of its radix tree)."""
        s = self._typed(key, Stream)
        if s is None:
            s = self.data[key] = Stream()
        assert isinstance(s, Stream)
        s.entries.append(fields)
        if len(s.entries) > maxlen:
            del s.entries[: len(s.entries) - maxlen]


# -- flat JSON documents (common.lua's `members` and `merge_json`, byte for byte) ----------------


def members(doc: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """A flat JSON object as orjson writes it (compact) -> its raw keys in order, raw key -> raw
    value text. Values are never decoded, as in the script (which has no lossless JSON reader)."""
    keys: list[bytes] = []
    vals: dict[bytes, bytes] = {}
    i, n = 1, len(doc)  # 0-based; the script's 2 (1-based): past the `{`
    while i < n:
        c = doc[i]
        if c == 0x7D:  # }
            break
        if c == 0x2C:  # ,
            i += 1
        ks = i
        i += 1
        while True:  # the key string
            c = doc[i]
            if c == 0x5C:
                i += 2
            elif c == 0x22:
                break
            else:
                i += 1
        key = doc[ks : i + 1]
        i += 2  # the closing quote and ':'
        vs, depth, instr = i, 0, False
        while i < n:  # the value, up to a top-level , or }
            c = doc[i]
            if instr:
                if c == 0x5C:
                    i += 1
                elif c == 0x22:
                    instr = False
            elif c == 0x22:
                instr = True
            elif c in (0x7B, 0x5B):
                depth += 1
            elif c in (0x7D, 0x5D):
                if depth == 0:
                    break
                depth -= 1
            elif c == 0x2C and depth == 0:
                break
            i += 1
        if key not in vals:
            keys.append(key)
        vals[key] = doc[vs:i]
    return keys, vals


def merge_json(cur: bytes | None, patch: bytes) -> bytes:
    """`patch`'s members over `cur`'s, in cur's order, values copied as raw JSON text."""
    keys, vals = members(cur) if cur is not None else ([], {})
    pkeys, pvals = members(patch)
    for k in pkeys:
        if k not in vals:
            keys.append(k)
        vals[k] = pvals[k]
    return b"{" + b",".join(k + b":" + vals[k] for k in keys) + b"}"
