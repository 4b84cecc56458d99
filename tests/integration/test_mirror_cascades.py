"""Foreign-key cascades (issue 24, item 4): MariaDB logs only the parent's row event for ON DELETE /
ON UPDATE CASCADE and SET NULL, so the mirror applies them itself, from the sets of referencing
values it keeps with the rows (docs/mirror.md, "Foreign keys"). Every mirrored row must equal
`SELECT *` of its table, in both layouts, across a restart, with rows copied at bootstrap."""

from __future__ import annotations

import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.sink.fks import ForeignKey, ForeignKeys, fk_value, set_name, set_prefix
from service.sink.keys import KeyLayout
from tests.integration.mirror_helpers import (
    actual,
    create_schema,
    expected,
    mirror_settings,
    replicating,
    run_sql,
    settle,
    stack_redis_url,
    unique_names,
)

pytestmark = pytest.mark.integration

# parent <- child (CASCADE on id; SET NULL on code) <- grand (CASCADE); parent <- side (SET NULL on
# id, CASCADE on a string key); emp -> emp (a self-reference, CASCADE on delete and update)
SCHEMA = [
    "CREATE TABLE parent (id INT PRIMARY KEY, code INT NOT NULL UNIQUE, tag VARCHAR(10) NOT NULL UNIQUE, "
    "name VARCHAR(20))",
    "CREATE TABLE child (id INT PRIMARY KEY, pid INT NULL, pcode INT NULL, note VARCHAR(20), "
    "CONSTRAINT c_pid FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE, "
    "CONSTRAINT c_code FOREIGN KEY (pcode) REFERENCES parent (code) ON DELETE SET NULL ON UPDATE SET NULL)",
    "CREATE TABLE grand (id INT PRIMARY KEY, cid INT NOT NULL, v VARCHAR(20), "
    "CONSTRAINT g_cid FOREIGN KEY (cid) REFERENCES child (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE side (id INT PRIMARY KEY, pid INT NULL, ptag VARCHAR(10) NULL, "
    "CONSTRAINT s_pid FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE SET NULL ON UPDATE SET NULL, "
    "CONSTRAINT s_tag FOREIGN KEY (ptag) REFERENCES parent (tag) ON DELETE SET NULL ON UPDATE CASCADE)",
    "CREATE TABLE emp (id INT PRIMARY KEY, boss INT NULL, name VARCHAR(20), "
    "CONSTRAINT e_boss FOREIGN KEY (boss) REFERENCES emp (id) ON DELETE CASCADE ON UPDATE CASCADE)",
]
KEYS = {"parent": ("id",), "child": ("id",), "grand": ("id",), "side": ("id",), "emp": ("id",)}


def _fill(stack: LocalStack, db: str, base: int) -> None:
    """10 parents, 3 children each, 2 grandchildren per child, 2 side rows per parent, and a
    chain of 6 employees; ids from `base`."""
    b = base
    stmts = []
    for p in range(b, b + 10):
        stmts.append(f"INSERT INTO parent VALUES ({p}, {p + 1000}, 't{p}', 'p{p}')")
        for k in range(3):
            c = p * 10 + k
            code = f"{p + 1000}" if k != 2 else "NULL"
            stmts.append(f"INSERT INTO child VALUES ({c}, {p}, {code}, 'c{c}')")
            for g in range(2):
                stmts.append(f"INSERT INTO grand VALUES ({c * 10 + g}, {c}, 'g')")
        stmts.append(f"INSERT INTO side VALUES ({p * 10}, {p}, 't{p}'), ({p * 10 + 1}, {p}, NULL)")
    stmts.append(f"INSERT INTO emp VALUES ({b}, NULL, 'e')")
    stmts += [f"INSERT INTO emp VALUES ({b + k}, {b + k - 1}, 'e')" for k in range(1, 6)]
    run_sql(stack, db, *stmts)


