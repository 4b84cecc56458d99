"""RedisMirror against a real redis-server: atomic apply, checkpoint chain, chunks, lease, resync."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from redis import exceptions as rexc
from redis.asyncio import Redis

from service.binlog.canonical import row_to_json
from service.binlog.rowchange import EventSpan, Op, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import ConfigError, LeaseLost, RowsMissing, SinkError
from service.sink.keys import KeyLayout
from service.sink.mirror import MirrorOptions, RedisMirror
from service.sink.plan import ActionKind, TableAction
from service.transactions import Transaction

pytestmark = pytest.mark.redis  # redis_url: a redis-server alone; the sink needs no source


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _prefix() -> str:
    return "t" + uuid.uuid4().hex[:8]


_pos = iter(range(1000, 10**9, 100))


def txn(*changes: RowChange) -> Transaction:
    end = Checkpoint(BinlogPosition("mysql-bin.000001", next(_pos)), "0-1-5", 7)
    return Transaction(changes=changes, ddl=(), gtid="0-1-5", ts=7, end=end)


def ins(table: str, **row: object) -> RowChange:
    return RowChange(Op.INSERT, "db", table, None, dict(row), EventSpan("f.000001", 1, 2), 7, 1)


def upd(table: str, before: dict[str, object], after: dict[str, object]) -> RowChange:
    return RowChange(Op.UPDATE, "db", table, before, after, EventSpan("f.000001", 1, 2), 7, 1)


def dele(table: str, **row: object) -> RowChange:
    return RowChange(Op.DELETE, "db", table, dict(row), None, EventSpan("f.000001", 1, 2), 7, 1)


def keys_of(schema: str, table: str) -> tuple[str, ...] | None:
    return None if table == "nokey" else ("id",)


async def rows(redis: Redis, prefix: str, table: str) -> dict[str, dict[bytes, bytes]]:
    out = {}
    members = await redis.smembers(f"{prefix}:db:{table}:__keys")
    for m in members:
        out[m.decode()] = await redis.hgetall(f"{prefix}:db:{table}:{m.decode()}")
    return out


async def test_apply_rows_checkpoint_and_changelog(redis: Redis) -> None:
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(changelog_maxlen=1000))
    assert await m.load_checkpoint() is None
    assert await m.acquire_lease()
    t1 = txn(ins("a", id=1, v="x", n=None), ins("a", id=2, v="y", n=3), ins("nokey", v=1))
    pk_change = upd("a", {"id": 1, "v": "x", "n": None}, {"id": 10, "v": "z", "n": 5})
    t2 = txn(pk_change, dele("a", id=2, v="y", n=3))
    firsts = await m.apply([(t1, []), (t2, [])])
    assert firsts == [1, 4]
    assert await rows(redis, p, "a") == {"10": {b"id": b"10", b"v": b"z", b"n": b"5"}}
    assert await redis.exists(f"{p}:db:a:1", f"{p}:db:a:2") == 0
    cp = await m.load_checkpoint()
    assert cp == t2.end
    entries = await redis.xrange(f"{p}:__changes")
    assert [e[1][b"op"] for e in entries] == [b"insert", b"insert", b"update", b"delete"]
    assert [e[1][b"seq"] for e in entries] == [b"1", b"2", b"4", b"5"]
    assert m.planner.skipped.rows == {("db", "nokey"): 1}


async def test_chain_refuses_replays_and_gaps(redis: Redis) -> None:
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    t1 = txn(ins("a", id=1, v="x"))
    await m.apply([(t1, [])])
    m.reset_chain("")  # a stale in-memory view: pretends nothing was applied
    with pytest.raises(SinkError, match="CHECKPOINT_MOVED"):
        await m.apply([(t1, [])])
    await m.load_checkpoint()  # resume from the stored checkpoint
    await m.apply([(txn(ins("a", id=2, v="y")), [])])
    assert set(await rows(redis, p, "a")) == {"1", "2"}


def count_sends(m: RedisMirror, fail_after: int | None = None) -> list[int]:
    """Counts `m`'s script calls (the list's one item); with `fail_after`, the calls after that
    many fail, as if the process died before sending them."""
    channel = m.chain.channel
    real, count = channel.send, [0]

    async def send(args: object) -> None:
        count[0] += 1
        if fail_after is not None and count[0] > fail_after:
            raise rexc.ConnectionError("the process was killed")
        await real(args)  # type: ignore[arg-type]

    channel.send = send  # type: ignore[method-assign]
    return count


def crash_after(m: RedisMirror, calls: int) -> None:
    count_sends(m, calls)


async def changelog(redis: Redis, prefix: str) -> list[tuple[str, str]]:
    return [
        (e[1][b"table"].decode(), e[1][b"key"].decode()) for e in await redis.xrange(f"{prefix}:__changes")
    ]


@pytest.mark.parametrize("new_chunk_size", [2, 3, 1, 100])
async def test_chunked_transaction_resumes_after_crash(redis: Redis, new_chunk_size: int) -> None:
    """A crash between chunks: the restart (with the same or another chunk size) applies exactly
    the changes not applied yet: every row there, every change logged once."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=2, changelog_maxlen=100))
    await m.acquire_lease()
    await m.load_checkpoint()
    big = txn(*(ins("a", id=i, v=str(i)) for i in range(5)))
    crash_after(m, 1)
    with pytest.raises(SinkError, match=r"chunk 2 \(to change 4 of 5\)"):
        await m.apply([(big, [])])
    assert len(await rows(redis, p, "a")) == 2
    assert await redis.hgetall(f"{p}:__progress") == {
        b"txn": str(big.end.position).encode(),
        b"rows": b"2",
        b"first": b"1",
        b"t:db:a": b"2",
    }
    options = MirrorOptions(chunk_size=new_chunk_size, changelog_maxlen=100)
    m2 = RedisMirror(redis, KeyLayout(p), keys_of, options, m.token)
    assert await m2.load_checkpoint() is None
    assert await m2.apply([(big, [])]) == [1]
    assert set(await rows(redis, p, "a")) == {"0", "1", "2", "3", "4"}
    assert await changelog(redis, p) == [("a", str(i)) for i in range(5)]  # none lost, none twice
    entries = await redis.xrange(f"{p}:__changes")
    assert [e[1][b"seq"] for e in entries] == [b"1", b"2", b"3", b"4", b"5"]
    assert await m2.load_checkpoint() == big.end
    assert await redis.exists(f"{p}:__progress") == 0


