"""Insert-only apply calls in their plain form (service/sink/plain.py) against a real Redis: the same
keys as the apply script, and the same guarantees when a check refuses them or a watched key
changes between their WATCH and their EXEC."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
import redis as redis_sync
from redis.asyncio import Redis

from service.errors import LeaseLost
from service.sink.bulk import write_rows
from service.sink.client import redis_client
from service.sink.keys import KeyLayout
from service.sink.mirror import MirrorOptions, RedisMirror
from tests.integration.test_mirror_sink import _prefix, dele, ins, keys_of, txn

pytestmark = pytest.mark.redis

EXEC = b"*1\r\n$4\r\nEXEC\r\n"


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = redis_client(redis_url)  # the service's client: hiredis replies, as in production
    yield client
    await client.aclose()


async def _mirror(redis: Redis, prefix: str, plain: bool = True, **options: Any) -> RedisMirror:
    m = RedisMirror(redis, KeyLayout(prefix), keys_of, MirrorOptions(plain_inserts=plain, **options))
    assert await m.acquire_lease()
    await m.load_checkpoint()
    return m


async def _dump(redis: Redis, prefix: str) -> dict[str, Any]:
    """Every key under `prefix` (less the lease, and the counters that only plain calls keep) by
    type and value, the prefix cut off."""
    skip = {f"{prefix}:{name}".encode() for name in ("__lease", "__fence", "__guard")}
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=1000) if k not in skip]
    # pipelined: thousands of keys in two round trips, not two per key
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.type(key)
        kinds = [kind.decode() for kind in await pipe.execute()]
        for key, kind in zip(keys, kinds, strict=True):
            if kind == "hash":
                pipe.hgetall(key)
            elif kind == "set":
                pipe.smembers(key)
            else:
                pipe.get(key)
        values = await pipe.execute()
    return {
        key.decode()[len(prefix) + 1 :]: (kind, value)
        for key, kind, value in zip(keys, kinds, values, strict=True)
    }


def _batches() -> list[list[Any]]:
    """Insert-only transactions: NULLs (not stored), a row over a stale hash and over a string,
    the same row twice in one call, a table without a key (skipped), several tables."""
    return [
        [(txn(ins("a", id=1, v="x", n=None), ins("a", id=2, v="y", n=3)), [])],
        [(txn(ins("a", id=3, v="z", n=1)), []), (txn(ins("b", id=1, w="q"), ins("nokey", v=1)), [])],
        [(txn(ins("a", id=7, v="new")), []), (txn(ins("a", id=8, v="over a string")), [])],
        [(txn(ins("a", id=9, v="first")), []), (txn(ins("a", id=9, v="second", n=2)), [])],
        [(txn(*(ins("c", id=i, v=str(i) * 3) for i in range(2500))), [])],  # chunked: the script
    ]


async def test_plain_calls_write_what_the_script_writes(redis: Redis) -> None:
    dumps, firsts, batches = [], [], _batches()
    for plain in (True, False):
        p = _prefix()
        await redis.hset(f"{p}:db:a:7", mapping={"id": "7", "stale": "field"})
        await redis.set(f"{p}:db:a:8", "a string")
        m = await _mirror(redis, p, plain)
        seqs = [await m.apply(batch) for batch in batches]
        firsts.append(seqs)
        dumps.append(await _dump(redis, p))
        assert (m.chain.channel.plain_calls > 0) == plain
        assert m.chain.channel.plain_redone == 0
    assert dumps[0] == dumps[1]
    assert firsts[0] == firsts[1]
    assert dumps[0]["db:a:9"] == ("hash", {b"id": b"9", b"v": b"second", b"n": b"2"})
    assert dumps[0]["db:a:7"] == ("hash", {b"id": b"7", b"v": b"new"})


async def test_a_refused_call_and_the_calls_after_it_apply_as_scripts(redis: Redis) -> None:
    """A resync mark the planner does not know of: the guard refuses the first call, the four
    written after it fail their chain check; all five are sent again as the script, which notes
    the rows in `__touched`, and apply once, in order."""
    p = _prefix()
    m = await _mirror(redis, p, chunk_size=2)
    await redis.hset(f"{p}:__resync", "db:a", "1 a test")
    batch = [(txn(ins("a", id=2 * i, v="x"), ins("a", id=2 * i + 1, v="y")), []) for i in range(5)]
    assert await m.apply(batch) == [1, 3, 5, 7, 9]
    assert m.plain_counts == (5, 5)
    assert await redis.scard(f"{p}:db:a:__keys") == 10
    assert await redis.scard(f"{p}:db:a:__touched") == 10
    assert await m.load_checkpoint() == batch[-1][0].end
    # the planner knows of the mark now: such calls go as the script from the start
    m.marks.resync_in_flight("db:a")
    await m.apply([(txn(ins("a", id=20, v="z")), [])])
    assert m.chain.channel.plain_calls == 5 and await redis.sismember(f"{p}:db:a:__touched", "20")


def _between_watch_and_exec(m: RedisMirror, meanwhile: Callable[[], Awaitable[None]]) -> None:
    """Makes the next plain call of `m` stop before its EXEC, run `meanwhile`, then send the EXEC:
    Redis has run its WATCH, its guard and MULTI, and queued its writes."""
    channel = m.chain.channel
    real = channel._write
    held = [True]

    async def write(conn: Any, packed: bytes) -> None:
        if held[0] and packed.endswith(EXEC) and b"MULTI" in packed:
            held[0] = False
            await real(conn, packed[: -len(EXEC)])
            await asyncio.sleep(0.1)
            await meanwhile()
            packed = EXEC
        await real(conn, packed)

    channel._write = write  # type: ignore[method-assign]


async def test_a_takeover_between_watch_and_exec_writes_nothing(redis: Redis) -> None:
    """The lease expires after the guard checked it and another instance takes it: taking it
    counts in `__fence`, a watched key, so the EXEC writes nothing; sent again as the script, the
    call is refused (LEASE_LOST)."""
    p = _prefix()
    a = await _mirror(redis, p)
    b = RedisMirror(redis, KeyLayout(p), keys_of, MirrorOptions())

    async def takeover() -> None:
        await redis.delete(f"{p}:__lease")  # as if it expired
        assert await b.acquire_lease()

    _between_watch_and_exec(a, takeover)
    with pytest.raises(LeaseLost):
        await a.apply([(txn(ins("a", id=1, v="x")), [])])
    assert await redis.exists(f"{p}:db:a:1", f"{p}:db:a:__keys", f"{p}:__checkpoint") == 0
    assert a.chain.channel.plain_calls == 1 and a.chain.channel.plain_redone == 1


async def test_a_resync_mark_between_watch_and_exec_is_honoured(redis: Redis) -> None:
    """A resync begins (another writer's call, or an operator's) after the guard read the marks:
    the EXEC writes nothing; the script then notes the row in the table's `__touched`."""
    p = _prefix()
    m = await _mirror(redis, p)

    async def mark() -> None:
        await redis.hset(f"{p}:__resync", "db:a", "1 a test")

    _between_watch_and_exec(m, mark)
    assert await m.apply([(txn(ins("a", id=1, v="x")), [])]) == [1]
    assert await redis.smembers(f"{p}:db:a:__touched") == {b"1"}
    assert await redis.hgetall(f"{p}:db:a:1") == {b"id": b"1", b"v": b"x"}
    assert m.chain.channel.plain_redone == 1


