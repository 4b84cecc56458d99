"""The plain form of an insert-only apply call: DEL + HSET per row in MULTI/EXEC, fenced by WATCH.

Redis runs a row's HSET from the apply script for about twice its CPU as a plain command (each
`redis.call` converts its arguments to Lua strings and back: docs/BENCHMARKS.md, "The apply").
A load is almost only whole-row INSERTs, and their calls need none of the script's reads: so a
call whose ops are only A, C, WP and H (a hash-layout load's) is sent as

    WATCH {checkpoint} {resync} {fence} {guard}
    EVALSHA guard ...          the apply script's checks: lease, checkpoint chain, no resync mark
                               on the call's tables, its sets are sets; a refusal INCRs `__guard`
    MULTI
    INCRBY {seq} nseq          the call's reply: its first change's sequence number
    DEL row ...; HSET row ...  a run of rows: one DEL for the run (whole rows replace what was
                               there), one HSET each
    SADD ...; HSET ...         the `__keys` members, ops A and H (the checkpoint), as the script
    EXEC

The EXEC applies all of it at one instant, or nothing: a guard that refused wrote `__guard`, a
watched key, so the EXEC aborts; a watched key that changed after the guard read it (the checkpoint
chain, a resync mark, `__fence`, which every taking of the lease increments) aborts it too. What
the guard read is then still true when the EXEC writes, or the EXEC writes nothing: the same
guarantee as the script's. ScriptChannel sends a call that did not apply (and those after it, whose
chain checks then failed) again as script calls, which say why, or apply it.

Pure: args in, packed RESP out (unit-tested against the script in tests/integration).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, cast

import hiredis

from service.sink.codec import Arg

__all__ = ["PlainCall", "plain_call"]

# the apply call's header: lease token checkpoint prev progress txn chunk final seq nseq resync done
_HEADER = 12


@dataclass(frozen=True, slots=True)
class PlainCall:
    packed: bytes  # the RESP of every command, WATCH to EXEC
    replies: int  # how many replies Redis sends for it: the EXEC's is the last


def plain_call(
    args: list[Arg], guard_sha: str, guard_key: str, fence_key: str, avoid: Collection[str]
) -> PlainCall | None:
    """The plain form of the apply call `args`, or None when it is not an insert-only call of one
    chunk (ops C, A, H and WP: the planner's `plain_rows`; the others go as the script). `avoid`:
    table ids whose calls go as the script (a resync in flight: its rows go to `__touched`)."""
    if len(args) <= _HEADER or args[6] != 0 or args[11] != 0:  # chunk 0: not a chunked transaction
        return None
    lease, token, checkpoint, prev, _, _, _, _, seq, nseq, resync, _ = args[:_HEADER]
    if not isinstance(token, str) or not token or token[0] == "#":  # unfenced, or a cluster's number
        return None
    cmds: list[tuple[Arg, ...] | bytes] = []  # a command, or the RESP of a run's HSETs
    tids: list[Arg] = []
    sets: dict[Arg, list[Arg]] = {}  # set -> members to add, in op order (op WP's `__keys`)
    dels: list[Arg] = ["DEL"]  # the rows of the current run: one DEL, then their HSETs
    writes: list[bytes] = []  # the RESP of the run's HSETs, in pieces
    hsets = 0  # HSETs packed in `cmds`' RESP pieces (each one reply)
    in_run: set[str] = set()
    base: str = ""
    members: list[Arg] = []
    i, n = _HEADER, len(args)
    while i < n:
        op = args[i]
        if op == "WP":  # suffix count f v ...
            suffix = args[i + 1]
            c = args[i + 2]
            assert isinstance(suffix, str) and isinstance(c, int)
            key = base + suffix
            if key in in_run:  # the same row twice in a run: its DEL must come between (rare)
                _end_run(cmds, dels, writes, in_run)
            in_run.add(key)
            dels.append(key)
            if c:
                if not _hset(writes, key, args, i + 3, c):
                    writes.append(
                        hiredis.pack_command(cast(Any, ("HSET", key, *args[i + 3 : i + 3 + 2 * c])))
                    )
                hsets += 1
            members.append(suffix)
            i += 3 + 2 * c
        elif op == "C":  # base index table_id touched
            tid = args[i + 3]
            if tid in avoid:
                return None
            b = args[i + 1]
            assert isinstance(b, str)
            base = b + ":"
            members = sets.setdefault(args[i + 2], [])
            tids.append(tid)
            i += 5
        elif op == "A" or op == "H":  # SADD set member; HSET key count f v ... (the checkpoint)
            _end_run(cmds, dels, writes, in_run)
            for set_key, ms in sets.items():  # the `__keys` noted before, as the script
                if ms:
                    cmds.append(("SADD", set_key, *ms))
                    ms.clear()
            if op == "A":
                cmds.append(("SADD", args[i + 1], args[i + 2]))
                i += 3
            else:
                c = int(args[i + 2])
                if c:
                    cmds.append(("HSET", args[i + 1], *args[i + 3 : i + 3 + 2 * c]))
                i += 3 + 2 * c
        else:
            return None
    _end_run(cmds, dels, writes, in_run)
    for set_key, ms in sets.items():
        if ms:
            cmds.append(("SADD", set_key, *ms))
    typed = sorted({str(c[1]) for c in cmds if isinstance(c, tuple) and c[0] == "SADD"})
    guard = ("EVALSHA", guard_sha, 0, lease, token, checkpoint, prev, resync, guard_key, len(typed))
    commands: list[tuple[Arg, ...] | bytes] = [
        ("WATCH", checkpoint, resync, fence_key, guard_key),
        (*guard, *typed, *dict.fromkeys(tids)),
        ("MULTI",),
        ("INCRBY", seq, nseq),
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


def _hset(out: list[bytes], key: str, args: list[Arg], at: int, count: int) -> bool:
    """Append to `out` the RESP of HSET key and the `count` field-value pairs at args[at:]: the
    same bytes as hiredis.pack_command (tests/unit/test_sink_plain.py). False (nothing appended)
    for a pair of another type than a str name and a str or bytes value (none from the planner)
    or a lone surrogate: hiredis packs those."""
    n = 2 + 2 * count
    mark = len(out)
    out.append(_ARRAYS[n] if n < 1024 else b"*%d\r\n" % n)
    out.append(_HSET)
    try:
        out.append(_bulk(key.encode()))
        names = _names
        for j in range(at, at + 2 * count, 2):
            name, value = args[j], args[j + 1]
            if not isinstance(name, str):
                del out[mark:]
                return False
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
                return False
            m = len(data)
            out.append(_LENGTHS[m] if m < 1024 else b"$%d\r\n" % m)
            out.append(data)
            out.append(b"\r\n")
    except UnicodeEncodeError:
        del out[mark:]
        return False
    return True


def _end_run(
    cmds: list[tuple[Arg, ...] | bytes], dels: list[Arg], writes: list[bytes], in_run: set[str]
) -> None:
    if len(dels) > 1:
        cmds.append(tuple(dels))
        if writes:  # one piece of RESP for the run's HSETs: one join, not one per row
            cmds.append(b"".join(writes))
        del dels[1:]
        writes.clear()
        in_run.clear()