async def test_chunked_transaction_resumes_after_the_table_selection_changed(redis: Redis) -> None:
    """The source order is a0 b0 c0 a1 b1 c1 a2 b2. Before the crash `c` was not selected; after
    it `b` is not and `c` is. a0 b0 a1 b1 were applied: the restart applies c0 c1 a2, and nothing
    twice (a chunk-number resume would skip the first two chunks of a0 c0 | a1 c1 | a2)."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=2, changelog_maxlen=100))
    await m.acquire_lease()
    await m.load_checkpoint()
    first = txn(
        ins("a", id=0), ins("b", id=0), ins("a", id=1), ins("b", id=1), ins("a", id=2), ins("b", id=2)
    )
    crash_after(m, 2)
    with pytest.raises(SinkError):
        await m.apply([(first, [])])
    again = replace(
        first, changes=(ins("a", id=0), ins("c", id=0), ins("a", id=1), ins("c", id=1), ins("a", id=2))
    )
    m2 = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=2, changelog_maxlen=100), m.token)
    await m2.load_checkpoint()
    await m2.apply([(again, [])])
    assert set(await rows(redis, p, "a")) == {"0", "1", "2"}
    assert set(await rows(redis, p, "c")) == {"0", "1"}
    logged = await changelog(redis, p)
    assert logged == [("a", "0"), ("b", "0"), ("a", "1"), ("b", "1"), ("c", "0"), ("c", "1"), ("a", "2")]
    assert await m2.load_checkpoint() == first.end
    assert await redis.exists(f"{p}:__progress") == 0


async def test_a_record_left_by_an_unfinished_transaction_is_replaced(redis: Redis) -> None:
    """A chunked transaction that became empty under a new selection leaves its `__progress`; the
    next chunked transaction starts over it instead of resuming the wrong one."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=2, changelog_maxlen=100))
    await m.acquire_lease()
    await m.load_checkpoint()
    crash_after(m, 1)
    with pytest.raises(SinkError):
        await m.apply([(txn(*(ins("b", id=i) for i in range(5))), [])])
    m2 = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=2, changelog_maxlen=100), m.token)
    await m2.load_checkpoint()
    big = txn(*(ins("a", id=i) for i in range(5)))
    await m2.apply([(txn(), []), (big, [])])
    assert set(await rows(redis, p, "a")) == {"0", "1", "2", "3", "4"}
    assert await m2.load_checkpoint() == big.end


async def test_lease_fences_a_second_writer(redis: Redis) -> None:
    p = _prefix()
    a = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(lease_ttl=1.0))
    b = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(lease_ttl=1.0))
    assert await a.acquire_lease()
    assert not await b.acquire_lease()
    await b.load_checkpoint()
    with pytest.raises(LeaseLost):
        await b.apply([(txn(ins("a", id=1)), [])])
    assert await redis.exists(f"{p}:db:a:1") == 0
    await a.release_lease()
    assert await b.acquire_lease()
    with pytest.raises(LeaseLost):
        await a.renew_lease()


async def test_truncate_drop_rename(redis: Redis) -> None:
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1), ins("a", id=2), ins("b", id=1)), [])])
    await m.apply([(txn(), [TableAction(ActionKind.RENAME, "db", "a", "db", "c")])])
    assert set(await rows(redis, p, "c")) == {"1", "2"}
    assert await rows(redis, p, "a") == {}
    await m.apply([(txn(), [TableAction(ActionKind.TRUNCATE, "db", "c")])])
    assert await rows(redis, p, "c") == {}
    await m.apply([(txn(), [TableAction(ActionKind.DROP, "db", "b")])])
    assert await rows(redis, p, "b") == {}
    assert await m.mirrored_tables() == {"db:c"}


async def keys_under(redis: Redis, prefix: str) -> set[str]:
    """Every key of the prefix but the bookkeeping ones that change with each apply."""
    skip = {f"{prefix}:{k}" for k in ("__checkpoint", "__seq", "__lease", "__fence", "__guard", "__tableops")}
    return {k.decode() async for k in redis.scan_iter(match=f"{prefix}:*")} - skip


