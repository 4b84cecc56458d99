"""Shaping (docs/mirror.md, "Shaping"): `[table."…"]` sections on real servers. Kept fields only,
renamed, through the bootstrap copy, the stream (FULL and MINIMAL images), a resync, verify and
TRUNCATE; excluded columns in no hash, no change-log entry and no applied hook (the websocket's
feed); tables without a section byte for byte as before; refusals at start, one line each."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pymysql
import pytest
import redis as redis_sync

from api.schemas import TableSummaryOut
from service.binlog.canonical import row_to_json
from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.sink.keys import KeyLayout
from service.sink.values import field_value
from service.verify.verifier import Verifier
from tests.integration.mirror_helpers import (
    actual,
    master_position,
    mirror_settings,
    new_database,
    root,
    settle,
    stop_replicator,
    wait_applied,
    wait_hooks,
)

pytestmark = pytest.mark.integration

SCHEMA = (
    "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(50) NOT NULL, password_hash VARCHAR(64),"
    " created_at DATETIME, note VARCHAR(20))",
    "CREATE TABLE tokens (id INT PRIMARY KEY, user_id INT, token VARCHAR(40), kind VARCHAR(10))",
    "CREATE TABLE plain (id INT PRIMARY KEY, secret VARCHAR(20))",
)
USERS = ("id", "email", "created_at", "note")  # kept, in the source's names
RENAMES = {"created_at": "created"}


def sections(db: str) -> dict[str, Any]:
    return {
        f"{db}.users": {"exclude": ["password_hash"], "rename": RENAMES},
        f"{db}.tok*": {"columns": ["id", "kind"]},  # a glob
        f"{db}.u*": {"exclude": ["email"]},  # less specific than `users`: not used
    }


def shaped(stack: LocalStack, db: str, json: bool = False) -> dict[str, dict[str, Any]]:
    """What the mirror should hold: SELECT * of each table, shaped as its section says (hash
    fields, or with `json` the canonical JSON documents)."""
    kept = {"users": USERS, "tokens": ("id", "kind"), "plain": ("id", "secret")}
    conn = root(stack, db)
    lay = KeyLayout("x")
    out: dict[str, dict[str, Any]] = {}
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SET time_zone = '+00:00'")
        for table, cols in kept.items():
            cur.execute(f"SELECT * FROM {table}")
            rows: dict[str, Any] = {}
            for row in cur.fetchall():
                names = RENAMES if table == "users" else {}
                cut = {names.get(c, c): row[c] for c in (*cols, *(["extra"] if "extra" in row else []))}
                suffix = lay.row_suffix([row["id"]])
                if json:
                    rows[suffix] = row_to_json(cut)
                    continue
                fields: dict[bytes, bytes] = {}
                for name, value in cut.items():
                    if value is not None:
                        fv = field_value(value)
                        fields[name.encode()] = fv if isinstance(fv, bytes) else fv.encode()
                rows[suffix] = fields
            out[table] = rows
    conn.close()
    return out


def write(stack: LocalStack, db: str, statements: list[str], row_image: str = "FULL") -> None:
    conn = root(stack, db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION binlog_row_image = %s", (row_image,))
        for sql in statements:
            cur.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("value_mode", ["hash", "json"])
async def test_shaped_tables_keep_only_their_fields_everywhere(stack: LocalStack, value_mode: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    write(
        stack,
        db,
        [
            "INSERT INTO users VALUES (1, 'a@x', 'hash-1', '2024-01-02 03:04:05', 'n1'), "
            "(2, 'b@x', 'hash-2', NULL, NULL)",
            "INSERT INTO tokens VALUES (1, 1, 'tok-1', 'api'), (2, 2, 'tok-2', NULL)",
            "INSERT INTO plain VALUES (1, 'visible')",
        ],
    )
    settings = mirror_settings(
        stack, db, prefix, table=sections(db), changelog_maxlen=10000, value_mode=value_mode
    )
    json = value_mode == "json"
    tables = ("users", "tokens", "plain")
    hooked: list[Any] = []
    rep = Replicator(settings, on_applied=[lambda txn, _first: hooked.extend(txn.changes)])
    task = asyncio.create_task(rep.run())
    try:
        await wait_hooks(rep, master_position(stack))  # bootstrap copy (resync path) done
        write(
            stack,
            db,
            [
                "INSERT INTO users VALUES (3, 'c@x', 'hash-3', '2025-05-06 07:08:09', 'n3')",
                "UPDATE users SET password_hash = 'hash-1b', note = 'n1b' WHERE id = 1",
                "UPDATE users SET password_hash = 'only-secret' WHERE id = 2",
                "UPDATE users SET id = 20 WHERE id = 2",  # a key change: the row moves
                "INSERT INTO tokens VALUES (3, 3, 'tok-3', 'web')",
                "UPDATE tokens SET token = 'tok-1b', kind = 'api2' WHERE id = 1",
                "DELETE FROM tokens WHERE id = 2",
                "INSERT INTO plain VALUES (2, 'also visible')",
            ],
        )
        write(  # partial images: merged into the shaped rows
            stack,
            db,
            [
                "UPDATE users SET note = 'minimal', password_hash = 'hash-min' WHERE id = 3",
                "UPDATE tokens SET kind = 'min' WHERE id = 3",
                "INSERT INTO users (id, email, password_hash) VALUES (4, 'd@x', 'hash-4')",
            ],
            row_image="MINIMAL",
        )
        target = master_position(stack)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, target)
        await settle(rep, stack)
        assert actual(info.redis_url, prefix, db, tables, json=json) == shaped(stack, db, json)
        assert (await Verifier(settings).run()).equal

        # /tables shows each table's shape (null: unshaped)
        shown = {
            t.table: TableSummaryOut.from_domain(t).model_dump(by_alias=True) for t in rep.status().tables
        }
        assert shown["users"]["shape"] == {
            "section": f"{db}.users",
            "fields": {"id": "id", "email": "email", "created_at": "created", "note": "note"},
            "excluded": ["password_hash"],
            "fingerprint": rep.catalog.shapes.fingerprint(db, "users"),
            "key": None,
            "copies": None,
            "indexes": [],
            "ttl": None,
            "hidden": [],
        }
        assert shown["tokens"]["shape"]["section"] == f"{db}.tok*" and shown["plain"]["shape"] is None

        # an ALTER: the table is copied again (resync), still in its shape
        write(stack, db, ["ALTER TABLE users ADD COLUMN extra INT DEFAULT 7"])
        target = master_position(stack)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, target)
        await settle(rep, stack)
        expected = shaped(stack, db, json)  # with `extra`: the section excludes by name
        assert all(("extra" if json else b"extra") in row for row in expected["users"].values())
        assert actual(info.redis_url, prefix, db, tables, json=json) == expected

        # nothing excluded left the process: no hook image, no change-log entry
        for ch in hooked:
            for image in (ch.before, ch.after):
                if image is not None and ch.table == "users":
                    assert "password_hash" not in image and "created_at" not in image
                if image is not None and ch.table == "tokens":
                    assert set(image) <= {"id", "kind"}
        r = redis_sync.Redis.from_url(info.redis_url)
        entries = r.xrange(f"{prefix}:__changes")
        assert any(e[1][b"table"] == b"users" for e in entries)
        for _, entry in entries:
            body = b"".join(entry.values())
            assert b"hash-" not in body and b"only-secret" not in body and b"tok-" not in body
        assert any(b"visible" in b"".join(e.values()) for _, e in entries)  # unshaped: as before
        every = b"".join(r.dump(k) or b"" for k in r.scan_iter(f"{prefix}:*"))
        assert b"hash-" not in every and b"tok-" not in every

        # TRUNCATE: no key of the table left
        write(stack, db, ["TRUNCATE TABLE users", "DELETE FROM tokens"])
        target = master_position(stack)
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, target)
        lay = KeyLayout(prefix)
        for _ in range(200):
            left = list(r.scan_iter(f"{lay.table_base(db, 'users')}:[^_]*")) + list(
                r.scan_iter(f"{lay.table_base(db, 'tokens')}:[^_]*")
            )
            if not left:
                break
            await asyncio.sleep(0.05)
        assert left == []
        r.close()
    finally:
        await stop_replicator(rep, task)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"exclude": ["nope"]},
            r"table {db}\.users \[table\.\"{db}\.users\"\]: exclude: nope names no column",
        ),
        ({"columns": ["email"]}, r"columns: leaves out key column id"),
        ({"exclude": ["id"]}, r"exclude: id is a key column"),
        ({"rename": {"id": "ident"}}, r"rename: id is a key column"),
        ({"rename": {"note": "email"}}, r"rename: columns email and note would both be field email"),
        ({"key": "u:{email}"}, r"key: 'u:\{{email\}}' lacks key column \{{id\}}"),
        ({"key": "u:{id}:{nope}"}, r"key: nope names no column"),
        ({"key": "u:{id}:{note}"}, r"key: column note is nullable"),
        ({"exclude": ["owner"]}, None),  # a foreign key column: see the child section below
    ],
)
async def test_sections_that_cannot_apply_are_refused_at_start(
    stack: LocalStack, section: dict[str, Any], message: str | None
) -> None:
    db, prefix = new_database(
        stack,
        "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(50) NOT NULL, note VARCHAR(20), owner INT)",
        "CREATE TABLE child (id INT PRIMARY KEY, uid INT, FOREIGN KEY fk_u (uid) REFERENCES users (id))",
    )
    tables = {f"{db}.users": section}
    if message is None:  # the child's foreign key column left out
        tables = {f"{db}.child": {"exclude": ["uid"]}}
        message = r"table {db}\.child .*leaves out column uid of foreign key"
    settings = mirror_settings(stack, db, prefix, table=tables)
    rep = Replicator(settings)
    with pytest.raises(ConfigError, match=message.format(db=db)) as caught:
        await asyncio.wait_for(rep.run(), 60)
    assert "\n" not in str(caught.value)
    r = redis_sync.Redis.from_url(stack.load().redis_url)  # type: ignore[union-attr]
    assert not list(r.scan_iter(f"{prefix}:{db}:*"))  # nothing was mirrored
    r.close()


async def test_verify_repairs_a_shaped_table_into_its_shape(stack: LocalStack) -> None:
    """`verify --repair` reads the source's rows in the table's shape: a row missing and a row
    holding a field its section leaves out are both rewritten as the stream writes them."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    write(
        stack,
        db,
        [
            "INSERT INTO users VALUES (1, 'a@x', 'hash-1', '2024-01-02 03:04:05', 'n1'), "
            "(2, 'b@x', 'hash-2', NULL, 'n2')",
            "INSERT INTO tokens VALUES (1, 1, 'tok-1', 'api')",
            "INSERT INTO plain VALUES (1, 'visible')",
        ],
    )
    settings = mirror_settings(stack, db, prefix, table=sections(db))
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)  # the bootstrap copies done
    finally:
        await stop_replicator(rep, task)
    tables = ("users", "tokens", "plain")
    assert actual(info.redis_url, prefix, db, tables) == shaped(stack, db)
    lay = KeyLayout(prefix)
    r = redis_sync.Redis.from_url(info.redis_url)
    r.hset(lay.row_key(db, "users", [1]), "password_hash", "leaked")
    r.delete(lay.row_key(db, "users", [2]))
    r.close()
    report = await Verifier(settings).run(repair=True)
    assert {d.table for d in report.differences} == {"users"} and report.repaired == 2
    assert actual(info.redis_url, prefix, db, tables) == shaped(stack, db)
    assert (await Verifier(settings).run()).equal


