"""Key templates and index keys (docs/mirror.md, "Key templates and index keys") on real servers:
rows at the application's keys, unique, set and zset entries kept exact through inserts, updates
that move a row or its entries (full and MINIMAL images, swaps inside one transaction), deletes,
a resync, TRUNCATE, a restart that replays, and `ctl clear`. The expected key space is built here
from `SELECT *` with the documented rendering rules, not with the sink's code."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal
from typing import Any

import pymysql
import pytest
import redis as redis_sync

from api.schemas import TableSummaryOut
from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.sink.clear import clear_prefix
from service.sink.keys import KeyLayout
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

USERS = (
    "CREATE TABLE users (tenant_id INT NOT NULL, id INT NOT NULL, email VARCHAR(50) NOT NULL,"
    " status VARCHAR(20), password_hash VARCHAR(64), created_at DATETIME(6), token VARBINARY(8),"
    " PRIMARY KEY (tenant_id, id), UNIQUE KEY by_email (tenant_id, email))"
)


def section(app: str) -> dict[str, Any]:
    return {
        "key": f"{app}:{{tenant_id}}:user:{{id}}",
        "exclude": ["password_hash"],
        "rename": {"created_at": "created"},
        "index": [
            {"kind": "unique", "key": f"{app}:{{tenant_id}}:user-by-email:{{email}}"},
            {"kind": "set", "key": f"{app}:{{tenant_id}}:users-by-status:{{status}}"},
            {"kind": "zset", "key": f"{app}:{{tenant_id}}:users-by-created", "score": "created_at"},
            {"kind": "set", "key": f"{app}:users-by-token:{{token}}"},
        ],
    }


def part(value: Any) -> str:
    """A key part as docs/mirror.md says: binary as 0x-hex; `\\` and `:` escaped; a leading `__`."""
    text = "0x" + value.hex() if isinstance(value, bytes) else str(value)
    text = text.replace("\\", "\\\\").replace(":", "\\:")
    return "\\" + text if text.startswith("__") else text


def text(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, dt.datetime):
        return value.isoformat(" ").encode()
    return str(value).encode()


def expected(stack: LocalStack, db: str, app: str) -> dict[str, Any]:
    """Every key under `{app}:` the mirror should hold, by type, from the source's rows."""
    conn = root(stack, db)
    out: dict[str, Any] = {}
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM users")
        rows = cur.fetchall()
    conn.close()
    for r in rows:
        t = part(r["tenant_id"])
        key = f"{app}:{t}:user:{part(r['id'])}"
        names = {"created_at": "created"}
        out[key] = {
            names.get(c, c).encode(): text(v) for c, v in r.items() if v is not None and c != "password_hash"
        }
        out[f"{app}:{t}:user-by-email:{part(r['email'])}"] = key.encode()
        if r["status"] is not None:
            out.setdefault(f"{app}:{t}:users-by-status:{part(r['status'])}", set()).add(key.encode())
        if r["created_at"] is not None:
            when = r["created_at"].replace(tzinfo=dt.UTC).timestamp()
            out.setdefault(f"{app}:{t}:users-by-created", {})[key.encode()] = when
        if r["token"] is not None:
            out.setdefault(f"{app}:users-by-token:{part(r['token'])}", set()).add(key.encode())
    return out


def actual(redis_url: str, app: str) -> dict[str, Any]:
    r = redis_sync.Redis.from_url(redis_url)
    out: dict[str, Any] = {}
    for k in r.scan_iter(f"{app}:*", count=1000):
        kind = r.type(k)
        key = k.decode()
        if kind == b"hash":
            out[key] = r.hgetall(k)
        elif kind == b"string":
            out[key] = r.get(k)
        elif kind == b"set":
            out[key] = r.smembers(k)
        elif kind == b"zset":
            out[key] = dict(r.zrange(k, 0, -1, withscores=True))
        else:
            out[key] = kind
    r.close()
    return out