async def test_table_operations_remove_and_move_rows_in_bounded_calls(redis: Redis) -> None:
    """DROP/TRUNCATE/RENAME of a big table never run as one script: `table_step` rows per call,
    before the transaction's own call (which moves the checkpoint)."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=3))
    await m.acquire_lease()
    await m.load_checkpoint()
    a, b = (ins("a", id=i, v="a") for i in range(10)), (ins("b", id=i) for i in range(7))
    await m.apply([(txn(*a, *b), [])])
    calls = count_sends(m)
    await m.apply([(txn(), [TableAction(ActionKind.RENAME, "db", "a", "db", "c")])])
    # c's rows removed (none), a's moved 3 + 3 + 3 + 1, no resync of a to carry over to c, then
    # the transaction's own call
    assert calls[0] == 7
    assert await rows(redis, p, "c") == {str(i): {b"id": str(i).encode(), b"v": b"a"} for i in range(10)}
    calls[0] = 0
    await m.apply([(txn(), [TableAction(ActionKind.TRUNCATE, "db", "c")])])
    assert calls[0] == 5
    calls[0] = 0
    await m.apply([(txn(), [TableAction(ActionKind.DROP, "db", "b")])])
    assert calls[0] == 4
    assert await keys_under(redis, p) == {f"{p}:__tables"}
    assert await m.mirrored_tables() == {"db:c"}


def swap() -> tuple[Transaction, list[TableAction]]:
    """`RENAME TABLE a TO tmp, b TO a, tmp TO b`: each step depends on the ones before."""
    renames = [("a", "tmp"), ("b", "a"), ("tmp", "b")]
    return txn(), [TableAction(ActionKind.RENAME, "db", old, "db", new) for old, new in renames]


async def test_table_work_resumes_exactly_after_a_crash_at_any_call(redis: Redis) -> None:
    """A crash after any call of a table swap's work, then a restart that applies the same
    transaction again: the units done are skipped, the one cut short continues, no row is lost
    or left behind."""
    options = MirrorOptions(table_step=2)

    async def seeded() -> tuple[str, RedisMirror]:
        p = _prefix()
        m = RedisMirror(redis, KeyLayout(p), keys_of, options)
        await m.acquire_lease()
        await m.load_checkpoint()
        a, b = (ins("a", id=i, v="a") for i in range(5)), (ins("b", id=i, v="b") for i in range(4))
        await m.apply([(txn(*a, *b), [])])
        return p, m

    p, m = await seeded()
    calls = count_sends(m)
    await m.apply([swap()])
    expected = {
        "a": {str(i): {b"id": str(i).encode(), b"v": b"b"} for i in range(4)},
        "b": {str(i): {b"id": str(i).encode(), b"v": b"a"} for i in range(5)},
    }
    assert {t: await rows(redis, p, t) for t in ("a", "b")} == expected
    clean = {k.replace(p, "P", 1) for k in await keys_under(redis, p)}
    total = calls[0]
    assert total > 4  # the work spans several calls
    for crash in range(1, total):
        p, m = await seeded()
        swapped = swap()
        crash_after(m, crash)
        with pytest.raises(SinkError):
            await m.apply([swapped])
        again = RedisMirror(redis, KeyLayout(p), keys_of, options, m.token)
        await again.load_checkpoint()
        await again.apply([swapped])
        assert {t: await rows(redis, p, t) for t in ("a", "b")} == expected, f"crash after call {crash}"
        assert {k.replace(p, "P", 1) for k in await keys_under(redis, p)} == clean
        assert await again.load_checkpoint() == swapped[0].end


@pytest.mark.parametrize("replayed", ["other table unselected", "new name unselected"])
async def test_table_work_cut_short_then_replayed_with_another_table_selection(
    redis: Redis, replayed: str
) -> None:
    """`RENAME TABLE a TO x, c TO d` crashes with 2 of a's 5 rows moved to x; the restart selects
    other tables, so the replayed statement has other units. The units done are recognised by
    what they are, not by their place in the list: x's first unit (clear x) is not run again over
    the rows already moved. A move cut short whose new name is no longer selected has those rows
    removed, not left behind unmirrored."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=2))
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(*(ins("a", id=i) for i in range(5)), *(ins("c", id=i) for i in range(3))), [])])
    both = [
        TableAction(ActionKind.RENAME, "db", "a", "db", "x"),
        TableAction(ActionKind.RENAME, "db", "c", "db", "d"),
    ]
    statement = txn()
    crash_after(m, 2)  # clear x, then move 2 of a's rows
    with pytest.raises(SinkError):
        await m.apply([(statement, both)])
    assert len(await redis.smembers(f"{p}:db:x:__keys")) == 2
    again = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=2), m.token)
    await again.load_checkpoint()
    if replayed == "other table unselected":  # c and d left the selection (the session start
        # drops c): only a -> x is left
        await again.apply([(statement, both[:1])])
        assert set(await rows(redis, p, "x")) == {"0", "1", "2", "3", "4"}
    else:  # x left the selection: the rename becomes a DROP of a
        await again.apply([(statement, [TableAction(ActionKind.DROP, "db", "a"), both[1]])])
        assert not [k for k in await keys_under(redis, p) if k.startswith(f"{p}:db:x")]
        assert await rows(redis, p, "a") == {}
        assert set(await rows(redis, p, "d")) == {"0", "1", "2"}
        assert not [k for k in await keys_under(redis, p) if k.startswith(f"{p}:db:c")]
    assert not [k for k in await keys_under(redis, p) if k.startswith(f"{p}:db:a")]


async def test_the_session_start_table_work_keeps_a_cut_short_statement_s_record(redis: Redis) -> None:
    """A restart's own table work (dropping a table that left the selection, at the stored
    checkpoint) runs before the cut-short statement is replayed: it must not take the statement's
    record of units done, or the replay clears x again after a's rows were moved there."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=2))
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(*(ins("a", id=i) for i in range(5)), ins("z", id=1)), [])])
    rename = (txn(), [TableAction(ActionKind.RENAME, "db", "a", "db", "x")])
    crash_after(m, 2)  # clear x, then move 2 of a's rows
    with pytest.raises(SinkError):
        await m.apply([rename])
    again = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=2), m.token)
    stored = await again.load_checkpoint()
    assert stored is not None
    await again.apply([(Transaction((), (), None, 7, stored), [TableAction(ActionKind.DROP, "db", "z")])])
    assert await rows(redis, p, "z") == {}
    await again.apply([rename])
    assert set(await rows(redis, p, "x")) == {"0", "1", "2", "3", "4"}


async def test_a_resync_start_copies_the_keys_in_bounded_calls(redis: Redis) -> None:
    """`__keys` -> `__stale` by SSCAN, `table_step` members per call, before the DDL's call; a crash
    in the middle and a restart still end with the whole copy."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=50))
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(*(ins("a", id=f"k{i}") for i in range(300))), [])])  # a hashtable set
    alter = (txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER")])
    crash_after(m, 3)
    with pytest.raises(SinkError):
        await m.apply([alter])
    assert await m.pending_resyncs() == {}  # not begun: the DDL's own call never ran
    again = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=50), m.token)
    await again.load_checkpoint()
    calls = count_sends(again)
    await again.apply([alter])
    assert calls[0] > 3
    assert await redis.smembers(f"{p}:db:a:__stale") == {f"k{i}".encode() for i in range(300)}
    assert await again.pending_resyncs() == {"db:a": "ALTER"}


async def test_a_resync_removes_stale_rows_in_bounded_calls(redis: Redis) -> None:
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=2))
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(*(ins("a", id=i, v="old") for i in range(7))), [])])
    await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER")])])
    generation = await m.resync_generation("db", "a")
    assert generation is not None
    await m.apply([(txn(ins("a", id=5, v="stream")), [])])  # touched: stays
    assert await m.resync_rows("db", "a", [{"id": 0, "v": "new"}], generation) == 1
    assert await m.resync_finish("db", "a", generation) == 5  # rows 1-4 and 6, in 3 calls
    assert await rows(redis, p, "a") == {
        "0": {b"id": b"0", b"v": b"new"},
        "5": {b"id": b"5", b"v": b"stream"},
    }
    assert await m.pending_resyncs() == {}
    rest = {f"{p}:db:a:__keys", f"{p}:db:a:0", f"{p}:db:a:5"}
    assert await keys_under(redis, p) == {f"{p}:__tables", f"{p}:__resync"} | rest


