"""Key templates and index keys (docs/mirror.md, "Key templates and index keys") on real servers:
rows at the application's keys, unique, set and zset entries kept exact through inserts, updates
that move a row or its entries (full and MINIMAL images, swaps inside one transaction), deletes,
a resync, TRUNCATE, a restart that replays, and `ctl clear`. The expected key space is built here
from `SELECT *` with the documented rendering rules, not with the sink's code."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest
import redis as redis_sync
import redis.asyncio as redis_async

from api.schemas import TableSummaryOut
from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.sink.clear import clear_prefix
from service.sink.keys import KeyLayout
from service.sink.layoutversion import ensure_layout
from service.sink.values import json_document
from service.verify.verifier import Verifier
from tests.integration.mirror_helpers import (
    master_position,
    mirror_settings,
    new_database,
    root,
    settle,
    stop_replicator,
    stored_position,
    unique_names,
    wait_applied,
)
from tests.integration.test_mirror_crash import _start as start_run
from tests.integration.test_mirror_crash import _stop as stop_run
from tests.integration.test_mirror_crash import _wait_advance as wait_advance
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


def section_toml(name: str, sec: dict[str, Any]) -> str:
    """`sec` as a config file's `[table."name"]` section (JSON strings are TOML basic strings)."""
    q = json.dumps
    lines = [f"[table.{q(name)}]", f"key = {q(sec['key'])}", f"exclude = {q(sec['exclude'])}"]
    lines.append("rename = { " + ", ".join(f"{k} = {q(v)}" for k, v in sec["rename"].items()) + " }")
    for ix in sec["index"]:
        lines.append(f"[[table.{q(name)}.index]]")
        lines += [f"{k} = {q(v)}" for k, v in ix.items()]
    return "\n".join(lines) + "\n"


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


def expected(stack: LocalStack, db: str, app: str, json_rows: bool = False) -> dict[str, Any]:
    """Every key under `{app}:` the mirror should hold, by type, from the source's rows (json
    rows: the copy is the row's canonical JSON document)."""
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
        if json_rows:
            out[key] = json_document({names.get(c, c): v for c, v in r.items() if c != "password_hash"})
        out[f"{app}:{t}:user-by-email:{part(r['email'])}"] = key.encode()
        if r.get("status") is not None:  # (an ALTER may have dropped it)
            out.setdefault(f"{app}:{t}:users-by-status:{part(r['status'])}", set()).add(key.encode())
        if r["created_at"] is not None:
            when = r["created_at"].replace(tzinfo=dt.UTC).timestamp()
            out.setdefault(f"{app}:{t}:users-by-created", {})[key.encode()] = when
        if r["token"] is not None:
            out.setdefault(f"{app}:users-by-token:{part(r['token'])}", set()).add(key.encode())
    return out


def expected_counts(stack: LocalStack, db: str) -> tuple[int, list[int]]:
    """The row copies and each index's entries the source's rows imply: a row has an entry in an
    index when no placeholder (nor the score) of the index is NULL."""
    conn = root(stack, db)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*), COUNT(email), COUNT(status), COUNT(created_at), COUNT(token) FROM users"
        )
        n, *entries = cur.fetchone()
    conn.close()
    return n, entries


