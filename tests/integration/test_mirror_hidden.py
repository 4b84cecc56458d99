"""Hidden columns (docs/mirror.md, "Hidden columns") on real servers: a column an index, a score
or the row key template names but `exclude` leaves out is kept in the mirror's own row under its
prefix, so entries move by it (FULL and MINIMAL images, deletes, a resync, verify); it is never in
the rows' copies at their key template, the change log or an applied hook (the websocket's feed).
The expected key space is built here from `SELECT *`, not with the sink's code."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import orjson
import pymysql
import pytest
import redis as redis_sync

from api.schemas import TableSummaryOut
from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.sink.keys import KeyLayout
from service.sink.values import json_document
from service.verify.verifier import Verifier
from tests.integration.mirror_helpers import (
    master_position,
    mirror_settings,
    new_database,
    root,
    settle,
    stop_replicator,
    wait_applied,
    wait_hooks,
)
from tests.integration.test_mirror_derived import actual, part, text
from tests.integration.test_mirror_shaping import write

pytestmark = pytest.mark.integration

USERS = (
    "CREATE TABLE users (tenant_id INT NOT NULL, id INT NOT NULL, email VARCHAR(50) NOT NULL,"
    " status VARCHAR(20), created_at DATETIME, secret VARCHAR(20), PRIMARY KEY (tenant_id, id))"
)
HIDDEN = ("status", "created_at")  # named by an index, left out by `exclude`


def section(app: str) -> dict[str, Any]:
    return {
        "key": f"{app}:{{tenant_id}}:user:{{id}}",
        "exclude": ["status", "created_at", "secret"],
        "index": [
            {"kind": "set", "key": f"{app}:{{tenant_id}}:users-by-status:{{status}}"},
            {"kind": "zset", "key": f"{app}:users-by-created", "score": "created_at"},
        ],
    }


def source_rows(stack: LocalStack, db: str) -> list[dict[str, Any]]:
    conn = root(stack, db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM users")
        rows = list(cur.fetchall())
    conn.close()
    return rows


def expected(stack: LocalStack, db: str, app: str, json_rows: bool) -> dict[str, Any]:
    """The application's keys: copies of the kept fields only, entries by the hidden columns."""
    out: dict[str, Any] = {}
    for r in source_rows(stack, db):
        key = f"{app}:{part(r['tenant_id'])}:user:{part(r['id'])}"
        kept = {c: v for c, v in r.items() if c not in (*HIDDEN, "secret")}
        out[key] = (
            json_document(kept)
            if json_rows
            else {c.encode(): text(v) for c, v in kept.items() if v is not None}
        )
        if r["status"] is not None:
            out.setdefault(f"{app}:{part(r['tenant_id'])}:users-by-status:{part(r['status'])}", set()).add(
                key.encode()
            )
        if r["created_at"] is not None:
            when = r["created_at"].replace(tzinfo=dt.UTC).timestamp()
            out.setdefault(f"{app}:users-by-created", {})[key.encode()] = when
    return out