async def test_resync_keeps_rows_written_by_the_stream(redis: Redis) -> None:
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="old", gone="x"), ins("a", id=2, v="old"), ins("a", id=3)), [])])
    await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER")])])
    assert await m.pending_resyncs() == {"db:a": "ALTER"}
    # the stream writes row 2 (newer than what the resync will read) and deletes row 3
    await m.apply([(txn(upd("a", {"id": 2, "v": "old"}, {"id": 2, "v": "stream"}), dele("a", id=3)), [])])
    # the resync read rows 1 and 2 (row 2 in a stale version); row 3 was already gone
    generation = await m.resync_generation("db", "a")
    assert generation is not None
    written = await m.resync_rows("db", "a", [{"id": 1, "v": "new"}, {"id": 2, "v": "resync"}], generation)
    assert written == 1
    await m.resync_finish("db", "a", generation)
    assert await rows(redis, p, "a") == {
        "1": {b"id": b"1", b"v": b"new"},
        "2": {b"id": b"2", b"v": b"stream"},
    }
    assert await m.pending_resyncs() == {}


async def test_a_mark_fenced_by_a_statement_in_flight_is_taken_up_by_no_copy(redis: Redis) -> None:
    """The first call of a newer ALTER's table work fences the mark, and the calls after it refill
    `__stale`: a copy that reads the mark now (its task started late) must not take it up, or
    its finish would delete the rows being copied into `__stale`. Here the process dies there;
    the statement's replay marks the table again and a copy can start."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=1))
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="x"), ins("a", id=2, v="x")), [])])
    await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER 1")])])
    old = await m.resync_generation("db", "a")
    assert old is not None
    alter = (txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER 2")])
    crash_after(m, 1)
    with pytest.raises(SinkError):
        await m.apply([alter])
    assert await m.resync_generation("db", "a") is None  # fenced: no copy takes it up
    assert await m.pending_resyncs() == {"db:a": "ALTER 1"}
    assert await m.resync_finish("db", "a", old) is None  # the older copy is refused
    again = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(table_step=1), m.token)
    await again.load_checkpoint()
    assert again.marks.resyncs == {"db:a"}
    await again.apply([alter])
    now = await again.resync_generation("db", "a")
    assert now is not None and now > old and await again.pending_resyncs() == {"db:a": "ALTER 2"}
    assert await again.resync_rows("db", "a", [{"id": 1, "v": "y"}, {"id": 2, "v": "y"}], now) == 2
    assert await again.resync_finish("db", "a", now) == 0
    assert await rows(redis, p, "a") == {k: {b"id": k.encode(), b"v": b"y"} for k in ("1", "2")}


@pytest.mark.parametrize("change", ["truncate", "drop", "rename", "alter"])
async def test_resync_writes_of_an_older_generation_are_refused(redis: Redis, change: str) -> None:
    """Rows read by a resync before a TRUNCATE/DROP/RENAME/newer ALTER and written after it must
    not come back (or be orphaned): the apply moved the generation, the late write is refused."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="x"), ins("a", id=2, v="x"), ins("a", id=3, v="x")), [])])
    await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER 1")])])
    old = await m.resync_generation("db", "a")
    assert old is not None
    assert await m.resync_rows("db", "a", [{"id": 1, "v": "y"}], old) == 1  # a chunk before the change
    action = {
        "truncate": TableAction(ActionKind.TRUNCATE, "db", "a"),
        "drop": TableAction(ActionKind.DROP, "db", "a"),
        "rename": TableAction(ActionKind.RENAME, "db", "a", "db", "b"),
        "alter": TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER 2"),
    }[change]
    await m.apply([(txn(), [action])])
    # the late chunk (read before the change) and the finish of the old copy: both refused
    assert await m.resync_rows("db", "a", [{"id": 2, "v": "late"}, {"id": 9, "v": "late"}], old) is None
    assert await m.resync_finish("db", "a", old) is None
    now = await m.resync_generation("db", "a")
    untouched = {
        "1": {b"id": b"1", b"v": b"y"},
        "2": {b"id": b"2", b"v": b"x"},
        "3": {b"id": b"3", b"v": b"x"},
    }
    if change == "truncate":  # restarted: the new copy starts from an empty table
        assert now is not None and now > old
        assert await m.pending_resyncs() == {"db:a": "ALTER 1"}
        assert await rows(redis, p, "a") == {}
        assert await m.resync_rows("db", "a", [{"id": 7, "v": "new"}], now) == 1
        assert await m.resync_finish("db", "a", now) == 0
        assert await rows(redis, p, "a") == {"7": {b"id": b"7", b"v": b"new"}}
    elif change == "alter":  # restarted: every row is stale again until the new copy confirms it
        assert now is not None and now > old
        assert await m.pending_resyncs() == {"db:a": "ALTER 2"}
        assert await rows(redis, p, "a") == untouched
        assert await redis.scard(f"{p}:db:a:__stale") == 3
    else:  # ended for `a`; a rename carries the copy over to `b` under a new generation
        assert now is None
        assert await rows(redis, p, "a") == {}
        assert [k async for k in redis.scan_iter(match=f"{p}:db:a:*")] == []
        if change == "rename":
            moved = await m.resync_generation("db", "b")
            assert moved is not None and moved > old
            assert await m.pending_resyncs() == {"db:b": "ALTER 1"}
            assert await rows(redis, p, "b") == untouched
            assert await redis.smembers(f"{p}:db:b:__stale") == {b"1", b"2", b"3"}  # all re-read
        else:
            assert await m.pending_resyncs() == {}
    assert await redis.exists(f"{p}:db:a:9") == 0


async def test_json_mode(redis: Redis) -> None:
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(json_mode=True))
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="x", n=None, b=b"\x00")), [])])
    assert await redis.get(f"{p}:db:a:1") == b'{"id":1,"v":"x","n":null,"b":"AA=="}'


