"""The mirror on a local 3-master Redis Cluster (`stack up --redis-cluster`): the randomized workload
of test_mirror_crash.py with SIGKILLs of the mirror and a master restart (docs/mirror.md, Redis
Cluster)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisError

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.devtools.stack import LocalStack
from service.errors import ConfigError, LeaseLost
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.sink.checkpoints import decode_checkpoint
from service.sink.client import cluster_client
from service.sink.cluster import ClusterMirror, cluster_layout
from service.sink.keys import group_layout
from service.sink.mirror import MirrorOptions
from service.transactions import Transaction
from tests.integration.mirror_helpers import (
    KEYS,
    Rows,
    Workload,
    create_schema,
    expected,
    master_position,
    mirror_settings,
    root,
)
from tests.integration.mirror_helpers import unique_names as _names
from tests.integration.test_mirror_crash import _start, _stop, _Writer


@pytest.fixture(scope="module")
def cluster_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A local stack whose Redis is a cluster of three masters (its own MariaDB too)."""
    local = LocalStack(tmp_path_factory.mktemp("cluster-stack"), redis_cluster=True)
    local.up()
    try:
        yield local
    finally:
        local.down()


def _client(stack: LocalStack) -> RedisCluster:
    info = stack.load()
    assert info is not None
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in info.cluster_ports])


def _stored(stack: LocalStack, prefix: str) -> BinlogPosition | None:
    """The global checkpoint (None while the cluster does not answer: a master restarts)."""
    try:
        with _client(stack) as rc:
            raw = rc.hgetall(cluster_layout(prefix).checkpoint_key)
    except RedisError:
        return None
    stored = decode_checkpoint(raw)
    return stored.checkpoint.position if stored else None


def _wait(stack: LocalStack, prefix: str, target: BinlogPosition | None, timeout: float = 40.0) -> None:
    """Until the global checkpoint reaches `target` (None: until there is one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = _stored(stack, prefix)
        if at is not None and (target is None or not at < target):
            return
        time.sleep(0.05)
    raise AssertionError(f"mirror did not reach {target} (at {_stored(stack, prefix)})")


def _wait_advance(stack: LocalStack, prefix: str, timeout: float = 40.0) -> None:
    since = _stored(stack, prefix)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = _stored(stack, prefix)
        if at is not None and (since is None or since < at):
            return
        time.sleep(0.02)
    raise AssertionError(f"mirror did not move past {since}")


def _actual(stack: LocalStack, prefix: str, db: str) -> dict[str, Rows]:
    """Every table's rows as its `__keys` lists them, in its slot group; no stray row keys."""
    out: dict[str, Rows] = {}
    with _client(stack) as rc:
        for table in KEYS:
            g = group_layout(prefix, db, table)
            members = {m.decode() for m in rc.smembers(g.index_key(db, table))}
            out[table] = {m: rc.hgetall(f"{g.prefix}:{m}") for m in members}
            keys = {k.decode() for k in rc.scan_iter(match=f"{g.prefix}:*", count=1000)}
            stored = {k[len(g.prefix) + 1 :] for k in keys}
            assert {k for k in stored if not k.startswith("__")} == members, f"stray keys in {table}"
        nokey = group_layout(prefix, db, "nokey")
        assert not rc.exists(nokey.index_key(db, "nokey"))
    return out


def _ledger_ids(stack: LocalStack, prefix: str) -> list[int]:
    with _client(stack) as rc:
        entries: list[Any] = rc.xrange(cluster_layout(prefix).changes_key)
    return sorted(
        int(e[1][b"key"]) for e in entries if e[1][b"table"] == b"ledger" and e[1][b"op"] == b"insert"
    )


def _node_of(stack: LocalStack, key: str) -> int:
    """The index (in the stack's cluster ports) of the master that owns `key`."""
    info = stack.load()
    assert info is not None
    with _client(stack) as rc:
        port = rc.get_node_from_key(key).port
    return info.cluster_ports.index(int(port))


