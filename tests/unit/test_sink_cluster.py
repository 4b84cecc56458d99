"""Redis Cluster without a server: the URL form, the slot groups' key layout and the split of a
batch by table (service/sink/cluster.py)."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import ConfigError
from service.settings import RedisUrl
from service.sink.client import cluster_client, is_cluster_url, redis_client
from service.sink.cluster import ClusterMirror, _without_renames, cluster_layout
from service.sink.keys import group_layout
from service.sink.plan import ActionKind, TableAction
from service.transactions import Transaction


def test_cluster_url_parses_and_redacts() -> None:
    url = RedisUrl.parse("redis+cluster://:s3cret@10.0.0.1:7000,10.0.0.2:7001")
    assert url.cluster
    assert url.redacted() == "redis+cluster://***@10.0.0.1:7000,10.0.0.2:7001"
    assert "s3cret" not in str(url)
    assert not RedisUrl.parse("redis://h:6379/0").cluster
    for bad in ("redis+cluster://h", "redis+cluster://h:1,h2", "redis+cluster://h:99999"):
        with pytest.raises(ValueError, match="host:port"):
            RedisUrl.parse(bad)


def test_only_cluster_aware_callers_get_a_cluster_client() -> None:
    url = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
    assert is_cluster_url(url) and not is_cluster_url("redis://h:1/0")
    with pytest.raises(ConfigError, match="does not support a Redis Cluster"):
        redis_client(url)
    client = cluster_client(url)
    assert [n.port for n in client.startup_nodes] == [7000, 7001]


@pytest.mark.parametrize("schema,table", [("shop", "items"), ("a:b", "__keys"), ("}x", "t"), ("s", "{t}")])
def test_every_key_of_a_table_is_in_one_slot(schema: str, table: str) -> None:
    g = group_layout("mirror", schema, table)
    keys = [g.row_key(schema, table, [7]), g.row_key(schema, table, ["a:b"]), g.index_key(schema, table)]
    keys += [g.touched_key(schema, table), g.stale_key(schema, table), g.partial_key(schema, table)]
    keys += [g.checkpoint_key, g.progress_key, g.table_ops_key, g.resync_key, g.settle_key, g.lease_key]
    assert len({key_slot(k.encode()) for k in keys}) == 1, keys
    assert len(set(keys)) == len(keys)


def test_layouts() -> None:
    g = group_layout("mirror", "shop", "items")
    assert g.row_key("shop", "items", [7]) == "mirror:{shop:items}:7"
    assert g.index_key("shop", "items") == "mirror:{shop:items}:__keys"
    assert g.checkpoint_key == "mirror:{shop:items}:__checkpoint"
    glob = cluster_layout("mirror")
    keys = [glob.lease_key, glob.checkpoint_key, glob.seq_key, glob.changes_key, glob.tables_key]
    assert glob.changes_key == "{mirror}:__changes"
    assert len({key_slot(k.encode()) for k in keys}) == 1


def test_a_rename_is_a_drop_and_a_resync() -> None:
    out = _without_renames(
        [
            TableAction(ActionKind.RENAME, "db", "a", "db", "tmp", "RENAME"),
            TableAction(ActionKind.TRUNCATE, "db", "b"),
        ]
    )
    assert [(a.kind, a.table) for a in out] == [
        (ActionKind.DROP, "a"),
        (ActionKind.RESYNC, "tmp"),
        (ActionKind.TRUNCATE, "b"),
    ]


def _change(table: str, i: int) -> RowChange:
    return RowChange(Op.INSERT, "db", table, None, {"id": i}, EventSpan("f.000001", 4, 9), 1, 1)


def test_a_transaction_splits_by_table_in_order() -> None:
    mirror = ClusterMirror(
        cluster_client("redis+cluster://127.0.0.1:7000"),
        "m",
        lambda s, t: None if t == "nokey" else ("id",),
    )
    changes = (_change("a", 1), _change("b", 2), _change("nokey", 3), _change("a", 4))
    end = Checkpoint(BinlogPosition("f.000001", 100), "", 0)
    txn = Transaction(changes, (), None, 1, end, frozenset({3}))
    parts = {
        gid: unit
        for gid, (_, unit) in mirror._split(txn, [TableAction(ActionKind.TRUNCATE, "db", "c")]).items()
    }
    assert list(parts) == ["db:c", "db:a", "db:b"]
    a_txn, a_actions = parts["db:a"]
    assert [ch.after for ch in a_txn.changes] == [{"id": 1}, {"id": 4}]
    assert a_txn.partial == frozenset({1}) and a_txn.end is end and not a_actions
    assert [a.table for a in parts["db:c"][1]] == ["c"] and not parts["db:c"][0].changes
    assert mirror.planner.skipped.rows == {("db", "nokey"): 1}
    # the tables of a document group are one part, their changes in the transaction's order
    docs = ClusterMirror(
        cluster_client("redis+cluster://127.0.0.1:7000"),
        "m",
        lambda s, t: ("id",),
        place_of=lambda s, t: "}orders" if t in ("a", "b") else None,
    )
    split = docs._split(txn, [TableAction(ActionKind.TRUNCATE, "db", "b")])
    assert list(split) == ["__docs:orders", "db:nokey"]
    first, (g_txn, g_actions) = split["__docs:orders"]
    assert first == "db:b"  # (the group is found by one of its tables)
    assert [ch.after for ch in g_txn.changes] == [{"id": 1}, {"id": 2}, {"id": 4}]
    assert g_txn.partial == frozenset({2}) and [a.table for a in g_actions] == ["b"]