async def test_json_mode_runs_of_inserts_replace_whatever_the_keys_held(redis: Redis) -> None:
    """A json-mode transaction's INSERTs go in runs (op WJN: one MSET per 500 rows): more than 500
    rows in one run, runs of two tables taking turns, a key that held a hash (another type) and a
    document replaced whole; every row in `__keys`, and in `__touched` for a table being resynced."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(json_mode=True))
    await m.acquire_lease()
    await m.load_checkpoint()
    await redis.hset(f"{p}:db:a:1", mapping={"id": "1", "v": "old"})
    await redis.set(f"{p}:db:a:2", b'{"id":2,"gone":1}')
    await redis.hset(f"{p}:__resync", "db:b", "1 test")  # as a resync's start leaves it
    m.marks.resync_in_flight("db:b")
    changes = [ins("a", id=i, v=f"x{i}", n=None) for i in range(1, 1202)]
    changes += [ins("b", id=1, v="b1"), ins("a", id=5000, v="y"), ins("b", id=2, v="b2")]
    await m.apply([(txn(*changes), [])])
    for i in (1, 2, 501, 1000, 1201):
        assert await redis.get(f"{p}:db:a:{i}") == b'{"id":%d,"v":"x%d","n":null}' % (i, i)
    assert await redis.get(f"{p}:db:a:5000") == b'{"id":5000,"v":"y"}'
    assert await redis.get(f"{p}:db:b:2") == b'{"id":2,"v":"b2"}'
    assert await redis.scard(f"{p}:db:a:__keys") == 1202
    assert await redis.smembers(f"{p}:db:b:__keys") == {b"1", b"2"}
    assert await redis.smembers(f"{p}:db:b:__touched") == {b"1", b"2"}
    assert not await redis.exists(f"{p}:db:a:__touched")


async def test_json_mode_documents_are_canonical_and_partial_merges_keep_values_exact(redis: Redis) -> None:
    """json mode stores canonical JSON (service.binlog.canonical); a partial update (MINIMAL image)
    is merged in Lua without decoding values, so big integers, exact floats, [] and strings with
    JSON punctuation survive the merge byte for byte."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(json_mode=True, changelog_maxlen=100))
    await m.acquire_lease()
    await m.load_checkpoint()
    row = {
        "id": 1,
        "big": 18446744073709551615,
        "f": 0.1000000000000001,
        "d": Decimal("12.50"),
        "ts": dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
        "at": dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
        "t": dt.timedelta(hours=-1, minutes=-2),
        "j": {"a": [], "b": {"c": 'x,}"y'}},
        "s": 'q,"}{[',
        "n": None,
        "b": b"\x00\xff",
    }
    await m.apply([(txn(ins("a", **row)), [])])
    canonical = row_to_json(row)
    assert orjson.loads(await redis.get(f"{p}:db:a:1")) == canonical
    assert canonical["d"] == "12.50" and canonical["ts"] == "2024-05-06T07:08:09Z"
    patch = {"f": 2.5e-300, "j": [1, {"k": "]"}], "n": 18446744073709551614, "s": None}
    partial = Transaction(
        changes=(upd("a", {"id": 1}, patch),), ddl=(), gtid=None, ts=7, end=txn().end, partial=frozenset({0})
    )
    await m.apply([(partial, [])])
    raw = await redis.get(f"{p}:db:a:1")
    assert orjson.loads(raw) == {**canonical, **row_to_json(patch)}
    assert b'"big":18446744073709551615' in raw and b'"n":18446744073709551614' in raw
    # the change log carries the same canonical form as the websocket
    entries = await redis.xrange(f"{p}:__changes")
    assert orjson.loads(entries[0][1][b"after"]) == canonical
    assert orjson.loads(entries[1][1][b"after"]) == row_to_json(patch)
    assert orjson.loads(entries[1][1][b"before"]) == {"id": 1}


async def test_the_same_key_written_several_times_in_one_transaction(redis: Redis) -> None:
    """Row ops of one call share one SADD/SREM per set: the order of adds and removes of the same
    member still decides, and each write still replaces the whole row."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=9, v="keep")), [])])
    t = txn(
        ins("a", id=1, v="x", n=1),
        upd("a", {"id": 1, "v": "x", "n": 1}, {"id": 1, "v": "y", "n": None}),  # n: NULL -> gone
        ins("a", id=2, v="x"),
        dele("a", id=2, v="x"),  # inserted and deleted: not in __keys
        dele("a", id=9, v="keep"),
        ins("a", id=9, v="back"),  # deleted and inserted again: in __keys
        ins("a", id=3, v="x"),
        upd("a", {"id": 3, "v": "x"}, {"id": 4, "v": "x"}),  # key changes 3 -> 4 -> 3
        upd("a", {"id": 4, "v": "x"}, {"id": 3, "v": "z"}),
    )
    await m.apply([(t, [])])
    assert await rows(redis, p, "a") == {
        "1": {b"id": b"1", b"v": b"y"},
        "9": {b"id": b"9", b"v": b"back"},
        "3": {b"id": b"3", b"v": b"z"},
    }
    assert await redis.exists(f"{p}:db:a:2", f"{p}:db:a:4") == 0
    # a replay of the same full images on a fresh chain ends the same (idempotent)
    m.reset_chain(str(t.end.position))
    again = replace(t, end=txn().end)
    await m.apply([(again, [])])
    assert len(await rows(redis, p, "a")) == 3


async def test_rows_written_during_a_resync_are_touched(redis: Redis) -> None:
    """Every row op records the row in `__touched` while the table's resync is in flight, also when
    the resync starts or ends in the same call as the rows, and only then."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=3))
    await m.acquire_lease()
    await m.load_checkpoint()
    touched = f"{p}:db:a:__touched"
    await m.apply([(txn(ins("a", id=1), ins("a", id=2), ins("b", id=1)), [])])
    assert await redis.exists(touched) == 0
    resync = TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER")
    # the mark and the rows in one call (a transaction of 5 changes in chunks of 3)
    big = txn(ins("a", id=3), ins("b", id=2), dele("a", id=1), upd("a", {"id": 2}, {"id": 5}), ins("a", id=6))
    await m.apply([(big, [resync])])
    assert await redis.smembers(touched) == {b"3", b"1", b"2", b"5", b"6"}
    assert await redis.exists(f"{p}:db:b:__touched") == 0  # b is not in resync
    # a resync chunk read before those writes cannot overwrite them
    generation = await m.resync_generation("db", "a")
    assert generation is not None
    stale_rows = [{"id": 3, "v": "old"}, {"id": 5, "v": "old"}, {"id": 7, "v": "new"}]
    assert await m.resync_rows("db", "a", stale_rows, generation) == 1
    assert await m.resync_finish("db", "a", generation) == 0
    assert await rows(redis, p, "a") == {
        "3": {b"id": b"3"},
        "5": {b"id": b"5"},
        "6": {b"id": b"6"},
        "7": {b"id": b"7", b"v": b"new"},
    }
    # a DROP ends the resync; rows of a table re-created in the same transaction are not touched
    await m.apply([(txn(), [resync])])
    drop = TableAction(ActionKind.DROP, "db", "a")
    await m.apply([(txn(ins("a", id=8)), [drop])])
    assert await redis.exists(touched) == 0
    assert await rows(redis, p, "a") == {"8": {b"id": b"8"}}