async def test_a_call_with_other_ops_goes_as_the_script(redis: Redis) -> None:
    p = _prefix()
    m = await _mirror(redis, p)
    await m.apply([(txn(ins("a", id=1, v="x"), dele("a", id=1, v="x")), [])])
    assert m.chain.channel.plain_calls == 0
    assert await redis.exists(f"{p}:db:a:1") == 0


@pytest.mark.parametrize("json_mode", [False, True], ids=["hash", "json"])
async def test_the_bulk_copy_writes_rows_as_the_apply_does(
    redis: Redis, redis_url: str, json_mode: bool
) -> None:
    """service/sink/bulk.py (the snapshot's Lua-free writes) and the apply store the same row
    keys, values and `__keys` (one "write a whole row" in Python: values.row_fields)."""
    rows: list[dict[str, Any]] = [
        {"id": 1, "v": "x", "n": None},
        {"id": 2, "v": b"\x00\xff", "n": 3},
        {"id": 3, "v": "é:", "n": Decimal("1.50"), "t": dt.datetime(2024, 1, 2, 3, 4, 5)},
    ]
    applied, copied = _prefix(), _prefix()
    m = await _mirror(redis, applied, json_mode=json_mode)
    await m.apply([(txn(*(ins("a", **r) for r in rows)), [])])
    client = redis_sync.Redis.from_url(redis_url)
    write_rows(client, KeyLayout(copied), "db", "a", ["id"], rows, json_mode=json_mode)
    client.close()
    ours, theirs = await _dump(redis, applied), await _dump(redis, copied)
    assert {k: v for k, v in ours.items() if k.startswith("db:a:")} == theirs
    assert len(theirs) == 4