INSERTS = [
    "INSERT INTO users (tenant_id, id, email, status, password_hash, created_at, token)"
    " VALUES (1, 1, 'a@x', 'active', 'h1', '2024-01-02 03:04:05.250000', X'00ff'),"
    " (1, 2, 'b@x', 'active', 'h2', NULL, NULL), (2, 1, 'a@x', NULL, 'h3', '1999-12-31 23:59:59', X'00ff'),"
    " (1, 3, 'c:\\\\d@x', '__odd:status', 'h4', '2030-06-01 00:00:00', X'41')",
]


async def test_rows_and_index_entries_follow_every_change(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, USERS)
    app = f"app_{db}"
    write(stack, db, INSERTS)  # copied by the bootstrap (the resync path)
    settings = mirror_settings(stack, db, prefix, table={f"{db}.users": section(app)})
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())

    async def caught_up() -> None:
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)

    try:
        await settle(rep, stack)
        assert actual(info.redis_url, app) == expected(stack, db, app)
        write(
            stack,
            db,
            [
                "INSERT INTO users VALUES (1, 4, 'd@x', 'new', 'h5', '2025-01-01 00:00:00', NULL)",
                "UPDATE users SET status = 'blocked' WHERE tenant_id = 1 AND id = 1",  # set entry moves
                "UPDATE users SET created_at = '2020-02-29 12:00:00.5' WHERE tenant_id = 1 AND id = 2",
                "UPDATE users SET tenant_id = 3 WHERE tenant_id = 2 AND id = 1",  # the row key moves
                "UPDATE users SET id = 40 WHERE tenant_id = 1 AND id = 4",
                "UPDATE users SET password_hash = 'h1b' WHERE tenant_id = 1 AND id = 1",
                "DELETE FROM users WHERE tenant_id = 1 AND id = 3",
            ],
        )
        # two rows swap their e-mails in one transaction: each unique key ends at its new row
        write(
            stack,
            db,
            [
                "UPDATE users SET email = 'tmp@x' WHERE tenant_id = 1 AND id = 1",
                "UPDATE users SET email = 'a@x' WHERE tenant_id = 1 AND id = 2",
                "UPDATE users SET email = 'b@x' WHERE tenant_id = 1 AND id = 1",
            ],
        )
        write(  # MINIMAL images: the entries move from what the mirror stored
            stack,
            db,
            [
                "UPDATE users SET status = NULL WHERE tenant_id = 1 AND id = 1",
                "UPDATE users SET token = X'ab' WHERE tenant_id = 1 AND id = 2",
                "UPDATE users SET tenant_id = 4 WHERE tenant_id = 1 AND id = 40",
                "INSERT INTO users (tenant_id, id, email) VALUES (5, 1, 'e@x')",
            ],
            row_image="MINIMAL",
        )
        await caught_up()
        assert actual(info.redis_url, app) == expected(stack, db, app)

        # an ALTER: copied again (resync), the entries rebuilt, none left behind
        write(
            stack, db, ["ALTER TABLE users ADD COLUMN extra INT DEFAULT 7", "DELETE FROM users WHERE id = 2"]
        )
        await caught_up()
        assert actual(info.redis_url, app) == expected(stack, db, app)
        assert (await Verifier(settings).run()).equal
        users = next(t for t in rep.status().tables if t.table == "users")
        shown = TableSummaryOut.from_domain(users).model_dump(by_alias=True)["shape"]
        assert shown["key"] == f"{app}:{{tenant_id}}:user:{{id}}" and shown["indexes"][2] == {
            "kind": "zset", "key": f"{app}:{{tenant_id}}:users-by-created", "score": "created_at"
        }  # fmt: skip
    finally:
        await stop_replicator(rep, task)

    # verify finds entries that are not as the source says, --repair rewrites them
    lay = KeyLayout(prefix)
    r = redis_sync.Redis.from_url(info.redis_url)
    r.delete(f"{app}:1:user-by-email:b@x")  # a unique key missing
    r.zadd(f"{app}:1:users-by-created", {f"{app}:1:user:2": 1.0})  # a wrong score (row 2 is gone)
    r.zadd(f"{app}:1:users-by-created", {f"{app}:1:user:1": 5.0})  # a wrong score
    r.hset(f"{app}:4:user:40", "email", "forged")  # the copy differs from the row
    report = await Verifier(settings).run()
    assert sorted((d.kind, d.key, d.fields) for d in report.differences) == [
        (
            "entries",
            f"{lay.table_base(db, 'users')}:1:1",
            (f"{app}:1:user-by-email:b@x", f"{app}:1:users-by-created"),
        ),
        ("entries", f"{lay.table_base(db, 'users')}:4:40", (f"{app}:4:user:40",)),
    ]
    assert (await Verifier(settings).run(repair=True)).repaired == 2
    r.zrem(f"{app}:1:users-by-created", f"{app}:1:user:2")  # a member no row records: not found (documented)
    assert actual(info.redis_url, app) == expected(stack, db, app)
    assert (await Verifier(settings).run()).equal

    # a restart from an older checkpoint replays transactions already applied: same key space
    write(stack, db, ["UPDATE users SET status = 'late' WHERE tenant_id = 1 AND id = 1"])
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await caught_up()
        assert actual(info.redis_url, app) == expected(stack, db, app)
        write(stack, db, ["TRUNCATE TABLE users"])
        await caught_up()
        assert actual(info.redis_url, app) == {}
        assert not r.exists(lay.derived_key(db, "users"))
        write(stack, db, INSERTS)
        await caught_up()
    finally:
        await stop_replicator(rep, task)
    assert actual(info.redis_url, app) == expected(stack, db, app) != {}
    # ctl clear: the application's keys go too (the mirror's `__derived` names them)
    await clear_prefix(info.redis_url, prefix)
    assert actual(info.redis_url, app) == {} and not list(r.scan_iter(f"{prefix}:*"))
    r.close()


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (
            {"kind": "unique", "key": "u:{status}"},
            r"index\[0\]: unique key 'u:\{status\}': columns status hold no UNIQUE",
        ),
        (
            {"kind": "zset", "key": "z", "score": "email"},
            r"score: column email is VARCHAR, not numeric or temporal",
        ),
        ({"kind": "zset", "key": "z"}, r"a zset index needs `score`"),
        ({"kind": "set", "key": "s:{password_hash}"}, r"column password_hash is left out by columns/exclude"),
        ({"kind": "set", "key": "s:{status}-{email}"}, r"placeholders \{status\} and \{email\} are in one"),
        (
            {"kind": "set", "key": "APP:{email}:{status}"},
            r"key: its keys could be the same as those of .* index\[0\]",
        ),
    ],
)
async def test_indexes_that_cannot_apply_are_refused_at_start(
    stack: LocalStack, index: dict[str, Any], message: str
) -> None:
    db, prefix = new_database(stack, USERS)
    table = {"key": "APP:{tenant_id}:{id}", "exclude": ["password_hash"], "index": [index]}
    rep = Replicator(mirror_settings(stack, db, prefix, table={f"{db}.users": table}))
    with pytest.raises(ConfigError, match=message) as caught:
        await asyncio.wait_for(rep.run(), 60)
    assert "\n" not in str(caught.value)


async def test_a_template_naming_the_mirror_prefix_is_refused(stack: LocalStack) -> None:
    db, prefix = new_database(stack, USERS)
    table = {"key": f"{prefix}:{{tenant_id}}:{{id}}"}
    rep = Replicator(mirror_settings(stack, db, prefix, table={f"{db}.users": table}))
    with pytest.raises(
        ConfigError, match=f"its keys could start with {prefix}:, the mirror's own key prefix"
    ):
        await asyncio.wait_for(rep.run(), 60)


def test_decimal_text_is_the_stored_text() -> None:  # the helper above renders as the mirror stores
    assert text(Decimal("1.50")) == b"1.50" and part(b"\x00\xff") == "0x00ff" and part("__a:b") == "\\__a\\:b"