async def test_partial_images_with_batched_row_ops(redis: Redis) -> None:
    """MINIMAL images: merge (NULL -> field removed), move on a key change (other fields kept),
    and the index, touched and partial sets follow, in hash and json mode."""
    for json_mode in (False, True):
        p = _prefix()
        m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(json_mode=json_mode))
        await m.acquire_lease()
        await m.load_checkpoint()
        await m.apply([(txn(ins("a", id=1, v="x", n=1, w="keep")), [])])
        await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER")])])
        changes = (upd("a", {"id": 1}, {"n": None}), upd("a", {"id": 1}, {"id": 2, "v": "y"}))
        partial = Transaction(
            changes=changes, ddl=(), gtid=None, ts=7, end=txn().end, partial=frozenset({0, 1})
        )
        await m.apply([(partial, [])])
        assert await redis.smembers(f"{p}:db:a:__keys") == {b"2"}
        # the moved key counts as written; rows a partial image changed wait to be read again
        assert await redis.smembers(f"{p}:db:a:__touched") == {b"1"}
        assert await redis.hgetall(f"{p}:db:a:__partial") == {b"1": b"1", b"2": b"1"}
        assert await redis.exists(f"{p}:db:a:1") == 0
        if json_mode:
            assert orjson.loads(await redis.get(f"{p}:db:a:2")) == {"id": 2, "v": "y", "n": None, "w": "keep"}
        else:
            assert await redis.hgetall(f"{p}:db:a:2") == {b"id": b"2", b"v": b"y", b"w": b"keep"}


async def test_a_transaction_of_exactly_chunk_size_changes_is_one_call(redis: Redis) -> None:
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=3))
    await m.acquire_lease()
    await m.load_checkpoint()
    calls = count_sends(m)
    await m.apply([(txn(ins("a", id=1), ins("a", id=2), ins("a", id=3)), [])])
    assert calls == [1]
    assert set(await rows(redis, p, "a")) == {"1", "2", "3"}
    assert await redis.exists(f"{p}:__progress") == 0


async def test_wide_rows_and_many_shapes(redis: Redis) -> None:
    """Rows wider than one unpack() slice, and rows of one call with different NULL columns."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=2))
    await m.acquire_lease()
    await m.load_checkpoint()
    wide = {"id": 1, **{f"c{i}": str(i) for i in range(1200)}}
    shapes = [ins("a", id=2 + i, x=None if i % 2 else "x", y=None if i % 3 else "y") for i in range(5)]
    await m.apply([(txn(ins("a", **wide), *shapes), [])])
    got = await rows(redis, p, "a")
    assert got["1"] == {k.encode(): str(v).encode() for k, v in wide.items()}
    assert got["2"] == {b"id": b"2", b"x": b"x", b"y": b"y"}
    assert got["3"] == {b"id": b"3"}
    assert got["4"] == {b"id": b"4", b"x": b"x"}
    assert got["5"] == {b"id": b"5", b"y": b"y"}


async def test_small_transactions_share_calls_of_up_to_chunk_size_changes(redis: Redis) -> None:
    """Five 1-change and one 2-change transactions with chunk_size=3: calls of 3, 3 and 1 changes,
    each all-or-nothing. A crash before the second call leaves exactly the first call's
    transactions applied, and the checkpoint at the last of them."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=3, changelog_maxlen=100))
    await m.acquire_lease()
    await m.load_checkpoint()
    txns = [txn(ins("a", id=i)) for i in range(3)] + [
        txn(ins("a", id=3), ins("a", id=4)),
        txn(ins("a", id=5)),
    ]
    txns.insert(1, txn(ins("a", id=9)))
    crash_after(m, 1)
    with pytest.raises(SinkError, match="applying 2 transactions up to"):
        await m.apply([(t, []) for t in txns])
    assert set(await rows(redis, p, "a")) == {"0", "9", "1"}
    assert await m.load_checkpoint() == txns[2].end
    m2 = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(chunk_size=3, changelog_maxlen=100), m.token)
    await m2.load_checkpoint()
    sends = count_sends(m2)
    assert await m2.apply([(t, []) for t in txns[3:]]) == [4, 5, 7]
    assert sends == [2]  # 1 + 2 changes, then 1
    assert set(await rows(redis, p, "a")) == {"0", "9", "1", "2", "3", "4", "5"}
    assert [e[1][b"seq"] for e in await redis.xrange(f"{p}:__changes")] == [
        str(i).encode() for i in range(1, 8)
    ]
    assert await m2.load_checkpoint() == txns[-1].end


