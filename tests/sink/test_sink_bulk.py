"""The bulk writer (load, snapshot) on a real redis-server: the keyspace the reference executor
makes of the same whole-row writes, and an error reply that raises without leaving the
connection out of step."""

from __future__ import annotations

import datetime as dt
import secrets
from decimal import Decimal

import orjson
import pytest
import redis as redis_sync

from service.sink.bulk import write_rows
from service.sink.keys import KeyLayout

pytestmark = pytest.mark.redis

ROWS = [
    {"id": i, "name": f"n{i}:é", "price": Decimal("1.50"), "at": dt.datetime(2024, 1, 2, 3, 4, i % 60),
     "raw": bytes([i % 256, 0]), "none": None, "f": 0.1 * i}
    for i in range(2500)
]  # fmt: skip


@pytest.mark.parametrize("json_mode", [False, True], ids=["hash", "json"])
def test_bulk_rows_are_written_whole_and_indexed(redis_url: str, json_mode: bool) -> None:
    layout = KeyLayout("bulk" + secrets.token_hex(4))
    with redis_sync.Redis.from_url(redis_url) as r:
        r.hset(f"{layout.table_base('db', 't')}:7", "stale", "x")  # a whole row replaces it
        write_rows(r, layout, "db", "t", ["id"], ROWS, json_mode=json_mode)
        base = layout.table_base("db", "t")
        assert r.scard(layout.index_key("db", "t")) == len(ROWS)
        if json_mode:  # the service's json layout: the canonical document, NULL as null
            assert orjson.loads(r.get(f"{base}:7") or b"") == {
                "id": 7, "name": "n7:é", "price": "1.50", "at": "2024-01-02 03:04:07", "raw": "BwA=",
                "none": None, "f": 0.7000000000000001,
            }  # fmt: skip
        else:
            assert r.hgetall(f"{base}:7") == {
                b"id": b"7", b"name": "n7:é".encode(), b"price": b"1.50", b"at": b"2024-01-02 03:04:07",
                b"raw": b"\x07\x00", b"f": b"0.7000000000000001",
            }  # fmt: skip


def test_an_error_reply_raises_and_the_connection_stays_in_step(redis_url: str) -> None:
    layout = KeyLayout("bulk" + secrets.token_hex(4))
    with redis_sync.Redis.from_url(redis_url) as r:
        r.set(layout.index_key("db", "t"), "not a set")
        with pytest.raises(redis_sync.ResponseError, match="WRONGTYPE"):
            write_rows(r, layout, "db", "t", ["id"], ROWS[:10], json_mode=False)
        assert r.ping() and r.get(layout.index_key("db", "t")) == b"not a set"
        assert r.hget(f"{layout.table_base('db', 't')}:3", "name") == "n3:é".encode()
