"""Binary keys (issue 37): a BINARY(16) primary key (a UUID) of 30,000 rows and a composite
(VARBINARY, VARCHAR) key, both over many chunks, through the first copy, a re-copy after an ALTER,
a cascade through a BINARY(16) foreign key, `verify` finding a changed, a missing and an extra key,
and `--repair`; key values that are not valid UTF-8 everywhere (MD5 bytes). Every query binds
them through service/sqltext.py, not the driver's escaping (which PyMySQL 1.2 broke for bytes)."""

from __future__ import annotations

import asyncio

import pytest
import redis as redis_sync
from typer.testing import CliRunner, Result

from service.cli import app
from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.sink.fks import ready_key
from service.sink.keys import KeyLayout
from tests.integration.mirror_helpers import (
    actual,
    expected,
    mirror_settings,
    new_database,
    replicating,
    run_sql,
    settle,
    stop_replicator,
)

pytestmark = pytest.mark.integration

SCHEMA = (
    "CREATE TABLE uu (id BINARY(16) PRIMARY KEY, name VARCHAR(20), n INT)",
    "CREATE TABLE uc (id INT PRIMARY KEY, uid BINARY(16) NULL, note VARCHAR(10), "
    "CONSTRAINT fk_uid FOREIGN KEY (uid) REFERENCES uu (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE cb (k VARBINARY(20) NOT NULL, s VARCHAR(20) NOT NULL, v INT, PRIMARY KEY (k, s))",
    # MD5 bytes: 16 random-looking bytes, most of them no valid UTF-8
    "INSERT INTO uu SELECT UNHEX(MD5(seq)), CONCAT('n', seq), seq FROM seq_1_to_30000",
    "INSERT INTO uc SELECT seq, UNHEX(MD5(seq MOD 100 + 1)), 'c' FROM seq_1_to_3000",
    "INSERT INTO cb SELECT UNHEX(MD5(seq DIV 3)), CONCAT('s', seq MOD 3, 'é:'), seq FROM seq_1_to_6000",
)
KEYS = {"uu": ("id",), "uc": ("id",), "cb": ("k", "s")}


async def _verify(stack: LocalStack, db: str, prefix: str, *extra: str) -> Result:
    info = stack.load()
    assert info is not None
    args = ["verify", "--mysql", info.mysql_url, "--redis", info.redis_url, "--tables", f"{db}.*"]
    args += ["--prefix", prefix, "--chunk-rows", "700", *extra]
    return await asyncio.to_thread(CliRunner().invoke, app, args)


def _equal(stack: LocalStack, redis_url: str, prefix: str, db: str) -> None:
    got, want = actual(redis_url, prefix, db, tuple(KEYS)), expected(stack, db, KEYS)
    for table in KEYS:
        assert len(got[table]) == len(want[table]), table
        assert got[table] == want[table], table