async def test_a_failed_batch_applies_nothing_of_the_batches_sent_behind_it(redis: Redis) -> None:
    """Batches are written before the replies of earlier ones are read: when one fails (here a
    stale chain), every call sent after it fails its own chain check, so Redis holds a prefix."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1)), [])])
    m.reset_chain("")  # a confused writer: it thinks nothing was applied yet
    first = await m.send([(txn(ins("a", id=2)), [])])
    second = await m.send([(txn(ins("a", id=3)), []), (txn(*(ins("b", id=i) for i in range(3))), [])])
    with pytest.raises(SinkError, match="CHECKPOINT_MOVED"):
        await first.replies()
    with pytest.raises(SinkError, match="closed before the reply"):
        await second.replies()
    assert set(await rows(redis, p, "a")) == {"1"}
    assert await rows(redis, p, "b") == {}
    # the next session resumes from the stored checkpoint on a new connection
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=4)), [])])
    assert set(await rows(redis, p, "a")) == {"1", "4"}


async def test_update_writes_only_changed_values_of_the_stored_row(redis: Redis) -> None:
    """A FULL-image UPDATE of a stored row writes only the values that changed (here `w` was
    altered in Redis behind the mirror's back and stays so: it was not written) and deletes the
    columns that became NULL. While the table is being resynced, the whole after image replaces
    the row (the stored one may lack a new column)."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="x", w="same", n=5)), [])])
    await redis.hset(f"{p}:db:a:1", "w", "tampered")
    kept = "same"
    before = {"id": 1, "v": "x", "w": kept, "n": 5}
    await m.apply([(txn(upd("a", before, {"id": 1, "v": "y", "w": kept, "n": None})), [])])
    assert await redis.hgetall(f"{p}:db:a:1") == {b"id": b"1", b"v": b"y", b"w": b"tampered"}
    # in resync: replaced (its unchanged values unpacked by the script), and kept from the resync
    await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER")])])
    same = {"w": kept, "u": "ü:1:", "raw": b"\x00:\xff", "d": Decimal("1.50"), "c": "new column"}
    await m.apply([(txn(upd("a", {"id": 1, "v": "y", **same}, {"id": 1, "v": "z", **same})), [])])
    stored = {b"id": b"1", b"v": b"z", b"w": b"same", b"u": "ü:1:".encode(), b"raw": b"\x00:\xff"}
    assert await redis.hgetall(f"{p}:db:a:1") == {**stored, b"d": b"1.50", b"c": b"new column"}
    assert await redis.smembers(f"{p}:db:a:__touched") == {b"1"}
    generation = await m.resync_generation("db", "a")
    assert generation is not None and await m.resync_finish("db", "a", generation) == 0
    assert m.marks.resyncs == set()  # the resync is over: changed values only again


async def test_rows_partial_images_change_during_a_resync_are_read_again_at_its_end(redis: Redis) -> None:
    """A partial image merges only some columns: the row keeps the others in the shape before the
    DDL, and the copy skips it (the stream's change is newer). At the end the resync reads such
    rows again and writes them whole, unless a merge came after the list was read (that row waits
    for the next round); a row the source no longer has is left to its DELETE."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(*(ins("a", id=i, v="x", gone="old") for i in (1, 2, 3))), [])])
    await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="DROP COLUMN gone, ADD new")])])

    def merge(*ids: int) -> tuple[Transaction, list[TableAction]]:
        changes = tuple(upd("a", {"id": i}, {"v": "y"}) for i in ids)
        return Transaction(changes, (), None, 7, txn().end, frozenset(range(len(ids)))), []

    await m.apply([merge(1, 2)])
    generation = await m.resync_generation("db", "a")
    assert generation is not None
    copied = [{"id": i, "v": "x", "new": 1} for i in (1, 2, 3)]  # read before the merges
    assert await m.resync_rows("db", "a", copied, generation) == 1  # rows 1 and 2: newer in Redis
    rounds: list[list[tuple[str, str]]] = []

    async def reread(entries: list[tuple[str, str]]) -> bool:
        rounds.append(sorted(entries))
        if len(rounds) == 1:
            await m.apply([merge(1)])  # row 1 changes again between the list and the write
        again = [{"id": int(s), "v": "y", "new": 1} for s, _ in entries if s == "1"]  # 2 was deleted
        return await m.resync_reread("db", "a", generation, entries, again) is not None

    assert await m.resync_finish("db", "a", generation, reread=reread) == 0
    assert rounds == [[("1", "1"), ("2", "1")], [("1", "2")]]
    assert await rows(redis, p, "a") == {
        "1": {b"id": b"1", b"v": b"y", b"new": b"1"},
        "2": {b"id": b"2", b"v": b"y", b"gone": b"old"},  # gone from the source: its DELETE follows
        "3": {b"id": b"3", b"v": b"x", b"new": b"1"},
    }
    assert await m.pending_resyncs() == {} and await redis.exists(f"{p}:db:a:__partial") == 0


async def test_updates_older_than_a_finished_resync_s_copy_carry_whole_rows(redis: Redis) -> None:
    """A resync reads the source as it is now, ahead of the stream: a row deleted later on the
    source is removed at the resync's end, and then an older UPDATE of it arrives. Until the
    stream passes the position the copy read at, updates carry whole rows (the row is back for
    a moment, as it was then, until its DELETE comes); the window survives a restart and ends
    in the call of the first transaction past it."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="x"), ins("a", id=2, v="x")), [])])
    await m.apply([(txn(), [TableAction(ActionKind.RESYNC, "db", "a", reason="ALTER")])])
    older = txn(upd("a", {"id": 2, "v": "x"}, {"id": 2, "v": "y"}))
    deleted = txn(dele("a", id=2, v="y"))
    copied_at = deleted.end.position  # the source's end of binlog after the copy's last read
    generation = await m.resync_generation("db", "a")
    assert generation is not None
    assert await m.resync_rows("db", "a", [{"id": 1, "v": "x"}], generation) == 1  # 2 is gone

    async def source_end() -> BinlogPosition:
        return copied_at

    assert await m.resync_finish("db", "a", generation, source_end) == 1
    assert await redis.hget(f"{p}:__settle", "db:a") == str(copied_at).encode()
    await m.load_checkpoint()  # a restart in the window
    assert m.marks.settling == {"db:a": copied_at} and m.marks.resyncs == set()
    await m.apply([(older, [])])  # no RowsMissing: the whole row
    assert await redis.hgetall(f"{p}:db:a:2") == {b"id": b"2", b"v": b"y"}
    await m.apply([(deleted, [])])
    assert await rows(redis, p, "a") == {"1": {b"id": b"1", b"v": b"x"}}
    await redis.hset(f"{p}:db:a:1", "w", "left alone")  # changed values only again: `w` stays
    await m.apply([(txn(upd("a", {"id": 1, "v": "x"}, {"id": 1, "v": "z"})), [])])
    assert await redis.hgetall(f"{p}:db:a:1") == {b"id": b"1", b"v": b"z", b"w": b"left alone"}
    assert await redis.exists(f"{p}:__settle") == 0 and m.marks.settling == {}


async def test_an_update_of_a_row_the_mirror_lacks_writes_nothing_then_the_whole_row(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """An update sends its changed values only, and its call (op Q) first checks that Redis holds
    the row: when it does not (the mirror has a gap: keys removed behind its back), the call
    writes nothing at all (RowsMissing, retried from the checkpoint), and from then on the
    table's updates carry whole rows, which fill the gap in. A resync in flight that the mirror
    did not know of (another instance started it) is refused the same way."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="x"), ins("a", id=2, v="x")), [])])
    await redis.delete(f"{p}:db:a:2")
    seq = await redis.get(f"{p}:__seq")
    both = txn(
        upd("a", {"id": 1, "v": "x"}, {"id": 1, "v": "y"}), upd("a", {"id": 2, "v": "x"}, {"id": 2, "v": "y"})
    )
    with pytest.raises(RowsMissing, match=f"no row at {p}:db:a:2: nothing was written") as err:
        await m.apply([(both, [])])
    assert (err.value.table_id, err.value.retriable) == ("db:a", True)
    assert "lacked a row that an UPDATE changed" in caplog.text
    assert await redis.hgetall(f"{p}:db:a:1") == {b"id": b"1", b"v": b"x"}
    assert await redis.get(f"{p}:__seq") == seq
    await m.load_checkpoint()  # the next session
    await m.apply([(both, [])])
    assert await redis.hgetall(f"{p}:db:a:2") == {b"id": b"2", b"v": b"y"}
    assert await redis.hget(f"{p}:db:a:1", "v") == b"y"
    # a resync mark this mirror did not plan (as one left by another instance); a table id the
    # error reply carries whole, spaces and all
    await redis.hset(f"{p}:__resync", "db:b é x", "1 ALTER")
    await m.apply([(txn(ins("b é x", id=1, v="x")), [])])  # whole rows: no check
    with pytest.raises(RowsMissing, match="table db:b é x is being resynced") as err:
        await m.apply([(txn(upd("b é x", {"id": 1, "v": "x"}, {"id": 1, "v": "y"})), [])])
    assert err.value.resync and m.marks.resyncs == {"db:b é x"}
    assert await redis.hget(f"{p}:db:b é x:1", "v") == b"x"


async def test_a_full_image_replaces_whatever_the_key_held(redis: Redis) -> None:
    """A written row is exactly its image: fields the key held beyond it go (the key was written
    by one HSET first, and cleared only when that HSET found other fields), and a key of another
    type (a json-mode document left from an earlier run) becomes the row's hash."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await redis.hset(f"{p}:db:a:1", mapping={"id": "1", "v": "old", "gone": "x"})
    await redis.hset(f"{p}:db:a:2", mapping={"id": "2", "v": "old"})
    await redis.set(f"{p}:db:a:3", b'{"id":3}')
    await m.apply([(txn(ins("a", id=1, v="new"), ins("a", id=2, v="new"), ins("a", id=3, v="new")), [])])
    for i in (1, 2, 3):
        assert await redis.hgetall(f"{p}:db:a:{i}") == {b"id": str(i).encode(), b"v": b"new"}
    assert await redis.smembers(f"{p}:db:a:__keys") == {b"1", b"2", b"3"}


async def test_a_prefix_keeps_its_value_mode(redis: Redis) -> None:
    """The checkpoint records the value mode; a mirror set to the other one refuses to start on
    that prefix (its script would meet keys of the other type) and says how to go on."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await m.apply([(txn(ins("a", id=1, v="x")), [])])
    assert await redis.hget(f"{p}:__checkpoint", "values") == b"hash"
    json_mirror = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions(json_mode=True), token=m.token)
    with pytest.raises(ConfigError, match="written with value_mode=hash, and value_mode=json is set"):
        await json_mirror.load_checkpoint()
    assert (await m.load_checkpoint()) is not None


async def test_a_redis_that_may_evict_keys_is_refused(redis: Redis) -> None:
    """allkeys-* eviction under a maxmemory limit could drop rows or the checkpoint unseen."""
    m = RedisMirror(redis, KeyLayout(_prefix()), keys_of)
    await redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert await m.load_checkpoint() is None  # no limit: nothing is ever evicted
        await redis.config_set("maxmemory", "8gb")
        with pytest.raises(ConfigError, match="maxmemory-policy allkeys-lru .* noeviction"):
            await m.load_checkpoint()
        await redis.config_set("maxmemory-policy", "volatile-lru")  # evicts keys with a TTL only
        assert await m.load_checkpoint() is None
    finally:
        await redis.config_set("maxmemory", "0")
        await redis.config_set("maxmemory-policy", "noeviction")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_redis_cluster_node_is_refused(tmp_path: Path) -> None:
    """A real cluster-enabled redis-server (one node, no slots yet: INFO says cluster_enabled).
    Its bus port is set: the default, port + 10,000, does not exist for ports above 55,535."""
    port = _free_port()
    log = tmp_path / "redis.log"
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
         "--cluster-enabled", "yes", "--cluster-port", str(_free_port()),
         "--cluster-config-file", str(tmp_path / "nodes.conf"), "--logfile", str(log)],
    )  # fmt: skip
    client = Redis(port=port, retry=None)  # fail fast while it starts
    try:
        for _ in range(200):
            assert server.poll() is None, f"redis-server exited: {log.read_text()}"
            with contextlib.suppress(rexc.ConnectionError):
                if await client.ping():
                    break
            await asyncio.sleep(0.05)
        with pytest.raises(
            ConfigError, match=r"a Redis Cluster node: give it as a cluster, redis\+cluster://"
        ):
            await RedisMirror(client, KeyLayout(_prefix()), keys_of).load_checkpoint()
    finally:
        await client.aclose()
        server.terminate()
        server.wait(10)


async def test_a_redis_without_aof_is_warned_about_once(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    m = RedisMirror(redis, KeyLayout(_prefix()), keys_of)
    await redis.config_set("appendonly", "no")
    try:
        await m.load_checkpoint()
        await m.load_checkpoint()  # a later session: said already
    finally:
        await redis.config_set("appendonly", "yes")
        # Redis refuses to exit while it writes that initial AOF ("can't exit"): let it finish
        while True:
            aof = await redis.info("persistence")
            if not aof["aof_rewrite_in_progress"] and not aof["aof_rewrite_scheduled"]:
                break
            await asyncio.sleep(0.02)
    assert [r.message for r in caplog.records if "append-only" in r.message] == [
        "this Redis keeps no append-only file (appendonly no): after a Redis restart the mirror resumes "
        "from the checkpoint of its last RDB snapshot, if any (the binlog must still hold that "
        "position), else as on_no_checkpoint says"
    ]


async def test_a_full_redis_writes_nothing_of_a_call_and_says_so(redis: Redis) -> None:
    """With maxmemory reached (noeviction), Redis refuses the call's first write: the fence and
    chain checks only read, so nothing of the transaction or its checkpoint is written."""
    p = _prefix()
    m = RedisMirror(redis, KeyLayout(p), keys_of)
    await m.acquire_lease()
    await m.load_checkpoint()
    await redis.config_set("maxmemory", "1")
    try:
        with pytest.raises(SinkError, match="Redis is full \\(maxmemory\\), nothing was written: OOM"):
            await m.apply([(txn(ins("a", id=1, v="x")), [])])
    finally:
        await redis.config_set("maxmemory", "0")
    assert await redis.exists(f"{p}:db:a:1", f"{p}:__checkpoint", f"{p}:__seq") == 0
    await m.load_checkpoint()  # a new session, as after any SinkError
    await m.apply([(txn(ins("a", id=1, v="x")), [])])
    assert await redis.hgetall(f"{p}:db:a:1") == {b"id": b"1", b"v": b"x"}