def _workload(stack: LocalStack, db: str, b: int) -> None:
    run_sql(
        stack,
        db,
        f"DELETE FROM parent WHERE id IN ({b}, {b + 1})",  # children, grandchildren; side -> NULL
        f"DELETE FROM parent WHERE id = {b + 2}",
        f"UPDATE parent SET id = {b + 500} WHERE id = {b + 3}",  # child.pid follows; side.pid NULL
        f"UPDATE parent SET code = {b + 9000}, tag = 'n{b}' WHERE id = {b + 4}",  # pcode NULL; ptag
        f"DELETE FROM child WHERE id = {(b + 5) * 10}",  # its grandchildren
        f"UPDATE child SET id = {(b + 6) * 10 + 9} WHERE id = {(b + 6) * 10}",  # grand.cid follows
        f"INSERT INTO child VALUES ({(b + 7) * 10 + 5}, {b + 7}, {b + 1007}, 'new')",
        f"INSERT INTO grand VALUES ({(b + 7) * 100 + 55}, {(b + 7) * 10 + 5}, 'new')",
        f"UPDATE child SET pid = {b + 8} WHERE id = {(b + 7) * 10 + 1}",  # moves to another parent
        f"DELETE FROM parent WHERE id = {b + 8}",  # ... so it goes with that one
        f"DELETE FROM emp WHERE id = {b + 4}",  # and b+5 under it (InnoDB refuses a self-referencing
        # ON UPDATE CASCADE that changes rows: no key update here)
    )


def _check(
    stack: LocalStack,
    redis_url: str,
    prefix: str,
    db: str,
    json: bool,
    keys: dict[str, tuple[str, ...]] = KEYS,
) -> None:
    want = expected(stack, db, keys, json=json)
    got = actual(redis_url, prefix, db, tuple(keys), json=json)
    for table in keys:
        assert got[table] == want[table], table


def _sets_exact(stack: LocalStack, redis_url: str, prefix: str, db: str, json: bool) -> None:
    """Every child row is in the set of each of its foreign-key values (no row missed)."""
    lay = KeyLayout(prefix)
    conn = stack.root_connection(db)
    r = redis_sync.Redis.from_url(redis_url)
    try:
        with conn.cursor() as cur:
            fks = [
                ForeignKey("c_pid", db, "child", ("pid",), db, "parent", ("id",), "CASCADE", "CASCADE"),
                ForeignKey("g_cid", db, "grand", ("cid",), db, "child", ("id",), "CASCADE", "CASCADE"),
                ForeignKey("s_tag", db, "side", ("ptag",), db, "parent", ("tag",), "CASCADE", "SET NULL"),
            ]
            for fk in ForeignKeys(tuple(fks)).keys:
                cur.execute(f"SELECT id, {fk.columns[0]} FROM {fk.table}")
                for rid, value in cur.fetchall():
                    enc = fk_value({"v": value}, ("v",), json)
                    if enc is not None:
                        assert r.sismember(set_name(set_prefix(lay, fk), enc), str(rid)), (fk.name, rid)
    finally:
        conn.close()
        r.close()


@pytest.mark.parametrize("layout", ["hash", "json"])
async def test_cascades_mirrored(stack: LocalStack, layout: str) -> None:
    db, prefix = unique_names()
    json = layout == "json"
    create_schema(stack, db)
    run_sql(stack, db, *SCHEMA)
    _fill(stack, db, 1)  # rows the bootstrap copies
    settings = mirror_settings(stack, db, prefix, value_mode=layout)
    redis_url = stack_redis_url(stack)

    async with replicating(settings) as rep:
        await settle(rep, stack, timeout=60)
        _check(stack, redis_url, prefix, db, json)
        _sets_exact(stack, redis_url, prefix, db, json)
        _workload(stack, db, 1)  # cascades into rows copied at bootstrap
        _fill(stack, db, 20)  # rows the stream wrote
        _workload(stack, db, 20)
        await settle(rep, stack, timeout=60)
        _check(stack, redis_url, prefix, db, json)
        _sets_exact(stack, redis_url, prefix, db, json)

    _fill(stack, db, 40)  # written while the mirror is down
    async with replicating(settings) as rep:  # the sets survive the restart
        await settle(rep, stack, timeout=60)
        _workload(stack, db, 40)
        await settle(rep, stack, timeout=60)
        _check(stack, redis_url, prefix, db, json)
        _sets_exact(stack, redis_url, prefix, db, json)

    # A mirror whose rows were copied without their sets (by `binlog-mirror snapshot`, or before
    # cascades were kept): the next start copies the child tables again, which fills them
    r = redis_sync.Redis.from_url(redis_url)
    try:
        gone = [k for k in r.scan_iter(match=f"{prefix}:*__fk*", count=1000)]
        assert gone and r.delete(*gone) == len(gone)
    finally:
        r.close()
    _fill(stack, db, 60)
    async with replicating(settings) as rep:
        await settle(rep, stack, timeout=60)
        _workload(stack, db, 60)
        run_sql(stack, db, "DELETE FROM parent WHERE id = 25", "DELETE FROM emp WHERE id = 1")
        await settle(rep, stack, timeout=60)
        _check(stack, redis_url, prefix, db, json)
        _sets_exact(stack, redis_url, prefix, db, json)