@pytest.mark.integration
def test_cluster_sigkills_and_a_master_restart(cluster_stack: LocalStack, tmp_path: Path) -> None:
    """10 SIGKILLs of the mirror while the workload commits (PK changes, ALTER resyncs, TRUNCATE,
    RENAME, binlog rotations), and the master of the global group (lease, checkpoint, change log)
    restarted once: every row equals SELECT *, and every committed ledger row is in the change
    log exactly once."""
    stack = cluster_stack
    db, prefix = _names()
    create_schema(stack, db)
    log = tmp_path / "run.log"
    rng = random.Random(11)
    proc = _start(stack, db, prefix, log)
    _wait(stack, prefix, None)
    wl = Workload(stack, db, seed=3)
    writer = _Writer(wl)
    writer.start()
    kills = 0
    restarted = _node_of(stack, cluster_layout(prefix).checkpoint_key)
    try:
        for i in range(10):
            _wait_advance(stack, prefix)
            if i == 4:
                stack.stop_cluster_node(restarted)
                time.sleep(0.5)  # the mirror meets the missing master
                stack.start_cluster_node(restarted)
                stack.wait_cluster()
                _wait_advance(stack, prefix)
            time.sleep(rng.uniform(0.0, 0.3))
            proc.kill()
            proc.wait()
            kills += 1
            proc = _start(stack, db, prefix, log)
        writer.done.set()
        writer.join()
        assert writer.error is None, writer.error
        wl.ledger += 1
        with wl.conn.cursor() as cur:
            cur.execute("INSERT INTO ledger VALUES (%s, 'last')", (wl.ledger,))
        wl.conn.commit()
        try:
            _wait(stack, prefix, master_position(stack), timeout=60)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n--- run.log (tail) ---\n{log.read_text(errors='replace')[-6000:]}"
            ) from None
        for _ in range(50):
            if _actual(stack, prefix, db) == expected(stack, db):
                break
            time.sleep(0.2)  # a resync after the last ALTER or RENAME may still be copying
        assert _actual(stack, prefix, db) == expected(stack, db)
        assert _ledger_ids(stack, prefix) == list(range(1, wl.ledger + 1))
    finally:
        writer.done.set()
        _stop(proc)
        wl.close()
    assert kills >= 10 and writer.steps > 50, (kills, writer.steps)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]


def _txn(table: str, i: int, pos: int) -> Transaction:
    ch = RowChange(Op.INSERT, "db", table, None, {"id": i}, EventSpan("mysql-bin.000001", 4, 9), 1, 1)
    return Transaction((ch,), (), None, 1, Checkpoint(BinlogPosition("mysql-bin.000001", pos), "", 0))


@pytest.mark.redis  # the Cluster alone
async def test_fencing_refuses_the_old_writer_on_every_group(redis_cluster: LocalStack) -> None:
    """The lease is in the global slot; a writer whose lease expired and was taken over cannot
    write a group the new writer wrote (its fencing number is older), nor the global group."""
    info = redis_cluster.load()
    assert info is not None
    _, prefix = _names()
    # a's lease expires while it stalls; b's outlives the test on a loaded machine (0.5 s did not)
    a = ClusterMirror(
        cluster_client(info.redis_url), prefix, lambda s, t: ("id",), MirrorOptions(lease_ttl=0.5)
    )
    b = ClusterMirror(
        cluster_client(info.redis_url), prefix, lambda s, t: ("id",), MirrorOptions(lease_ttl=30)
    )
    try:
        assert await a.acquire_lease()
        await a.load_checkpoint()
        await a.apply([(_txn("t1", 1, 100), ()), (_txn("t2", 1, 200), ())])
        await asyncio.sleep(0.8)  # a stalls: its lease expires
        assert await b.acquire_lease()
        loaded = await b.load_checkpoint()
        assert loaded is not None and loaded.position == BinlogPosition("mysql-bin.000001", 200)
        await b.apply([(_txn("t1", 2, 300), ())])
        # a still believes it writes: t1 refuses it (b's fencing number wrote there)
        with pytest.raises(LeaseLost, match="newer writer"):
            await a.apply([(_txn("t1", 3, 300), ())])
        # t3 was never written by b: a's group call passes the fence, its global call does not
        with pytest.raises(LeaseLost):
            await a.apply([(_txn("t3", 1, 400), ())])
        with _client(redis_cluster) as rc:
            g1 = group_layout(prefix, "db", "t1")
            assert sorted(rc.smembers(g1.index_key("db", "t1"))) == [b"1", b"2"]
            assert _stored(redis_cluster, prefix) == BinlogPosition("mysql-bin.000001", 300)
        # b goes on: a's call wrote to t3 the transaction b applies next (the same change),
        # which t3 skips; the global call moves the checkpoint
        await b.apply([(_txn("t3", 1, 400), ())])
        assert _stored(redis_cluster, prefix) == BinlogPosition("mysql-bin.000001", 400)
        with _client(redis_cluster) as rc:
            g3 = group_layout(prefix, "db", "t3")
            assert rc.smembers(g3.index_key("db", "t3")) == {b"1"}
            assert rc.hget(g3.checkpoint_key, "id") == b"mysql-bin.000001:400"
    finally:
        await a.close()
        await b.close()
        await a.cluster.aclose()
        await b.cluster.aclose()


