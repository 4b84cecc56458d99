"""Documents on a real Redis Cluster (docs/mirror.md, "Documents" and "Redis Cluster"): the tables
of a document whose key carries the hash tag `{orders}` share one slot group, so a transaction's
changes of orders, lines and options, the FK cascades between them and the documents they change
are one script call. Every document equals the one built from `SELECT`s (test_mirror_documents'
helper, not the sink's code) and every key is in the tag's slot; through the first copy, a
workload with children before parents and cascades, a restart, and a change of the tag (the old
group's keys removed there, the tables copied into the new group)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.crc import key_slot

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.sink.cluster import cluster_layout
from service.sink.keys import placed_layout
from tests.integration.mirror_helpers import mirror_settings, new_database, settle, until
from tests.integration.test_mirror_cluster_shaped import _actual, _client, _run
from tests.integration.test_mirror_documents import SCHEMA, Workload, document, expected, held

pytestmark = pytest.mark.integration


async def test_documents_on_a_cluster_keep_one_slot_and_follow_the_source(
    stack: LocalStack, redis_cluster: LocalStack
) -> None:
    cinfo = redis_cluster.load()
    assert cinfo is not None
    db, prefix = new_database(stack, *SCHEMA)
    app = f"app{prefix}"
    rc = _client(redis_cluster)
    glob = cluster_layout(prefix)
    tables = ("orders", "order_lines", "line_options")

    def settings(tag: str) -> Any:
        doc = document(db, f"{app}:{{{{{tag}}}}}", "json")  # key "app…:{{tag}}:order:{id}"
        return mirror_settings(
            stack, db, prefix, redis=cinfo.redis_url, document=doc, chunk_rows=3, changelog_maxlen=1000
        )

    def in_one_slot(tag: str) -> None:
        group = placed_layout(prefix, db, "orders", "}" + tag)
        keys = [k.decode() for k in rc.scan_iter(match=f"{app}:*", count=1000)]
        keys += [k.decode() for k in rc.scan_iter(match=f"{group.prefix}:*", count=1000)]
        assert group.checkpoint_key in keys, [k for k in keys if "__docs" in k][:20]
        assert any(k.startswith(group.table_base(db, "orders") + ":") for k in keys)  # its rows
        assert {key_slot(k.encode()) for k in keys} == {key_slot(tag.encode())}, keys
        # the foreign-key sets are in the group (none in the global slot)
        assert any(":__fkx:" in k for k in keys)
        assert not [k for k in rc.scan_iter(match=f"{glob.prefix}:*", count=1000) if b"__fk" in k]
        for t in tables:  # no table has a group of its own
            own = placed_layout(prefix, db, t, None)
            assert not list(rc.scan_iter(match=f"{own.prefix}:*", count=100)), t

    wl = Workload(stack, db, seed=11)
    for _ in range(15):  # rows before the first start: the first copy builds their documents
        wl.step()
    tagged = f"{app}:{{orders}}"  # what the key renders before its placeholder

    async def first_run(rep: Replicator) -> None:
        assert _actual(rc, tagged) == expected(stack, db, tagged, "json") != {}
        for i in range(100):
            wl.step()  # inserts, reparenting, held children, cascades, key changes
            if i % 10 == 0:
                await asyncio.sleep(0.05)
        await settle(rep, stack)
        assert _actual(rc, tagged) == expected(stack, db, tagged, "json")
        in_one_slot("orders")
        shown = {t.table: t for t in (await rep.counted_status()).tables}
        assert [(d.field, d.held) for d in shown["order_lines"].documents] == [("lines", held(stack, db))]
        # one head for the group of the three tables
        heads = rc.hgetall(f"{glob.prefix}:__heads")
        assert b"__docs:orders" in heads and not [h for h in heads if db.encode() in h]

    try:
        await _run(settings("orders"), stack, first_run)
        assert held(stack, db) > 0
        for t in tables:
            assert rc.hget(f"{glob.prefix}:__groups", f"{db}:{t}") == b"}orders"

        # a restart resumes from the group's checkpoint: changes made while it was down included
        for _ in range(10):
            wl.step()

        async def second_run(rep: Replicator) -> None:
            for _ in range(20):
                wl.step()
            await settle(rep, stack)
            assert _actual(rc, tagged) == expected(stack, db, tagged, "json")

        await _run(settings("orders"), stack, second_run)

        # the tag changes: the old group's keys are removed there, the tables copied into the new
        old = placed_layout(prefix, db, "orders", "}orders")
        retagged = f"{app}:{{shop}}"

        async def third_run(rep: Replicator) -> None:
            want = expected(stack, db, retagged, "json")
            await until("the copy into the new group", lambda: _actual(rc, retagged) == want != {})
            await settle(rep, stack)
            assert _actual(rc, tagged) == {}  # no document at the old keys
            left = [k.decode() for k in rc.scan_iter(match=f"{old.prefix}:*", count=1000)]
            assert not [k for k in left if k.startswith(tuple(old.table_base(db, t) for t in tables))], left
            in_one_slot("shop")

        await _run(settings("shop"), stack, third_run)
    finally:
        wl.close()
        rc.close()
