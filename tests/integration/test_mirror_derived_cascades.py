"""Foreign-key cascades into shaped tables (docs/mirror.md, "Foreign keys" and "Key templates and
index keys") on real servers: MariaDB logs only the parent's row event, the mirror applies ON
DELETE/UPDATE CASCADE and SET NULL itself, and the children's copies at their key templates, set
and zset entries and entry counts follow. The expected key space is built here from `SELECT *`
with the documented rendering rules, not with the sink's code."""

from __future__ import annotations

import asyncio
from typing import Any

import pymysql
import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
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
from tests.integration.test_mirror_derived import actual
from tests.integration.test_mirror_shaping import write

pytestmark = pytest.mark.integration

# parent <- post (CASCADE on id; SET NULL on code) <- comment (CASCADE)
SCHEMA = [
    "CREATE TABLE parent (id INT PRIMARY KEY, code INT NOT NULL UNIQUE, name VARCHAR(20))",
    "CREATE TABLE post (id INT PRIMARY KEY, pid INT NULL, pcode INT NULL, title VARCHAR(20), "
    "CONSTRAINT p_pid FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE, "
    "CONSTRAINT p_code FOREIGN KEY (pcode) REFERENCES parent (code) ON DELETE SET NULL ON UPDATE SET NULL)",
    "CREATE TABLE comment (id INT PRIMARY KEY, post_id INT NOT NULL, body VARCHAR(20), "
    "CONSTRAINT c_post FOREIGN KEY (post_id) REFERENCES post (id) ON DELETE CASCADE ON UPDATE CASCADE)",
]


def sections(app: str) -> dict[str, Any]:
    return {
        "parent": {"key": f"{app}:parent:{{id}}"},
        "post": {
            "key": f"{app}:post:{{id}}",
            "index": [
                {"kind": "set", "key": f"{app}:posts-of:{{pid}}"},
                {"kind": "set", "key": f"{app}:posts-by-code:{{pcode}}"},
                {"kind": "zset", "key": f"{app}:posts-by-id:{{pid}}", "score": "id"},
            ],
        },
        "comment": {
            "key": f"{app}:comment:{{id}}",
            "index": [{"kind": "set", "key": f"{app}:comments-of:{{post_id}}"}],
        },
    }


def rows(stack: LocalStack, db: str, table: str) -> list[dict[str, Any]]:
    conn = root(stack, db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {table}")
        out = list(cur.fetchall())
    conn.close()
    return out


def expected(stack: LocalStack, db: str, app: str) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Every key under `{app}:` (INT and VARCHAR values without `:` or `\\`: a key part is the
    value's text) and each table's entry counts (row copies, then each index), from the rows."""
    out: dict[str, Any] = {}
    counts: dict[str, list[int]] = {}

    def copy(table: str, r: dict[str, Any]) -> str:
        key = f"{app}:{table}:{r['id']}"
        out[key] = {c.encode(): str(v).encode() for c, v in r.items() if v is not None}
        return key

    def add(kind: str, key: str, member: str, score: float = 0.0) -> None:
        if kind == "s":
            out.setdefault(key, set()).add(member.encode())
        else:
            out.setdefault(key, {})[member.encode()] = score

    for r in (found := rows(stack, db, "parent")):
        copy("parent", r)
    counts["parent"] = [len(found)]
    posts = rows(stack, db, "post")
    for r in posts:
        key = copy("post", r)
        if r["pid"] is not None:
            add("s", f"{app}:posts-of:{r['pid']}", key)
            add("z", f"{app}:posts-by-id:{r['pid']}", key, float(r["id"]))
        if r["pcode"] is not None:
            add("s", f"{app}:posts-by-code:{r['pcode']}", key)
    with_pid = sum(r["pid"] is not None for r in posts)
    counts["post"] = [len(posts), with_pid, sum(r["pcode"] is not None for r in posts), with_pid]
    comments = rows(stack, db, "comment")
    for r in comments:
        add("s", f"{app}:comments-of:{r['post_id']}", copy("comment", r))
    counts["comment"] = [len(comments), len(comments)]
    return out, counts


async def counts_shown(rep: Replicator) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t in (await rep.counted_status()).tables:
        if t.shape is not None and t.shape.entries is not None:
            assert t.shape.copies is not None
            out[t.table] = [t.shape.copies, *t.shape.entries]
    return out


def fill(stack: LocalStack, db: str, base: int) -> None:
    """4 parents (codes base+100...), 3 posts each (two coded to their parent's code, the third
    to the previous parent's, none for the first), 2 comments per post."""
    stmts = []
    for p in range(base, base + 4):
        stmts.append(f"INSERT INTO parent VALUES ({p}, {p + 100}, 'p{p}')")
    for p in range(base, base + 4):
        for k in range(3):
            post = p * 10 + k
            code = p + 100 if k < 2 else (p + 99 if p > base else "NULL")
            stmts.append(f"INSERT INTO post VALUES ({post}, {p}, {code}, 't{post}')")
            stmts += [f"INSERT INTO comment VALUES ({post * 10 + c}, {post}, 'c')" for c in range(2)]
    write(stack, db, stmts)


def workload(stack: LocalStack, db: str, b: int) -> None:
    for stmt in (
        f"DELETE FROM parent WHERE id = {b}",  # its posts, their comments; b+1's third post: pcode NULL
        f"UPDATE parent SET id = {b + 50} WHERE id = {b + 1}",  # posts.pid follows: entries move
        f"UPDATE parent SET code = {b + 900} WHERE id = {b + 2}",  # posts.pcode: NULL, entries go
        f"DELETE FROM post WHERE id = {(b + 3) * 10}",  # a post: its comments go
        f"UPDATE post SET id = {(b + 3) * 10 + 7} WHERE id = {(b + 3) * 10 + 1}",  # comments follow
    ):
        write(stack, db, [stmt])


async def test_cascades_keep_the_children_s_templates_and_indexes(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    app = f"app_{db}"
    fill(stack, db, 1)  # copied by the bootstrap (the resync path fills the sets)
    table = {f"{db}.{t}": s for t, s in sections(app).items()}
    settings = mirror_settings(stack, db, prefix, table=table)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())

    async def check() -> None:
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)
        want, counts = expected(stack, db, app)
        assert actual(info.redis_url, app) == want
        assert await counts_shown(rep) == counts

    try:
        await settle(rep, stack)
        await check()
        workload(stack, db, 1)  # on the rows the bootstrap copied
        await check()
        fill(stack, db, 100)  # rows the stream wrote
        workload(stack, db, 100)
        await check()
        # a parent key update cascading two levels in one transaction, and a delete after it
        write(stack, db, ["UPDATE parent SET id = 777 WHERE id = 103", "DELETE FROM parent WHERE id = 777"])
        await check()
        assert (await Verifier(settings).run()).equal
    finally:
        await stop_replicator(rep, task)
    # the mirror's own rows are as the source's too (no child left behind by a cascade)
    r = redis_sync.Redis.from_url(info.redis_url)
    lay = KeyLayout(prefix)
    for t in ("post", "comment"):
        assert r.scard(lay.index_key(db, t)) == len(rows(stack, db, t))
    r.close()