@pytest.mark.redis  # the Cluster alone
async def test_a_group_whose_master_lost_writes_is_replayed(redis_cluster: LocalStack) -> None:
    """A group behind the head the global call recorded for it (its master lost acknowledged
    writes) makes the restart resume from its checkpoint; the others, and the change log, skip
    what they hold. A group that lost every key leaves `__tables` (the bootstrap copies it)."""
    info = redis_cluster.load()
    assert info is not None
    _, prefix = _names()
    opts = MirrorOptions(changelog_maxlen=1000)
    first, second = _txn("t1", 1, 100), _txn("t1", 2, 200)
    both = Transaction((first.changes[0], _txn("t2", 1, 100).changes[0]), (), None, 1, first.end)
    m = ClusterMirror(cluster_client(info.redis_url), prefix, lambda s, t: ("id",), opts)
    try:
        assert await m.acquire_lease()
        await m.load_checkpoint()
        await m.apply([(both, ()), (second, ())])
        g1, g2 = group_layout(prefix, "db", "t1"), group_layout(prefix, "db", "t2")
        with _client(redis_cluster) as rc:
            # t1's master "loses" the second transaction: its row and its checkpoint go back
            cp = rc.hgetall(g1.checkpoint_key)
            rc.hset(g1.checkpoint_key, mapping={b"id": b"mysql-bin.000001:100", b"pos": b"100"})
            assert cp[b"id"] == b"mysql-bin.000001:200"
            rc.delete(f"{g1.prefix}:2")
            rc.srem(g1.index_key("db", "t1"), "2")
        resumed = await m.load_checkpoint()
        assert resumed is not None and resumed.position == BinlogPosition("mysql-bin.000001", 100)
        await m.apply([(second, ())])  # the stream replays it from there
        with _client(redis_cluster) as rc:
            assert rc.smembers(g1.index_key("db", "t1")) == {b"1", b"2"}
            assert rc.smembers(g2.index_key("db", "t2")) == {b"1"}
            assert rc.xlen(cluster_layout(prefix).changes_key) == 3  # each change once
            # t2's master loses everything
            for key in rc.scan_iter(match=f"{g2.prefix}:*"):
                rc.delete(key)
        assert await m.load_checkpoint() is not None
        assert await m.mirrored_tables() == {"db:t1"}
    finally:
        await m.close()
        await m.cluster.aclose()


def _move_slot(stack: LocalStack, key: str) -> tuple[int, int]:
    """Reshard: move the slot of `key` (with its keys) to another master, as `redis-cli --cluster
    reshard` does (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE). (from port, to port)."""
    info = stack.load()
    assert info is not None
    slot = key_slot(key.encode())
    nodes = {p: redis_sync.Redis(port=p) for p in info.cluster_ports}
    try:
        ids = {p: r.execute_command("CLUSTER MYID").decode() for p, r in nodes.items()}
        src = next(p for p, r in nodes.items() if any(slot in range(a, b + 1) for a, b in _slots(r, ids[p])))
        dst = next(p for p in nodes if p != src)
        nodes[dst].execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[src])
        nodes[src].execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[dst])
        while keys := nodes[src].execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
            nodes[src].execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
        for r in nodes.values():
            r.execute_command("CLUSTER SETSLOT", slot, "NODE", ids[dst])
        return src, dst
    finally:
        for r in nodes.values():
            r.close()


def _slots(r: redis_sync.Redis, my_id: str) -> list[tuple[int, int]]:
    return [(int(s[0]), int(s[1])) for s in r.execute_command("CLUSTER SLOTS") if s[2][2].decode() == my_id]


