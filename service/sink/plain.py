"""The plain form of an insert-only apply call: DEL + HSET per row in MULTI/EXEC, fenced by WATCH.

Redis runs a row's HSET from the apply script for about twice its CPU as a plain command (each
`redis.call` converts its arguments to Lua strings and back: docs/BENCHMARKS.md, "The apply").
A load is almost only whole-row INSERTs, and their calls need none of the script's reads: so a
call (apply IR, ir.py) of whole hash rows (WriteRow), tables registered (AddMember) and the
checkpoint (SetFields) is sent as

    WATCH {checkpoint} {resync} {fence} {guard}
    EVALSHA guard ...          the apply script's checks: lease, checkpoint chain, no resync mark
                               on the call's tables, its sets are sets; a refusal INCRs `__guard`
    MULTI
    INCRBY {seq} nseq          the call's reply: its first change's sequence number
    DEL row ...; HSET row ...  a run of rows: one DEL for the run (whole rows replace what was
                               there), one HSET each
    SADD ...; HSET ...         the `__keys` and `__tables` members and the checkpoint, as the script
    EXEC

A shaped table's rows (derive.py; hash rows without a ttl) go in this form too when none of them
has derived entries recorded yet (the guard checks their `__derived` fields: a row the mirror holds
goes as the script, which moves its old entries): their entries are computed here by derive.py,
the twin of lua/derive.lua, and written after the rows, grouped by key (one DEL of the copies, a
HSET each, one MSET of the unique keys, one SADD/ZADD per index key, one HSET of the records per
table, one HINCRBY per count).

The EXEC applies all of it at one instant, or nothing: a guard that refused wrote `__guard`, a
watched key, so the EXEC aborts; a watched key that changed after the guard read it (the checkpoint
chain, a resync mark, `__fence`, which every taking of the lease increments) aborts it too. What
the guard read is then still true when the EXEC writes, or the EXEC writes nothing: the same
guarantee as the script's. ScriptChannel sends a call that did not apply (and those after it, whose
chain checks then failed) again as script calls, which say why, or apply it.

Pure: IR in, packed RESP out (unit-tested against the script in tests/integration). Built from the
IR directly: no ARGV is encoded for a call that goes in this form.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from itertools import chain
from typing import Any, Final, cast

import hiredis

from service.binlog.rowchange import Row
from service.sink.derive import HIDDEN, Derivation, counts_field, derivation_of, encode_raw, read_fields
from service.sink.ir import AddMember, ApplyCall, SetFields, TableKeys, WriteRow
from service.sink.keys import DERIVED_COUNTS_SUFFIX, DERIVED_SUFFIX
from service.sink.values import hash_text, row_fields

__all__ = ["PlainCall", "pack_hset", "plain_call"]

Command = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class PlainCall:
    packed: bytes  # the RESP of every command, WATCH to EXEC
    replies: int  # how many replies Redis sends for it: the EXEC's is the last


def plain_call(
    call: ApplyCall, tables_key: str, guard_sha: str, guard_key: str, fence_key: str, avoid: Collection[str]
) -> PlainCall | None:
    """The plain form of the apply call `call` (hash rows), or None when it is not an insert-only
    call of one chunk (WriteRow, AddMember, SetFields; the others go as the script). `avoid`:
    table ids whose calls go as the script (a resync in flight: its rows go to `__touched`)."""
    h = call.header
    token = h.token
    if h.chunk != 0 or h.done != 0 or not token or token[0] == "#":
        return None  # a chunked transaction; unfenced, or a cluster's fencing number
    cmds: list[Command | bytes] = []  # a command, or the RESP of a run's HSETs
    tids: list[str] = []
    sets: dict[str, list[str]] = {}  # `__keys` set -> members to add, in op order
    dels: list[str] = ["DEL"]  # the rows of the current run: one DEL, then their HSETs
    writes: list[bytes] = []  # the RESP of the run's HSETs, in pieces
    hsets = 0  # HSETs packed in `cmds`' RESP pieces (each one reply)
    in_run: set[str] = set()
    registered: set[str] = set()  # tables added to `__tables` by the call (as the script does)
    table: TableKeys | None = None
    base = ""
    members: list[str] = []
    entries = _Entries()
    derivation: _Shaped | None = None
    for op in chain(call.ops, call.tail):
        if isinstance(op, WriteRow):
            t = op.table
            if t is not table and t != table:
                if t.tid in avoid or t.json:
                    return None
                derivation = _derivation(t.derive) if t.derive else None
                if t.derive and derivation is None:
                    return None  # (a ttl: its expiry is read from the server's clock)
                if t.tid not in registered:
                    registered.add(t.tid)
                    _flush(cmds, dels, writes, in_run, sets)
                    cmds.append(("SADD", tables_key, t.tid))
                base = t.base + ":"
                members = sets.setdefault(t.index, [])
                tids.append(t.tid)
            table = t
            key = base + op.suffix
            if key in in_run:  # the same row twice in a run: its DEL must come between (rare)
                _end_run(cmds, dels, writes, in_run)
            in_run.add(key)
            dels.append(key)
            mark = len(writes)
            pairs = pack_hset(writes, key, op.row)
            if derivation is not None and (
                pairs < 0 or not entries.add(t, derivation, op, key, writes[mark:])
            ):
                return None
            if pairs < 0:  # left to hiredis (never from the decoder's values)
                fields = row_fields(op.row)
                writes.append(hiredis.pack_command(cast(Any, ("HSET", key, *fields))))
            if pairs:
                hsets += 1
            members.append(op.suffix)
        elif isinstance(op, AddMember | SetFields):
            _flush(cmds, dels, writes, in_run, sets)
            if isinstance(op, AddMember):
                cmds.append(("SADD", op.set, op.member))
                registered.clear()  # a table action: the script registers the tables again
                table = None
            elif isinstance(op, SetFields) and op.fields:
                cmds.append(("HSET", op.key, *chain.from_iterable(op.fields)))
        else:
            return None
    _flush(cmds, dels, writes, in_run, sets)
    typed = sorted({str(c[1]) for c in cmds if isinstance(c, tuple) and c[0] == "SADD"})
    hsets += entries.commands(cmds)
    guard = ("EVALSHA", guard_sha, 0, h.lease_key, token, h.checkpoint_key, h.expected_prev, h.resync_key)
    tables = dict.fromkeys(tids)
    commands: list[Command | bytes] = [
        ("WATCH", h.checkpoint_key, h.resync_key, fence_key, guard_key),
        (*guard, guard_key, len(typed), *typed, len(tables), *tables, *entries.checks()),
        ("MULTI",),
        ("INCRBY", h.seq_key, h.nseq),
        *cmds,
        ("EXEC",),
    ]
    packed = [c if isinstance(c, bytes) else hiredis.pack_command(cast(Any, c)) for c in commands]
    blobs = sum(1 for c in commands if isinstance(c, bytes))
    return PlainCall(b"".join(packed), len(commands) - blobs + hsets)


# A row's HSET is most of a load's RESP: packed here, with its column names' RESP kept (they repeat
# every row), for half of hiredis.pack_command's cost (which formats each length with sprintf).
_LENGTHS: Final = [b"$%d\r\n" % n for n in range(1024)]
_ARRAYS: Final = [b"*%d\r\n" % n for n in range(1024)]
_HSET: Final = b"$4\r\nHSET\r\n"
_names: dict[str, bytes] = {}  # column name -> its RESP bulk string


def _bulk(data: bytes) -> bytes:
    n = len(data)
    return (_LENGTHS[n] if n < 1024 else b"$%d\r\n" % n) + data + b"\r\n"


def pack_hset(out: list[bytes], key: str, row: Row) -> int:
    """Append to `out` the RESP of HSET key and the row's field-value pairs (values.row_fields,
    read straight from the row: no list of pairs per row): the same bytes as hiredis.pack_command
    (tests/unit/test_sink_plain.py). Returns the pairs (0: nothing appended, a row of NULLs has no
    HSET), or -1 (nothing appended) for a value whose text is not a str or bytes, or a lone
    surrogate: hiredis packs those. Column names are str (Row), as the decoder makes them."""
    mark = len(out)
    out.append(b"")  # the array's length, once the pairs are counted
    out.append(_HSET)
    pairs = 0
    try:
        out.append(_bulk(key.encode()))
        names = _names
        for name, v in row.items():
            if v is None:
                continue
            value = hash_text(v)
            chunk = names.get(name)
            if chunk is None:
                if len(names) >= 4096:
                    names.clear()
                chunk = names[name] = _bulk(name.encode())
            out.append(chunk)
            if isinstance(value, str):
                data = value.encode()
            elif isinstance(value, bytes):
                data = value
            else:
                del out[mark:]
                return -1
            m = len(data)
            out.append(_LENGTHS[m] if m < 1024 else b"$%d\r\n" % m)
            out.append(data)
            out.append(b"\r\n")
            pairs += 1
    except UnicodeEncodeError:
        del out[mark:]
        return -1
    if not pairs:
        del out[mark:]
        return 0
    n = 2 + 2 * pairs
    out[mark] = _ARRAYS[n] if n < 1024 else b"*%d\r\n" % n
    return pairs


def _flush(
    cmds: list[Command | bytes],
    dels: list[str],
    writes: list[bytes],
    in_run: set[str],
    sets: dict[str, list[str]],
) -> None:
    """End the run of rows, and add the `__keys` members noted before (as the script does before
    an op that may read or change the sets)."""
    _end_run(cmds, dels, writes, in_run)
    for set_key, ms in sets.items():
        if ms:
            cmds.append(("SADD", set_key, *ms))
            ms.clear()


def _end_run(cmds: list[Command | bytes], dels: list[str], writes: list[bytes], in_run: set[str]) -> None:
    if len(dels) > 1:
        cmds.append(tuple(dels))
        if writes:  # one piece of RESP for the run's HSETs: one join, not one per row
            cmds.append(b"".join(writes))
        del dels[1:]
        writes.clear()
        in_run.clear()


@dataclass(frozen=True, slots=True)
class _Shaped:
    derivation: Derivation
    tag: str
    counted: tuple[str, ...]  # each index's `__derivedcounts` field (0: the row copies)
    reads: tuple[str, ...]  # the fields its entries read


_derivations: dict[str, _Shaped | None] = {}


def _derivation(spec: str) -> _Shaped | None:
    """A spec text's derivation, or None when its rows do not go in the plain form (a ttl)."""
    if spec not in _derivations:
        d, tag = derivation_of(spec)
        fields = tuple(counts_field(tag, i) for i in range(len(d.indexes) + 1))
        reads = read_fields(spec)
        plain = reads is not None and d.json is None
        _derivations[spec] = _Shaped(d, tag, fields, tuple(reads or ())) if plain else None
    return _derivations.get(spec)


