"""Key templates and index keys on a real Redis Cluster (docs/mirror.md, "Redis Cluster"): a table
whose templates share the literal hash tag `{users}` keeps its rows, unique, set and zset entries
exactly where the single-node rules put them (the expected key space is test_mirror_derived's,
from `SELECT *`), and every key of the table (the application's and the mirror's own) is in the
tag's slot; through inserts, updates that move entries, deletes, a restart, TRUNCATE and a change
of the tag (the old group's keys removed, the table copied into the new one)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.shaping import Shapes
from service.sink.cluster import cluster_layout
from service.sink.keys import group_layout
from tests.integration.mirror_helpers import mirror_settings, new_database, settle, stop_replicator, until
from tests.integration.test_mirror_derived import (
    INSERTS,
    USERS,
    counts_shown,
    expected,
    expected_counts,
    section,
)
from tests.integration.test_mirror_shaping import write

pytestmark = pytest.mark.integration


def _client(cluster: LocalStack) -> RedisCluster:
    info = cluster.load()
    assert info is not None
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in info.cluster_ports])


def _actual(rc: RedisCluster, app: str) -> dict[str, Any]:
    """Every key under `{app}:` on every master, by type (test_mirror_derived's `actual`)."""
    out: dict[str, Any] = {}
    for k in rc.scan_iter(match=f"{app}:*", count=1000):
        kind, key = rc.type(k), k.decode()
        if kind == b"hash":
            out[key] = rc.hgetall(k)
        elif kind == b"string":
            out[key] = rc.get(k)
        elif kind == b"set":
            out[key] = rc.smembers(k)
        elif kind == b"zset":
            out[key] = dict(rc.zrange(k, 0, -1, withscores=True))
        else:
            out[key] = kind
    return out


async def _run(settings: Any, stack: LocalStack, check: Any) -> None:
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        await check(rep)
    finally:
        await stop_replicator(rep, task)


async def test_a_tagged_table_keeps_every_entry_in_its_slot(
    stack: LocalStack, redis_cluster: LocalStack
) -> None:
    cinfo = stack.load(), redis_cluster.load()
    assert cinfo[1] is not None
    db, prefix = new_database(stack, USERS)
    app = f"app_{db}"
    tagged = f"{app}:{{users}}"  # what the templates render before the first placeholder
    write(stack, db, INSERTS)  # copied by the bootstrap (a resync, in the group)
    settings = mirror_settings(
        stack,
        db,
        prefix,
        redis=cinfo[1].redis_url,
        table={f"{db}.users": section(f"{app}:{{{{users}}}}")},
        changelog_maxlen=1000,
    )
    rc = _client(redis_cluster)
    group = group_layout(prefix, db, "users", "users")

    def in_one_slot() -> None:
        keys = [k.decode() for k in rc.scan_iter(match=f"{app}:*", count=1000)]
        keys += [k.decode() for k in rc.scan_iter(match=f"{group.prefix}:*", count=1000)]
        assert group.derived_key(db, "users") in keys and group.index_key(db, "users") in keys
        assert {key_slot(k.encode()) for k in keys} == {key_slot(b"{users}")}, keys
        # the mirror's rows hang under its prefix, not in the application's key space
        assert not list(rc.scan_iter(match=f"{prefix}:{{{db}:users}}:*", count=1000))

    async def first_run(rep: Replicator) -> None:
        assert _actual(rc, app) == expected(stack, db, tagged) != {}
        write(
            stack,
            db,
            [
                "INSERT INTO users VALUES (1, 4, 'd@x', 'new', 'h5', '2025-01-01 00:00:00', NULL)",
                "UPDATE users SET status = 'blocked' WHERE tenant_id = 1 AND id = 1",  # set entry moves
                "UPDATE users SET created_at = '2020-02-29 12:00:00.5' WHERE tenant_id = 1 AND id = 2",
                "UPDATE users SET tenant_id = 3 WHERE tenant_id = 2 AND id = 1",  # the row key moves
                "UPDATE users SET email = 'tmp@x' WHERE tenant_id = 1 AND id = 1",  # a swap of e-mails
                "UPDATE users SET email = 'a@x' WHERE tenant_id = 1 AND id = 2",
                "UPDATE users SET email = 'b@x' WHERE tenant_id = 1 AND id = 1",
                "DELETE FROM users WHERE tenant_id = 1 AND id = 3",
            ],
        )
        write(
            stack, db, ["UPDATE users SET status = NULL WHERE tenant_id = 1 AND id = 1"], row_image="MINIMAL"
        )
        await settle(rep, stack)
        assert _actual(rc, app) == expected(stack, db, tagged)
        in_one_slot()
        # /tables' entry counts, read in the table's slot group
        assert await counts_shown(rep) == expected_counts(stack, db)
        # the change log (global slot) holds the shaped images: no excluded column
        logged = [e[1] for e in rc.xrange(cluster_layout(prefix).changes_key)]
        assert logged and all(b"password_hash" not in e[b"before"] + e[b"after"] for e in logged)
        assert any(b'"created"' in e[b"after"] for e in logged)

    await _run(settings, stack, first_run)
    assert rc.hget(cluster_layout(prefix).prefix + ":__groups", f"{db}:users") == b"users"
    # the group records the shape its rows were written in: a start with the same section copies nothing
    fingerprint = Shapes(settings.table_sections()).fingerprint(db, "users")
    assert rc.hget(group.shapes_key, f"{db}:users") == fingerprint.encode()

    # a restart resumes from its checkpoint; then TRUNCATE and new rows
    write(stack, db, ["UPDATE users SET status = 'late' WHERE tenant_id = 1 AND id = 1"])

    async def second_run(rep: Replicator) -> None:
        assert _actual(rc, app) == expected(stack, db, tagged)
        write(stack, db, ["TRUNCATE TABLE users"])
        await settle(rep, stack)
        assert _actual(rc, app) == {} and not rc.exists(group.derived_key(db, "users"))
        assert not rc.exists(group.derived_counts_key(db, "users"))
        write(stack, db, INSERTS)
        await settle(rep, stack)
        assert _actual(rc, app) == expected(stack, db, tagged)
        in_one_slot()

    await _run(settings, stack, second_run)

    # the tag changes: no call can move keys between slots, so the old group's keys are removed
    # there and the table is copied into the new group. Found by `__groups` alone, as after a
    # crash between a first copy's group calls and its global call (not in `__tables`, `__heads`):
    glob = cluster_layout(prefix)
    rc.srem(glob.tables_key, f"{db}:users")
    rc.hdel(f"{glob.prefix}:__heads", f"{db}:users")
    moved = mirror_settings(
        stack, db, prefix, redis=cinfo[1].redis_url, table={f"{db}.users": section(f"{app}:{{{{people}}}}")}
    )
    retagged = group_layout(prefix, db, "users", "people")

    async def third_run(rep: Replicator) -> None:
        want = expected(stack, db, f"{app}:{{people}}")
        await until("the copy into the new group", lambda: _actual(rc, app) == want != {})
        await settle(rep, stack)
        left = [k.decode() for k in rc.scan_iter(match=f"{group.prefix}:*", count=1000)]
        assert not [k for k in left if not k.rsplit(":", 1)[-1].startswith("__")], left  # no row
        assert not [k for k in left if k.endswith(("__keys", "__derived", "__derivedcounts"))], left
        assert rc.exists(retagged.derived_key(db, "users"))
        assert await counts_shown(rep) == expected_counts(stack, db)

    await _run(moved, stack, third_run)
    assert rc.hget(cluster_layout(prefix).prefix + ":__groups", f"{db}:users") == b"people"
    rc.close()


async def test_sections_without_templates_and_two_tables_sharing_a_tag(
    stack: LocalStack, redis_cluster: LocalStack
) -> None:
    """A section without templates keeps the table's `{schema:table}` group (only its fields
    change); given templates with a tag at the next start, the table leaves that group (no row
    left) for the tag's slot, which another table's group shares, each with its own keys."""
    cinfo = redis_cluster.load()
    assert cinfo is not None
    db, prefix = new_database(stack, USERS, "CREATE TABLE admins LIKE users")
    app = f"app_{db}"
    write(stack, db, [*INSERTS, "INSERT INTO admins SELECT * FROM users"])
    rc = _client(redis_cluster)
    plain = group_layout(prefix, db, "users")
    first = mirror_settings(
        stack, db, prefix, redis=cinfo.redis_url, table={f"{db}.users": {"exclude": ["password_hash"]}}
    )

    async def fields_only(rep: Replicator) -> None:
        row = rc.hgetall(plain.row_key(db, "users", [1, 1]))
        assert row[b"email"] == b"a@x" and b"password_hash" not in row
        assert not list(rc.scan_iter(match=f"{app}:*", count=1000))

    await _run(first, stack, fields_only)
    tables = {
        f"{db}.users": section(f"{app}:{{{{shared}}}}"),
        f"{db}.admins": section(f"{app}:{{{{shared}}}}:adm"),
    }
    second = mirror_settings(stack, db, prefix, redis=cinfo.redis_url, table=tables)
    users, admins = (group_layout(prefix, db, t, "shared") for t in ("users", "admins"))

    async def tagged(rep: Replicator) -> None:
        want = {
            **expected(stack, db, f"{app}:{{shared}}"),
            **expected(stack, db, f"{app}:{{shared}}:adm"),  # admins holds the same rows
        }
        await until("both tables in the shared slot", lambda: _actual(rc, app) == want)
        await settle(rep, stack)
        left = [k.decode() for k in rc.scan_iter(match=f"{plain.prefix}:*", count=1000)]
        assert not [k for k in left if not k.rsplit(":", 1)[-1].startswith("__")], left  # no row
        keys = [*want, users.derived_key(db, "users"), admins.derived_key(db, "admins")]
        keys += [users.checkpoint_key, admins.checkpoint_key, users.row_key(db, "users", [1, 1])]
        assert all(rc.exists(k) for k in keys[-5:])
        assert {key_slot(k.encode()) for k in keys} == {key_slot(b"shared")}
        assert users.checkpoint_key != admins.checkpoint_key
        # a RENAME (on a cluster a DROP and a copy): to a name no section shapes, its own group
        write(stack, db, ["RENAME TABLE admins TO staff"])
        only_users = expected(stack, db, f"{app}:{{shared}}")
        await until("the renamed table's entries gone", lambda: _actual(rc, app) == only_users)
        await settle(rep, stack)
        staff = group_layout(prefix, db, "staff")
        assert rc.hgetall(staff.row_key(db, "staff", [1, 1]))[b"password_hash"] == b"h1"
        assert not rc.exists(admins.derived_key(db, "admins"), admins.index_key(db, "admins"))

    await _run(second, stack, tagged)
    rc.close()