@pytest.mark.redis  # the Cluster alone
async def test_a_group_moved_to_another_master_goes_on(redis_cluster: LocalStack) -> None:
    """Resharding under a running mirror: the calls of a group whose slot moved follow the MOVED
    redirect to its new master, where its checkpoint chain and rows are, and go on there."""
    info = redis_cluster.load()
    assert info is not None
    _, prefix = _names()
    m = ClusterMirror(cluster_client(info.redis_url), prefix, lambda s, t: ("id",), MirrorOptions())
    g = group_layout(prefix, "db", "t1")
    try:
        assert await m.acquire_lease()
        await m.load_checkpoint()
        await m.apply([(_txn("t1", 1, 100), ()), (_txn("t1", 2, 200), ())])
        src, dst = _move_slot(redis_cluster, g.checkpoint_key)
        await m.apply([(_txn("t1", 3, 300), ())])  # its client still maps the slot to `src`
        with redis_sync.Redis(port=dst) as r:
            assert r.smembers(g.index_key("db", "t1")) == {b"1", b"2", b"3"}
            assert r.hget(g.checkpoint_key, "id") == b"mysql-bin.000001:300"
        assert _stored(redis_cluster, prefix) == BinlogPosition("mysql-bin.000001", 300)
        assert src != dst
    finally:
        await m.close()
        await m.cluster.aclose()


@pytest.mark.redis  # the Cluster alone
async def test_json_mode_runs_of_inserts_in_every_group(redis_cluster: LocalStack) -> None:
    """json mode writes a table's consecutive INSERTs with MSET (op WJN): every key of a run is in
    its table's slot group, so the MSET is never cross-slot, with two groups in one transaction."""
    info = redis_cluster.load()
    assert info is not None
    _, prefix = _names()
    m = ClusterMirror(
        cluster_client(info.redis_url), prefix, lambda s, t: ("id",), MirrorOptions(json_mode=True)
    )
    span = EventSpan("mysql-bin.000001", 4, 9)
    changes = [
        RowChange(Op.INSERT, "db", t, None, {"id": i, "v": t}, span, 1, 1)
        for t in ("t1", "t2")
        for i in range(600)
    ]
    txn = Transaction(tuple(changes), (), None, 1, Checkpoint(BinlogPosition("mysql-bin.000001", 500), "", 0))
    try:
        assert await m.acquire_lease()
        await m.load_checkpoint()
        await m.apply([(txn, ())])
        with _client(redis_cluster) as rc:
            for t in ("t1", "t2"):
                g = group_layout(prefix, "db", t)
                assert rc.scard(g.index_key("db", t)) == 600
                assert rc.get(f"{g.table_base('db', t)}:599") == b'{"id":599,"v":"%s"}' % t.encode()
        assert _stored(redis_cluster, prefix) == BinlogPosition("mysql-bin.000001", 500)
    finally:
        await m.close()
        await m.cluster.aclose()


@pytest.mark.integration
async def test_cascading_foreign_keys_are_refused(cluster_stack: LocalStack) -> None:
    """A cascade's child rows live in other slot groups than the parent's change: the mirror stops
    with a message naming the constraint and the ways out, never applies the parent alone."""
    db, prefix = _names()
    conn = root(cluster_stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.parent (id INT PRIMARY KEY)")
        cur.execute(
            f"CREATE TABLE {db}.child (id INT PRIMARY KEY, pid INT, "
            f"CONSTRAINT fk_pid FOREIGN KEY (pid) REFERENCES {db}.parent (id) ON DELETE CASCADE)"
        )
        cur.execute(f"INSERT INTO {db}.parent VALUES (1)")
        cur.execute(f"INSERT INTO {db}.child VALUES (1, 1)")
    conn.commit()
    conn.close()
    rep = Replicator(mirror_settings(cluster_stack, db, prefix))
    task = asyncio.create_task(rep.run())
    async with asyncio.timeout(60):
        while rep.status().state != State.STREAMING or not rep.status().applied:
            await asyncio.sleep(0.05)
        conn = root(cluster_stack)
        with conn.cursor() as cur:
            cur.execute(f"DELETE FROM {db}.parent WHERE id = 1")  # InnoDB deletes child 1 unlogged
        conn.commit()
        conn.close()
        with pytest.raises(ConfigError, match=r"foreign key fk_pid .* Redis Cluster"):
            await task
    assert rep.status().state == State.FAILED