def _fk_keys(redis_url: str, prefix: str, db: str, table: str) -> list[bytes]:
    r = redis_sync.Redis.from_url(redis_url)
    try:
        return list(r.scan_iter(match=f"{KeyLayout(prefix).table_base(db, table)}:__fkx:*", count=1000))
    finally:
        r.close()


async def test_cascade_sets_follow_ddl(stack: LocalStack) -> None:
    """A constraint added by ALTER is read again and its table's copy fills its sets; TRUNCATE,
    RENAME and DROP take a table's sets with its rows; a cascade the script cannot apply (ON
    UPDATE CASCADE into the child's primary key) re-copies the child instead."""
    db, prefix = unique_names()
    create_schema(stack, db)
    run_sql(
        stack,
        db,
        *SCHEMA,
        "CREATE TABLE kid (pid INT NOT NULL, seq INT NOT NULL, v VARCHAR(10), PRIMARY KEY (pid, seq), "
        "CONSTRAINT k_pid FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE)",
        "CREATE TABLE late (id INT PRIMARY KEY, pid INT NULL)",
    )
    _fill(stack, db, 1)
    run_sql(stack, db, *[f"INSERT INTO kid VALUES ({p}, {s}, 'k') " for p in range(1, 11) for s in (1, 2)])
    keys = {**KEYS, "kid": ("pid", "seq")}
    redis_url = stack_redis_url(stack)
    async with replicating(mirror_settings(stack, db, prefix)) as rep:
        await settle(rep, stack, timeout=60)
        run_sql(
            stack,
            db,
            "INSERT INTO late VALUES (1, 6), (2, 6), (3, 7), (4, NULL)",
            "ALTER TABLE late ADD CONSTRAINT l_pid FOREIGN KEY (pid) REFERENCES parent (id) "
            "ON DELETE CASCADE",
        )
        await settle(rep, stack, timeout=60)
        run_sql(
            stack,
            db,
            "UPDATE parent SET id = 99 WHERE id = 2",  # kid's key follows: kid is copied again
            "DELETE FROM parent WHERE id = 6",  # late 1, 2 go (the constraint the ALTER added)
        )
        await settle(rep, stack, timeout=60)
        _check(stack, redis_url, prefix, db, False, {**keys, "late": ("id",)})

        assert _fk_keys(redis_url, prefix, db, "grand")
        run_sql(stack, db, "TRUNCATE TABLE grand")
        await settle(rep, stack, timeout=60)
        assert not _fk_keys(redis_url, prefix, db, "grand")
        run_sql(
            stack, db, "INSERT INTO grand VALUES (1, 31, 'x'), (2, 41, 'y')", "RENAME TABLE late TO late2"
        )
        await settle(rep, stack, timeout=60)
        assert not _fk_keys(redis_url, prefix, db, "late")
        assert _fk_keys(redis_url, prefix, db, "late2")
        run_sql(stack, db, "DELETE FROM parent WHERE id IN (3, 7)")  # child 31, grand 1, late2 3
        await settle(rep, stack, timeout=60)
        _check(stack, redis_url, prefix, db, False, {**keys, "late2": ("id",)})
        run_sql(stack, db, "DROP TABLE late2")
        await settle(rep, stack, timeout=60)
        assert not _fk_keys(redis_url, prefix, db, "late2")