class _Entries:
    """The derived entries of a plain call's shaped rows (derive.py, as lua/derive.lua writes them
    for a row that had none), grouped by key."""

    def __init__(self) -> None:
        self.copies: list[str] = ["DEL"]
        self.copy_writes: list[bytes] = []
        self.copy_hsets = 0
        self.unique: list[str] = ["MSET"]
        self.sets: dict[str, list[str]] = {}  # set key -> members
        self.zsets: dict[str, list[str]] = {}  # zset key -> score member ...
        self.records: dict[str, list[str]] = {}  # `__derived` -> suffix record ...
        # (`__derivedcounts`, tag) -> (each index's field, its increment)
        self.tallies: dict[tuple[str, str], tuple[tuple[str, ...], list[int]]] = {}
        self.rows: set[str] = set()  # the keys of the rows noted
        # the last row's table and shape: its `__derived` record list and its tally
        self._table: TableKeys | None = None
        self._shaped: _Shaped | None = None
        self._records: list[str] = []
        self._tally: list[int] = []

    def add(self, t: TableKeys, shaped: _Shaped, op: WriteRow, key: str, packed: list[bytes]) -> bool:
        """Note the entries of row `op` (stored at `key`, by the HSET `packed`: pack_hset's
        pieces); False when the call cannot take them in this form (the same row twice: its
        second write moves the first one's entries)."""
        if key in self.rows:
            return False
        self.rows.add(key)
        if t is not self._table or shaped is not self._shaped:
            self._table, self._shaped = t, shaped
            self._records = self.records.setdefault(f"{t.base}:{DERIVED_SUFFIX}", [])
            counts = (f"{t.base}:{DERIVED_COUNTS_SUFFIX}", shaped.tag)
            tally = self.tallies.get(counts)
            if tally is None:
                tally = self.tallies[counts] = (shaped.counted, [0] * len(shaped.counted))
            self._tally = tally[1]
        d = shaped.derivation
        row = op.row
        # (the caller packed the row: each value's text is a str or bytes)
        member, found = d.raw_entries(
            {k: hash_text(v) for k in shaped.reads if (v := row.get(k)) is not None}, key
        )
        if member is None:
            return True  # no entries yet (derive.lua's underive of a row without any: nothing)
        try:
            record = encode_raw(shaped.tag, member, found)
        except UnicodeEncodeError:  # bytes in a text column's key part: left to the script
            return False
        counted = self._tally
        for kind, ekey, score, index in found:
            if kind == "k":
                self.copies.append(ekey)
                if d.hidden:
                    shown = {k: v for k, v in row.items() if not k.startswith(HIDDEN)}
                    self.copy_hsets += pack_hset(self.copy_writes, ekey, shown) > 0
                elif packed:  # the row's HSET, another key (its pieces copied, the key replaced)
                    writes = self.copy_writes
                    at = len(writes) + 2
                    writes.extend(packed)
                    writes[at] = _bulk(ekey.encode())
                    self.copy_hsets += 1
            elif kind == "u":
                self.unique.append(ekey)
                self.unique.append(member)
            elif kind == "s":
                self.sets.setdefault(ekey, []).append(member)
            else:
                self.zsets.setdefault(ekey, []).extend((score, member))
            counted[index] += 1
        self._records.append(op.suffix)
        self._records.append(record)
        return True

    def commands(self, out: list[Command | bytes]) -> int:
        """Append the entries' commands to `out`; returns the HSETs packed as RESP pieces."""
        if len(self.copies) > 1:
            out.append(tuple(self.copies))
            if self.copy_writes:
                out.append(b"".join(self.copy_writes))
        if len(self.unique) > 1:
            out.append(tuple(self.unique))
        out.extend(("SADD", key, *ms) for key, ms in self.sets.items())
        out.extend(("ZADD", key, *ms) for key, ms in self.zsets.items())
        out.extend(("HSET", key, *rs) for key, rs in self.records.items() if rs)
        for (key, _), (fields, ns) in self.tallies.items():
            out.extend(("HINCRBY", key, field, n) for field, n in zip(fields, ns, strict=True) if n)
        return self.copy_hsets

    def checks(self) -> list[str | int]:
        """The guard's arguments: per `__derived` hash, the suffixes that must have no record."""
        out: list[str | int] = []
        for key, rs in self.records.items():
            if rs:
                out += (key, len(rs) // 2, *rs[::2])
        return out