@pytest.mark.parametrize("value_mode", ["hash", "json"])
async def test_hidden_columns_move_entries_and_are_never_published(
    stack: LocalStack, value_mode: str
) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, USERS)
    app = f"app_{db}"
    json_rows = value_mode == "json"
    write(
        stack,
        db,
        [
            "INSERT INTO users VALUES (1, 1, 'a@x', 'st-active', '2024-01-02 03:04:05', 's1'),"
            " (1, 2, 'b@x', NULL, NULL, 's2'), (2, 1, 'c@x', 'st-new', '1999-12-31 23:59:59', NULL)"
        ],
    )
    settings = mirror_settings(
        stack, db, prefix, table={f"{db}.users": section(app)}, changelog_maxlen=10000, value_mode=value_mode
    )
    hooked: list[Any] = []
    rep = Replicator(settings, on_applied=[lambda txn, _first: hooked.extend(txn.changes)])
    task = asyncio.create_task(rep.run())

    async def caught_up() -> None:
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)

    try:
        await wait_hooks(rep, master_position(stack))
        await settle(rep, stack)  # the bootstrap copy (the resync path)
        assert actual(info.redis_url, app) == expected(stack, db, app, json_rows)
        write(
            stack,
            db,
            [
                "INSERT INTO users VALUES (1, 3, 'd@x', 'st-new', '2025-01-01 00:00:00', 's3')",
                "UPDATE users SET status = 'st-blocked' WHERE tenant_id = 1 AND id = 1",  # entry moves
                "UPDATE users SET created_at = '2020-02-29 12:00:00' WHERE tenant_id = 1 AND id = 2",
                "UPDATE users SET tenant_id = 3 WHERE tenant_id = 2 AND id = 1",  # the row key moves
            ],
        )
        write(  # MINIMAL images: entries move from the hidden values the mirror stored
            stack,
            db,
            [
                "UPDATE users SET email = 'a2@x' WHERE tenant_id = 1 AND id = 1",  # status stays
                "UPDATE users SET status = 'st-late' WHERE tenant_id = 1 AND id = 3",
                "UPDATE users SET id = 30 WHERE tenant_id = 1 AND id = 3",
                "DELETE FROM users WHERE tenant_id = 1 AND id = 2",
            ],
            row_image="MINIMAL",
        )
        await caught_up()
        assert actual(info.redis_url, app) == expected(stack, db, app, json_rows)
        assert (await Verifier(settings).run()).equal

        # the mirror's own row holds the hidden values (under its prefix), the copy does not
        r = redis_sync.Redis.from_url(info.redis_url)
        own = KeyLayout(prefix).row_key(db, "users", ("1", "30"))
        if json_rows:
            doc = orjson.loads(r.get(own) or b"{}")
            assert doc["\0status"] == "st-late" and "status" not in doc
        else:
            assert r.hget(own, "\0status") == b"st-late" and r.hget(own, "status") is None
        users = next(t for t in rep.status().tables if t.table == "users")
        shape = TableSummaryOut.from_domain(users).model_dump(by_alias=True)["shape"]
        assert shape["hidden"] == sorted(HIDDEN) and shape["excluded"] == ["secret"]

        # an ALTER copies the table again: the hidden values come back with it
        write(stack, db, ["ALTER TABLE users ADD COLUMN extra INT DEFAULT 7"])
        await caught_up()
        assert actual(info.redis_url, app) == expected(stack, db, app, json_rows)
        assert (await Verifier(settings).run()).equal
    finally:
        await stop_replicator(rep, task)

    # nothing hidden left the process but for the mirror's own rows: no hook image, no change-log
    # entry, no copy
    assert hooked
    for ch in hooked:
        for image in (ch.before, ch.after):
            if image is not None:
                assert not set(image) & {"status", "created_at", "secret", "\0status", "\0created_at"}
    entries = r.xrange(f"{prefix}:__changes")
    assert any(e[b"table"] == b"users" for _, e in entries)
    for _, e in entries:
        body = b"".join(e.values())
        assert b"st-" not in body and b"2024-01-02" not in body and b"\\u0000" not in body
    copies = b"".join(r.dump(k) or b"" for k in r.scan_iter(f"{app}:*:user:*"))
    assert copies and b"st-" not in copies
    r.close()


async def test_a_hidden_column_needs_a_key_template(stack: LocalStack) -> None:
    """Without a key template the mirror's own row is the one applications read: an index on a
    left-out column is refused, in one line naming the way out."""
    db, prefix = new_database(stack, USERS)
    table = {"exclude": ["status"], "index": [{"kind": "set", "key": "by-status:{status}"}]}
    rep = Replicator(mirror_settings(stack, db, prefix, table={f"{db}.users": table}))
    refused = r"column status is left out by columns/exclude; without a key"
    with pytest.raises(ConfigError, match=refused) as e:
        await asyncio.wait_for(rep.run(), 60)
    assert "\n" not in str(e.value)