async def counts_shown(rep: Replicator) -> tuple[int, list[int]]:
    """What /tables shows of `users`: its row copies and its indexes' entries."""
    users = next(t for t in (await rep.counted_status()).tables if t.table == "users")
    shape = TableSummaryOut.from_domain(users).model_dump(by_alias=True)["shape"]
    return shape["copies"], [i["entries"] for i in shape["indexes"]]


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
        assert await counts_shown(rep) == expected_counts(stack, db) == (4, [4, 3, 3, 3])
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
        assert await counts_shown(rep) == expected_counts(stack, db)

        # an ALTER: copied again (resync), the entries rebuilt, none left behind
        write(
            stack, db, ["ALTER TABLE users ADD COLUMN extra INT DEFAULT 7", "DELETE FROM users WHERE id = 2"]
        )
        await caught_up()
        assert actual(info.redis_url, app) == expected(stack, db, app)
        assert await counts_shown(rep) == expected_counts(stack, db)
        assert (await Verifier(settings).run()).equal
        users = next(t for t in rep.status().tables if t.table == "users")
        shown = TableSummaryOut.from_domain(users).model_dump(by_alias=True)["shape"]
        assert shown["key"] == f"{app}:{{tenant_id}}:user:{{id}}" and shown["indexes"][2] == {
            "kind": "zset", "key": f"{app}:{{tenant_id}}:users-by-created", "score": "created_at",
            "entries": None,  # (status(): not counted; counted_status() reads them)
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
        assert await counts_shown(rep) == expected_counts(stack, db)
        write(stack, db, ["TRUNCATE TABLE users"])
        await caught_up()
        assert actual(info.redis_url, app) == {}
        assert not r.exists(lay.derived_key(db, "users"), lay.derived_counts_key(db, "users"))
        assert await counts_shown(rep) == (0, [0, 0, 0, 0])
        write(stack, db, INSERTS)
        await caught_up()
        assert await counts_shown(rep) == expected_counts(stack, db) == (4, [4, 3, 3, 3])
    finally:
        await stop_replicator(rep, task)
    assert actual(info.redis_url, app) == expected(stack, db, app) != {}
    # ctl clear: the application's keys go too (the mirror's `__derived` names them)
    await clear_prefix(info.redis_url, prefix)
    assert actual(info.redis_url, app) == {} and not list(r.scan_iter(f"{prefix}:*"))
    r.close()


async def test_a_changed_section_counts_the_entries_of_its_new_indexes(stack: LocalStack) -> None:
    """A restart with an index removed and the others reordered: the table is copied again into
    the new shape; its counts are then those of the new indexes, from the source's rows, and no
    count of the former shape is left (`__derivedcounts` holds only the new spec's fields)."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, USERS)
    app = f"app_{db}"
    write(stack, db, INSERTS)
    old = section(app)
    settings = mirror_settings(stack, db, prefix, table={f"{db}.users": old})
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        assert await counts_shown(rep) == expected_counts(stack, db) == (4, [4, 3, 3, 3])
    finally:
        await stop_replicator(rep, task)
    write(stack, db, ["UPDATE users SET status = NULL, token = NULL WHERE tenant_id = 1 AND id = 3"])
    new = {**old, "index": [old["index"][2], old["index"][0], old["index"][3]]}  # no status set
    settings = mirror_settings(stack, db, prefix, table={f"{db}.users": new})
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        write(stack, db, ["DELETE FROM users WHERE tenant_id = 1 AND id = 2"])
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)
        n, (emails, _statuses, created, tokens) = expected_counts(stack, db)
        assert await counts_shown(rep) == (n, [created, emails, tokens]) == (3, [3, 3, 2])
        shape = rep.catalog.shape(db, "users")
        assert shape is not None and shape.derivation is not None
        r = redis_sync.Redis.from_url(info.redis_url)
        fields = r.hgetall(KeyLayout(prefix).derived_counts_key(db, "users"))
        assert fields and all(f.startswith(shape.derivation.tag.encode() + b":") for f in fields)
        assert not list(r.scan_iter(f"{app}:*:users-by-status:*"))  # the removed index's keys went
        r.close()
    finally:
        await stop_replicator(rep, task)


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


async def test_an_alter_dropping_an_indexed_column_stops_the_run_until_the_section_changes(
    stack: LocalStack,
) -> None:
    """ALTER TABLE … DROP COLUMN of a column an index names: the run stops with one line naming
    the table, the index and the column; started again with the index removed from the section,
    it applies the ALTER (a resync) and the old index's entries are gone."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, USERS)
    app = f"app_{db}"
    write(stack, db, INSERTS)
    settings = mirror_settings(stack, db, prefix, table={f"{db}.users": section(app)})
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        assert actual(info.redis_url, app) == expected(stack, db, app)
        write(stack, db, ["ALTER TABLE users DROP COLUMN status"])
        with pytest.raises(ConfigError, match=r"index\[1\]: status names no column") as caught:
            await asyncio.wait_for(task, 60)
        assert f"table {db}.users" in str(caught.value)
    finally:
        await stop_replicator(rep, task)
    fixed = section(app)
    fixed["index"] = [ix for ix in fixed["index"] if "status" not in ix["key"]]
    rep = Replicator(mirror_settings(stack, db, prefix, table={f"{db}.users": fixed}))
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)
        assert actual(info.redis_url, app) == expected(stack, db, app)
    finally:
        await stop_replicator(rep, task)