def rows_of(stack: LocalStack, db: str, table: str, kept: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The hash rows table `table` should have in the mirror, with only the `kept` columns."""
    conn = root(stack, db)
    lay = KeyLayout("x")
    out: dict[str, Any] = {}
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {table}")
        for row in cur.fetchall():
            fields: dict[bytes, bytes] = {}
            for name, value in row.items():
                if value is not None and (kept is None or name in kept):
                    fv = field_value(value)
                    fields[name.encode()] = fv if isinstance(fv, bytes) else fv.encode()
            out[lay.row_suffix([row["id"]])] = fields
    conn.close()
    return out


async def test_a_changed_section_copies_the_table_again_into_its_new_shape(
    stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    """The shape each table's rows were written in is recorded (`__shapes`); a start with a
    section added, changed or removed copies that table again into the new shape (fields of
    the old one gone), one started with the same sections copies nothing, and a RENAME to a
    name another section applies to copies the moved rows again."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    write(
        stack,
        db,
        [
            "INSERT INTO users VALUES (1, 'a@x', 'hash-1', '2024-01-02 03:04:05', 'n1'), "
            "(2, 'b@x', NULL, NULL, 'n2')",
            "INSERT INTO tokens VALUES (1, 1, 'tok-1', 'api')",
            "INSERT INTO plain VALUES (1, 'visible'), (2, 'also')",
        ],
    )
    layout = KeyLayout(prefix)
    r = redis_sync.Redis.from_url(info.redis_url)
    caplog.set_level(logging.INFO, logger="service.pipeline.replicator")

    async def run(tables: dict[str, Any], statements: Sequence[str] = ()) -> None:
        rep = Replicator(mirror_settings(stack, db, prefix, table=tables))
        task = asyncio.create_task(rep.run())
        try:
            await settle(rep, stack)
            if statements:
                write(stack, db, list(statements))
                await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
                await settle(rep, stack)
        finally:
            await stop_replicator(rep, task)

    def mirrored(table: str) -> dict[str, Any]:
        return actual(info.redis_url, prefix, db, (table,))[table]

    first = {f"{db}.users": {"exclude": ["password_hash"]}, f"{db}.tokens": {"columns": ["id", "kind"]}}
    await run(first)
    shapes = r.hgetall(layout.shapes_key)
    assert set(shapes) == {layout.table_id(db, "users").encode(), layout.table_id(db, "tokens").encode()}
    assert mirrored("tokens") == rows_of(stack, db, "tokens", ("id", "kind"))

    # users: another exclude; tokens: its section removed; plain: a section added
    second = {f"{db}.users": {"exclude": ["password_hash", "note"]}, f"{db}.plain": {"exclude": ["secret"]}}
    caplog.clear()
    await run(second, ["INSERT INTO users VALUES (3, 'c@x', 'hash-3', NULL, 'n3')"])
    copied = {m for m in caplog.messages if "copied again into the new shape" in m}
    assert copied == {
        f"{db}.users: section changed: its rows are copied again into the new shape",
        f"{db}.tokens: section removed: its rows are copied again into the new shape",
        f"{db}.plain: section added: its rows are copied again into the new shape",
    }
    assert mirrored("users") == rows_of(stack, db, "users", ("id", "email", "created_at"))
    assert mirrored("tokens") == rows_of(stack, db, "tokens")
    assert mirrored("plain") == rows_of(stack, db, "plain", ("id",))
    assert layout.table_id(db, "tokens").encode() not in r.hgetall(layout.shapes_key)

    # the same sections: nothing copied; a RENAME into another section's name: copied again
    second[f"{db}.archive"] = {"columns": ["id", "kind"]}
    caplog.clear()
    await run(second, ["RENAME TABLE tokens TO archive", "INSERT INTO archive VALUES (5, 5, 'tok-5', 'web')"])
    assert not [m for m in caplog.messages if "copied again into the new shape" in m]
    assert mirrored("archive") == rows_of(stack, db, "archive", ("id", "kind"))
    assert mirrored("tokens") == {}
    shapes = r.hgetall(layout.shapes_key)
    assert layout.table_id(db, "archive").encode() in shapes
    assert layout.table_id(db, "tokens").encode() not in shapes
    r.close()
