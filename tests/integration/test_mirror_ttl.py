"""Expiry of shaped tables (docs/mirror.md, "Expiry") on real servers: `ttl = { at = column }`
(DATETIME at a fixed offset; NULL: none; an instant already past: the row leaves the mirror in the
same apply), `ttl = { seconds = N }` (renewed on each write; an expired row's index entries swept;
a FULL update writes it whole again, a MINIMAL one leaves it expired), and verify counting expired
rows apart from missing ones. Expected keys and expiries are computed here from `SELECT *`."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from typing import Any

import pymysql
import pytest
import redis as redis_sync

from api.schemas import TableSummaryOut
from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.verify.verifier import Verifier
from tests.integration.mirror_helpers import (
    master_position,
    mirror_settings,
    new_database,
    root,
    settle,
    stop_replicator,
    wait_applied,
)
from tests.integration.test_mirror_shaping import write

pytestmark = pytest.mark.integration

SESSIONS = (
    "CREATE TABLE sessions (id INT PRIMARY KEY, user_id INT NOT NULL, expires_at DATETIME(3),"
    " note VARCHAR(20))"
)
TOKENS = "CREATE TABLE tokens (id INT PRIMARY KEY, owner VARCHAR(20), scope VARCHAR(20))"
OFFSET = dt.timedelta(hours=2)  # the sessions' DATETIMEs are local time at +02:00


def local(delta: dt.timedelta) -> str:
    """A DATETIME at +02:00, `delta` from now."""
    return (dt.datetime.now(dt.UTC) + OFFSET + delta).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def expected_sessions(stack: LocalStack, db: str, app: str) -> dict[str, int | None]:
    """Row key -> expiry (epoch ms; None: none) of every session row not yet expired."""
    conn = root(stack, db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM sessions")
        rows = cur.fetchall()
    conn.close()
    now_ms = time.time() * 1000
    out: dict[str, int | None] = {}
    for r in rows:
        at = r["expires_at"]
        ms = None if at is None else round((at.replace(tzinfo=dt.UTC) - OFFSET).timestamp() * 1000)
        if ms is None or ms > now_ms:
            out[f"{app}:session:{r['id']}"] = ms
    return out


def actual_sessions(r: redis_sync.Redis, app: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for k in r.scan_iter(f"{app}:session:*"):
        at = r.pexpiretime(k)
        out[k.decode()] = None if at == -1 else at
    return out


@pytest.mark.parametrize("value_mode", ["hash", "json"])
async def test_ttl_at_and_seconds_on_real_servers(stack: LocalStack, value_mode: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, SESSIONS, TOKENS)
    app = f"app_{db}"
    write(
        stack,
        db,
        [
            f"INSERT INTO sessions VALUES (1, 10, '{local(dt.timedelta(days=30))}', 'a'),"
            f" (2, 10, NULL, 'b'), (3, 11, '{local(-dt.timedelta(days=1))}', 'c')",
        ],
    )  # copied by the bootstrap: row 3 is already past
    table = {
        f"{db}.sessions": {
            "key": f"{app}:session:{{id}}",
            "index": [{"kind": "set", "key": f"{app}:sessions-of:{{user_id}}"}],
            "ttl": {"at": "expires_at", "timezone": "+02:00"},
        },
        f"{db}.tokens": {
            "index": [{"kind": "set", "key": f"{app}:tokens-of:{{owner}}"}],
            "ttl": {"seconds": 5},
        },
    }
    settings = mirror_settings(stack, db, prefix, table=table, ttl_sweep_seconds=0.2, value_mode=value_mode)
    r = redis_sync.Redis.from_url(info.redis_url)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())

    async def caught_up() -> None:
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)

    def members(key: str) -> set[bytes]:
        return set(r.smembers(key))

    try:
        await settle(rep, stack)
        assert actual_sessions(r, app) == expected_sessions(stack, db, app)
        assert members(f"{app}:sessions-of:11") == set()
        write(
            stack,
            db,
            [
                f"INSERT INTO sessions VALUES (4, 12, '{local(dt.timedelta(hours=5))}', 'd')",
                f"INSERT INTO sessions VALUES (5, 12, '{local(-dt.timedelta(minutes=1))}', 'e')",  # past
                f"UPDATE sessions SET expires_at = '{local(-dt.timedelta(seconds=5))}' WHERE id = 1",
                f"UPDATE sessions SET expires_at = '{local(dt.timedelta(days=2))}' WHERE id = 2",
                "UPDATE sessions SET user_id = 13 WHERE id = 4",  # its set entry moves, expiry kept
                "INSERT INTO tokens VALUES (1, 'ann', 'read'), (2, 'bob', 'write')",
            ],
        )
        await caught_up()
        assert actual_sessions(r, app) == expected_sessions(stack, db, app)
        assert members(f"{app}:sessions-of:10") == {f"{app}:session:2".encode()}
        assert members(f"{app}:sessions-of:12") == set()
        assert members(f"{app}:sessions-of:13") == {f"{app}:session:4".encode()}
        tok = f"{prefix}:{db}:tokens"
        assert r.pttl(f"{tok}:1") != -1 and r.pttl(f"{tok}:1") <= 5000  # set (or, on a slow run, expired)

        report = await Verifier(settings).run()
        assert report.equal, report.differences
        by_table = {t.table: t for t in report.tables}
        assert by_table["sessions"].expired == 3  # rows 1, 3 and 5
        shown = {t.table: TableSummaryOut.from_domain(t).model_dump()["shape"] for t in rep.status().tables}
        assert (
            shown["sessions"]["ttl"] == "at expires_at, timezone +02:00" and shown["tokens"]["ttl"] == "5 s"
        )

        # `seconds`: the tokens expire; within the sweep interval their set entries go
        deadline = time.monotonic() + 40
        while members(f"{app}:tokens-of:ann") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert members(f"{app}:tokens-of:ann") == set() and not r.exists(f"{tok}:1")
        assert r.scard(f"{tok}:__keys") == 0
        assert rep.ttl_swept.labels(f"{db}.tokens")._value.get() == 2

        # an UPDATE of an expired row: FULL image -> the whole row again; MINIMAL -> stays expired
        write(stack, db, ["UPDATE tokens SET scope = 'admin' WHERE id = 1"])
        write(stack, db, ["UPDATE tokens SET scope = 'none' WHERE id = 2"], row_image="MINIMAL")
        await caught_up()
        whole = {"id": 1, "owner": "ann", "scope": "admin"}
        if value_mode == "hash":
            assert r.hgetall(f"{tok}:1") == {k.encode(): str(v).encode() for k, v in whole.items()}
        else:
            assert json.loads(r.get(f"{tok}:1") or b"") == whole
        assert 0 < r.pttl(f"{tok}:1") <= 5000 and members(f"{app}:tokens-of:ann") == {f"{tok}:1".encode()}
        assert not r.exists(f"{tok}:2") and members(f"{app}:tokens-of:bob") == set()
    finally:
        await stop_replicator(rep, task)
        r.close()


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        ({"at": "note"}, "ttl: at: column note is VARCHAR"),
        ({"at": "nope"}, "ttl: at: nope names no column"),
    ],
)
async def test_a_ttl_that_cannot_apply_is_refused_at_start(
    stack: LocalStack, ttl: dict[str, Any], message: str
) -> None:
    db, prefix = new_database(stack, SESSIONS)
    rep = Replicator(mirror_settings(stack, db, prefix, table={f"{db}.sessions": {"ttl": ttl}}))
    with pytest.raises(ConfigError, match=message) as caught:
        await asyncio.wait_for(rep.run(), 60)
    assert "\n" not in str(caught.value)
