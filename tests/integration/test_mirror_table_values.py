"""A section's `value` (docs/mirror.md, "Shaping"): one table's rows in the other form than
`value_mode` on real servers: copied, streamed (FULL and MINIMAL images, a key change, deletes),
verified; a restart with the table's `value` flipped empties it and copies it again in the new
form (no row op meets a row in the other form); a foreign key joining tables of two forms is
refused at start."""

from __future__ import annotations

import asyncio

import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.sink.keys import KeyLayout
from service.verify.verifier import Verifier
from tests.integration.mirror_helpers import (
    actual,
    expected,
    master_position,
    mirror_settings,
    new_database,
    settle,
    stop_replicator,
    wait_applied,
)
from tests.integration.test_mirror_shaping import write

pytestmark = pytest.mark.integration

SCHEMA = (
    "CREATE TABLE docs (id INT PRIMARY KEY, body VARCHAR(50), n BIGINT UNSIGNED, at DATETIME(3))",
    "CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(20))",
)
KEYS = {"docs": ("id",), "plain": ("id",)}


def check_forms(redis_url: str, prefix: str, db: str, docs_json: bool, global_json: bool) -> None:
    """Each table's rows are in its own form: a string per row (json) or a hash."""
    r = redis_sync.Redis.from_url(redis_url)
    lay = KeyLayout(prefix)
    for table, want in (("docs", docs_json), ("plain", global_json)):
        members = r.smembers(lay.index_key(db, table))
        assert members
        kinds = {r.type(f"{lay.table_base(db, table)}:{m.decode()}") for m in members}
        assert kinds == {b"string" if want else b"hash"}, (table, kinds)
    r.close()


def mirrored(redis_url: str, prefix: str, db: str, docs_json: bool, global_json: bool) -> dict[str, object]:
    return {
        "docs": actual(redis_url, prefix, db, ("docs",), json=docs_json)["docs"],
        "plain": actual(redis_url, prefix, db, ("plain",), json=global_json)["plain"],
    }


def source(stack: LocalStack, db: str, docs_json: bool, global_json: bool) -> dict[str, object]:
    return {
        "docs": expected(stack, db, {"docs": KEYS["docs"]}, json=docs_json)["docs"],
        "plain": expected(stack, db, {"plain": KEYS["plain"]}, json=global_json)["plain"],
    }


@pytest.mark.parametrize(("value_mode", "value"), [("hash", "json"), ("json", "hash")])
async def test_a_table_in_the_other_value_form(stack: LocalStack, value_mode: str, value: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    write(
        stack,
        db,
        [
            "INSERT INTO docs VALUES (1, 'a', 18446744073709551615, '2024-01-02 03:04:05.250'),"
            " (2, NULL, 7, NULL)",
            "INSERT INTO plain VALUES (1, 'x'), (2, NULL)",
        ],
    )
    global_json = value_mode == "json"

    async def run(docs_value: str, statements: list[list[str]]) -> None:
        docs_json = docs_value == "json"
        settings = mirror_settings(
            stack, db, prefix, value_mode=value_mode, table={f"{db}.docs": {"value": docs_value}}
        )
        rep = Replicator(settings)
        task = asyncio.create_task(rep.run())
        try:
            for batch in statements:
                image = "MINIMAL" if batch and batch[0].startswith("-- minimal") else "FULL"
                write(stack, db, batch, row_image=image)
            await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
            await settle(rep, stack)
            assert mirrored(info.redis_url, prefix, db, docs_json, global_json) == source(
                stack, db, docs_json, global_json
            )
            check_forms(info.redis_url, prefix, db, docs_json, global_json)
            assert (await Verifier(settings).run()).equal
        finally:
            await stop_replicator(rep, task)

    await run(
        value,
        [
            [
                "INSERT INTO docs VALUES (3, 'c', 3, '1999-12-31 23:59:59')",
                "UPDATE docs SET body = 'a2', n = 0 WHERE id = 1",
                "UPDATE docs SET id = 20 WHERE id = 2",
                "INSERT INTO plain VALUES (3, 'z')",
            ],
            [
                "-- minimal images: merged into the stored row in its form",
                "UPDATE docs SET body = 'minimal' WHERE id = 3",
                "UPDATE docs SET at = NULL WHERE id = 1",
                "UPDATE plain SET v = 'm' WHERE id = 2",
                "DELETE FROM docs WHERE id = 20",
            ],
        ],
    )
    # the section's value flipped (its rows were in the other form): emptied, copied again, while
    # the stream keeps changing it (MINIMAL merges must not meet a row of the other form)
    flipped = "hash" if value == "json" else "json"
    await run(
        flipped,
        [
            ["INSERT INTO docs VALUES (4, 'd', 4, NULL)"],
            ["-- minimal images", "UPDATE docs SET body = 'after' WHERE id = 1"],
        ],
    )


async def test_a_foreign_key_between_two_value_forms_is_refused(stack: LocalStack) -> None:
    db, prefix = new_database(
        stack,
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        "CREATE TABLE child (id INT PRIMARY KEY, pid INT, FOREIGN KEY fk_c (pid) REFERENCES parent (id))",
    )
    settings = mirror_settings(stack, db, prefix, table={f"{db}.child": {"value": "json"}})
    with pytest.raises(ConfigError, match=r"value: its rows are in another form than value_mode=hash") as e:
        await asyncio.wait_for(Replicator(settings).run(), 60)
    assert "\n" not in str(e.value) and "foreign key" in str(e.value)
