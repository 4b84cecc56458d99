"""service/sink/plain.py: which apply calls take the plain form, and its commands (what they do in
Redis is proven against the script in tests/integration/test_mirror_plain.py)."""

from __future__ import annotations

import random
from decimal import Decimal

import hiredis

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.sink.ir import ApplyCall, ApplyHeader
from service.sink.keys import KeyLayout
from service.sink.plain import pack_hset, plain_call
from service.sink.plan import IrOp, Planner, checkpoint_op
from service.sink.values import row_fields

LAYOUT = KeyLayout("m")
T = LAYOUT.tables_key


def _row(op: Op, table: str, **row: object) -> RowChange:
    before, after = (None, dict(row)) if op is Op.INSERT else (dict(row), None)
    return RowChange(op, "db", table, before, after, EventSpan("mysql-bin.000001", 4, 90), 1, 1)


def _call(*changes: RowChange, token: str = "tok", chunk: int = 0) -> ApplyCall:
    p = Planner(LAYOUT, lambda s, t: ("id",))
    ops: list[IrOp] = []
    for ch in changes:
        ops += p.change(ch) or []
    lay = LAYOUT
    head = ApplyHeader(
        lay.lease_key, token, lay.checkpoint_key, "prev", lay.progress_key, "txn", chunk, True,
        lay.seq_key, len(changes), lay.resync_key, 0,
    )  # fmt: skip
    return ApplyCall(head, ops, [checkpoint_op(lay, {"id": "txn"})])


def _commands(packed: bytes) -> list[list[bytes]]:
    """The commands of packed RESP (hiredis reads requests as it reads replies: arrays of bulks)."""
    reader = hiredis.Reader()
    reader.feed(packed)
    out = []
    while (cmd := reader.gets()) is not False:
        out.append(cmd)
    return out


def test_an_insert_only_call_is_watch_guard_multi_writes_exec() -> None:
    args = _call(_row(Op.INSERT, "a", id=1, v="x", n=None), _row(Op.INSERT, "a", id=2, v="y", n=3))
    plain = plain_call(args, "m:__tables", "sha", "m:__guard", "m:__fence", set())
    assert plain is not None
    cmds = _commands(plain.packed)
    assert plain.replies == len(cmds)
    assert cmds == [
        [b"WATCH", b"m:__checkpoint", b"m:__resync", b"m:__fence", b"m:__guard"],
        [b"EVALSHA", b"sha", b"0", b"m:__lease", b"tok", b"m:__checkpoint", b"prev", b"m:__resync"]
        + [b"m:__guard", b"2", b"m:__tables", b"m:db:a:__keys", b"1", b"db:a"],
        [b"MULTI"],
        [b"INCRBY", b"m:__seq", b"2"],
        [b"SADD", b"m:__tables", b"db:a"],
        [b"DEL", b"m:db:a:1", b"m:db:a:2"],
        [b"HSET", b"m:db:a:1", b"id", b"1", b"v", b"x"],
        [b"HSET", b"m:db:a:2", b"id", b"2", b"v", b"y", b"n", b"3"],
        [b"SADD", b"m:db:a:__keys", b"1", b"2"],
        [b"HSET", b"m:__checkpoint", b"id", b"txn"],
        [b"EXEC"],
    ]


def test_the_same_row_twice_in_a_call_gets_its_own_del() -> None:
    args = _call(_row(Op.INSERT, "a", id=1, v="x"), _row(Op.INSERT, "a", id=1, v="y"))
    plain = plain_call(args, "m:__tables", "sha", "g", "f", set())
    assert plain is not None
    writes = [c for c in _commands(plain.packed) if c[0] in (b"DEL", b"HSET")][:-1]
    assert [c[:2] for c in writes] == [[b"DEL", b"m:db:a:1"], [b"HSET", b"m:db:a:1"]] * 2


def test_other_calls_go_as_the_script() -> None:
    ins = _row(Op.INSERT, "a", id=1, v="x")
    assert plain_call(_call(ins, _row(Op.DELETE, "a", id=1)), T, "s", "g", "f", set()) is None
    assert plain_call(_call(ins, chunk=1), T, "s", "g", "f", set()) is None  # a chunked transaction
    assert plain_call(_call(ins, token="#3"), T, "s", "g", "f", set()) is None  # Redis Cluster
    assert plain_call(_call(ins, token=""), T, "s", "g", "f", set()) is None  # unfenced
    assert plain_call(_call(ins), T, "s", "g", "f", {"db:a"}) is None  # a resync in flight
    assert plain_call(_call(ins), T, "s", "g", "f", {"db:b"}) is not None


def test_a_rows_hset_is_packed_as_hiredis_packs_it() -> None:
    """The rows' HSETs are packed by plain.py itself (the column names' RESP kept): the same bytes
    as hiredis.pack_command, whatever the text and the lengths; what it does not pack (a value
    of another type, a lone surrogate) is left to hiredis as a command."""
    rnd = random.Random(30)
    alphabet = "ab\r\n\x00é€😀 :"
    for _ in range(500):
        row: dict[str, object] = {}
        for k in range(rnd.randrange(1, 12)):
            name = rnd.choice(("id", "v", f"col{k}", "ñame", "x" * rnd.choice((1, 1023, 1030))))
            value: object = "".join(rnd.choice(alphabet) for _ in range(rnd.choice((0, 1, 7, 400, 1100))))
            if rnd.randrange(4) == 0:
                value = rnd.randbytes(rnd.choice((0, 3, 1021, 1030)))
            elif rnd.randrange(4) == 0:
                value = rnd.choice((None, 7, -1.5, Decimal("1.50")))  # NULL: not stored
            row[name] = value
        key = "m:db:a:" + "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 40)))
        out = [b"before"]
        pairs = row_fields(row)
        assert pack_hset(out, key, row) == len(pairs) // 2
        assert out[0] == b"before"
        if pairs:
            assert b"".join(out[1:]) == hiredis.pack_command(("HSET", key, *pairs))  # type: ignore[arg-type]
        else:
            assert out == [b"before"]  # a row of NULLs: no HSET
    out = [b"before"]  # a lone surrogate: left to hiredis, nothing appended
    assert pack_hset(out, "k", {"f": "\ud800"}) == -1 and out == [b"before"]
    # a call's replies count each HSET, packed in one piece
    args = _call(*(_row(Op.INSERT, "a", id=i, v="x" * i) for i in range(5)), _row(Op.INSERT, "a", id=1, v=1))
    plain = plain_call(args, "m:__tables", "sha", "g", "f", set())
    assert plain is not None and plain.replies == len(_commands(plain.packed))
    rows = [c[1] for c in _commands(plain.packed) if c[0] == b"HSET" and c[1].startswith(b"m:db:a:")]
    assert rows == [b"m:db:a:%d" % i for i in (0, 1, 2, 3, 4, 1)]