async def test_binary_keys_copy_recopy_cascade_verify_and_repair(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    lay = KeyLayout(prefix)
    settings = mirror_settings(stack, db, prefix)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    r = redis_sync.Redis.from_url(info.redis_url)
    try:
        await settle(rep, stack, timeout=120)
        await asyncio.to_thread(_equal, stack, info.redis_url, prefix, db)  # off the mirror's loop
        assert r.scard(lay.index_key(db, "uu")) == 30_000

        # a re-copy after an ALTER: every chunk after the first binds a binary key
        run_sql(stack, db, "ALTER TABLE uu ADD COLUMN extra INT NOT NULL DEFAULT 7")
        run_sql(stack, db, "ALTER TABLE cb ADD COLUMN extra INT NOT NULL DEFAULT 8")
        await settle(rep, stack, timeout=120)
        await asyncio.to_thread(_equal, stack, info.redis_url, prefix, db)  # off the mirror's loop
        assert (
            r.hget(lay.row_key(db, "uu", [bytes.fromhex("c4ca4238a0b923820dcc509a6f75849b")]), "extra")
            == b"7"
        )

        # a cascade through the BINARY(16) foreign key (MariaDB logs only the parent's row)
        run_sql(
            stack,
            db,
            "DELETE FROM uu WHERE id = UNHEX(MD5(1))",  # deletes its 30 children
            "UPDATE uu SET id = UNHEX(MD5('moved')) WHERE id = UNHEX(MD5(2))",  # moves 30 children
        )
        await settle(rep, stack, timeout=60)
        await asyncio.to_thread(_equal, stack, info.redis_url, prefix, db)  # off the mirror's loop
        assert r.scard(lay.index_key(db, "uc")) == 2970
        # the foreign-key sets are named in text (hex), as every other key
        sets = list(r.scan_iter(match=f"{lay.table_base(db, 'uc')}:__fk*", count=1000))
        assert sets and all(k.decode().isprintable() for k in sets)
    finally:
        await stop_replicator(rep, task)

    try:
        # keys left behind the mirror's back with names that are no text: skipped, not a crash
        r.sadd(f"{lay.table_base(db, 'uc')}:__fk:fk_uid:".encode() + b"16:\xa3\xff", "1")
        r.set(f"{lay.table_base(db, 'uu')}:".encode() + b"\xa3\xff", "junk")
        # a changed field, a missing key and an extra key
        changed = lay.row_key(db, "uu", [bytes.fromhex("eccbc87e4b5ce2fe28308fd9f2a7baf3")])  # MD5(3)
        missing = lay.row_key(db, "cb", [bytes.fromhex("c4ca4238a0b923820dcc509a6f75849b"), "s1é:"])
        extra = lay.row_key(db, "uu", [b"\xa3" * 16])
        assert r.exists(changed) and r.exists(missing)
        r.hset(changed, "name", "tampered")
        r.delete(missing)
        r.hset(extra, "id", b"\xa3" * 16)
        result = await _verify(stack, db, prefix)
        assert result.exit_code == 1, result.output
        lines = result.output.splitlines()
        assert f"differs  {changed}  (name)" in lines
        assert f"missing  {missing}" in lines
        assert f"extra    {extra}" in lines
        assert "is not a key of the mirror (not UTF-8): left alone" in result.output  # the log line

        result = await _verify(stack, db, prefix, "--repair")
        assert result.exit_code == 0, result.output
        assert "3 keys differ; 3 repaired" in result.output
        r.delete(f"{lay.table_base(db, 'uu')}:".encode() + b"\xa3\xff")
        r.delete(f"{lay.table_base(db, 'uc')}:__fk:fk_uid:".encode() + b"16:\xa3\xff")
        result = await _verify(stack, db, prefix)
        assert result.exit_code == 0 and "equal" in result.output, result.output
        await asyncio.to_thread(_equal, stack, info.redis_url, prefix, db)  # off the mirror's loop
    finally:
        r.close()


def _to_layout_1(r: redis_sync.Redis, lay: KeyLayout, db: str) -> int:
    """Rewrite a mirror's foreign-key sets as a version before layout 2 named them (the raw
    value after `__fk:`, in `__fkready` and `__fkdefs` too) and drop `__layout`."""
    moved = 0
    for key in list(r.scan_iter(match=f"{lay.prefix}:*:__fkx:*", count=1000)):
        head, _, value = key.decode().rpartition(":")
        old = head.replace(":__fkx:", ":__fk:").encode() + b":" + bytes.fromhex(value)
        r.rename(key, old)
        moved += 1
    for hash_key in [ready_key(lay), *r.scan_iter(match=f"{lay.prefix}:*:__fkdefs")]:
        for field, value in r.hgetall(hash_key).items():
            r.hdel(hash_key, field)
            r.hset(hash_key, field.replace(b":__fkx:", b":__fk:"), value)
    r.delete(lay.layout_key)
    return moved


async def test_a_mirror_of_the_older_key_layout_is_migrated_and_a_newer_one_refused(
    stack: LocalStack,
) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA[:2], SCHEMA[3].replace("30000", "300"), SCHEMA[4])
    lay = KeyLayout(prefix)
    settings = mirror_settings(stack, db, prefix)
    keys = {"uu": ("id",), "uc": ("id",)}
    r = redis_sync.Redis.from_url(info.redis_url)
    try:
        async with replicating(settings) as rep:
            await settle(rep, stack)
        assert r.get(lay.layout_key) == b"3"
        assert _to_layout_1(r, lay, db) == 100  # one set per parent value
        raw = list(r.scan_iter(match=f"{prefix}:*:__fk:*", count=1000))
        assert raw and not all(k.decode(errors="replace").isprintable() for k in raw)

        async with replicating(settings) as rep:
            await settle(rep, stack, timeout=60)
            assert r.get(lay.layout_key) == b"3"
            assert not list(r.scan_iter(match=f"{prefix}:*:__fk:*", count=1000))  # dropped
            # the next transaction copies the child table again (the applier's _fill_fk_sets);
            # a parent's delete in it takes its 30 children all the same
            run_sql(stack, db, "DELETE FROM uu WHERE id = UNHEX(MD5(5))")
            await settle(rep, stack, timeout=60)
            assert len(list(r.scan_iter(match=f"{prefix}:*:__fkx:*", count=1000))) == 99  # rebuilt
            assert all(b":__fk:" not in f for f in r.hkeys(ready_key(lay)))
            assert r.scard(lay.index_key(db, "uc")) == 2970
            run_sql(stack, db, "DELETE FROM uu WHERE id = UNHEX(MD5(6))")  # through the new sets
            await settle(rep, stack)
            assert r.scard(lay.index_key(db, "uc")) == 2940
            got = await asyncio.to_thread(actual, info.redis_url, prefix, db, tuple(keys))
            assert got == await asyncio.to_thread(expected, stack, db, keys)

        r.set(lay.layout_key, 4)  # written by a newer version: refused, nothing read
        rep = Replicator(settings)
        with pytest.raises(ConfigError, match=r"written by a newer binlog-mirror \(key layout 4"):
            await asyncio.wait_for(rep.run(), 30)
    finally:
        r.close()