async def test_json_rows_keep_their_entries(stack: LocalStack) -> None:
    """value_mode json: the same entries as the hash layout (derive reads the document's fields:
    binary from base64), the copy at the template key is the row's document; through the
    bootstrap copy, updates that move the row and its entries (FULL and MINIMAL images), a delete
    and verify."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, USERS)
    app = f"app_{db}"
    write(stack, db, INSERTS)
    settings = mirror_settings(stack, db, prefix, table={f"{db}.users": section(app)}, value_mode="json")
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        assert actual(info.redis_url, app) == expected(stack, db, app, json_rows=True)
        write(
            stack,
            db,
            [
                "UPDATE users SET status = 'blocked', token = X'0102' WHERE tenant_id = 1 AND id = 1",
                "UPDATE users SET tenant_id = 3 WHERE tenant_id = 2 AND id = 1",
                "DELETE FROM users WHERE tenant_id = 1 AND id = 3",
            ],
        )
        write(
            stack,
            db,
            [
                "UPDATE users SET status = 'late', created_at = '2031-01-01 00:00:00' "
                "WHERE tenant_id = 1 AND id = 2",
                "UPDATE users SET id = 9 WHERE tenant_id = 1 AND id = 1",
            ],
            row_image="MINIMAL",
        )
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)
        assert actual(info.redis_url, app) == expected(stack, db, app, json_rows=True)
        assert (await Verifier(settings).run()).equal
    finally:
        await stop_replicator(rep, task)


STATUSES = ["active", "blocked", "x:y"]


def test_sigkill_during_updates_of_indexed_columns(stack: LocalStack, tmp_path: Path) -> None:
    """`run` processes SIGKILLed at random moments while a workload moves rows between keys and
    index entries (tenant and id changes, status, e-mail swaps, created_at, deletes), with FULL and
    MINIMAL images: at the end the application's key space is what the source rows imply."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, USERS)
    app = f"app_{db}"
    write(stack, db, INSERTS)
    config = tmp_path / "mirror.toml"
    config.write_text(section_toml(f"{db}.users", section(app)))
    log = tmp_path / "run.log"
    rng = random.Random(11)
    proc = start_run(stack, db, prefix, log, "--config", str(config), changelog=False)
    wait_applied(info.redis_url, prefix, None, timeout=40)
    stop, errors, steps = threading.Event(), [], [0]

    def workload() -> None:
        conn = root(stack, db)
        wrng = random.Random(5)
        try:
            while not stop.is_set():
                with conn.cursor() as cur:
                    cur.execute(
                        "SET SESSION binlog_row_image = %s", (wrng.choice(["FULL", "FULL", "MINIMAL"]),)
                    )
                    a, b = wrng.randint(1, 6), wrng.randint(1, 6)
                    statements = [
                        f"INSERT IGNORE INTO users (tenant_id, id, email, status) VALUES ({a}, {b}, "
                        f"'{a}.{b}@x', 'new')",
                        f"UPDATE users SET status = '{wrng.choice(STATUSES)}' WHERE id = {b}",
                        f"UPDATE users SET created_at = '20{wrng.randint(10, 40)}-01-01 00:00:0{b}' "
                        f"WHERE tenant_id = {a}",
                        f"UPDATE IGNORE users SET tenant_id = {b} WHERE tenant_id = {a} AND id = {b}",
                        f"UPDATE IGNORE users SET email = CONCAT('s', LEFT(email, 30)) WHERE tenant_id = {a} "
                        "LIMIT 1",
                        f"DELETE FROM users WHERE tenant_id = {a} AND id = {b} AND status = 'blocked'",
                    ]
                    for sql in wrng.sample(statements, 3):
                        cur.execute(sql)
                conn.commit()
                steps[0] += 1
                time.sleep(0.01)
        except BaseException as exc:  # surfaced by the test
            errors.append(exc)
        finally:
            conn.close()

    writer = threading.Thread(target=workload, daemon=True)
    writer.start()
    kills = 0
    try:
        for _ in range(8):
            wait_advance(info.redis_url, prefix, stored_position(info.redis_url, prefix))
            time.sleep(rng.uniform(0.0, 0.3))
            proc.kill()
            proc.wait()
            kills += 1
            proc = start_run(stack, db, prefix, log, "--config", str(config), changelog=False)
        stop.set()
        writer.join()
        assert not errors, errors
        write(stack, db, ["UPDATE users SET status = 'last' WHERE tenant_id = 1 AND id = 1"])
        wait_applied(info.redis_url, prefix, master_position(stack), timeout=60)
        for _ in range(50):
            if actual(info.redis_url, app) == expected(stack, db, app):
                break
            time.sleep(0.2)
        assert actual(info.redis_url, app) == expected(stack, db, app)
    finally:
        stop.set()
        stop_run(proc)
    assert kills == 8 and steps[0] > 20, (kills, steps[0])
    assert "Traceback" not in log.read_text(errors="replace")


async def test_entries_of_the_older_layout_stop_the_run_until_ctl_clear(stack: LocalStack) -> None:
    """A mirror whose `__derived` records are key layout 2's (no derivation tag, no index numbers)
    is refused with the way out; `ctl clear` reads that form too, removes the application's keys
    the records name, and the next start takes the mirror as layout 3."""
    info = stack.load()
    assert info is not None
    prefix = unique_names()[1]
    r = redis_sync.Redis.from_url(info.redis_url)
    r.set(f"{prefix}:__layout", 2)
    r.hset(f"{prefix}:db:users:1:1", "id", "1")
    r.hset(f"{prefix}:db:users:__derived", "1:1", "8:app:1:u1k8:app:1:u1s8:app:by-sz5:app:z1:3")
    r.hset("app:1:u1", "id", "1")
    r.sadd("app:by-s", "app:1:u1")
    r.zadd("app:z", {"app:1:u1": 3})
    layout = KeyLayout(prefix)
    with pytest.raises(ConfigError, match=f"run `binlog-mirror ctl clear --prefix {prefix}`"):
        await ensure_layout(r_async := redis_async.Redis.from_url(info.redis_url), layout)
    assert await clear_prefix(info.redis_url, prefix) > 0
    assert not r.exists("app:1:u1", "app:by-s", "app:z") and not r.keys(f"{prefix}:*")
    await ensure_layout(r_async, layout)
    assert r.get(f"{prefix}:__layout") == b"3"
    await r_async.aclose()
    r.close()
