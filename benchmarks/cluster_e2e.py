"""End-to-end inserts/s into one Redis vs a 3-master Redis Cluster (docs/BENCHMARKS.md, Redis Cluster).

    .venv/bin/python -m benchmarks.cluster_e2e [--rows 200000] [--tables 6] [--txn-rows 100] [--repeat 2]

A throwaway stack in benchmarks/.work/cluster-stack (MariaDB, one Redis and a 3-master cluster,
`LocalStack(redis_cluster=True)`). The workload is committed first: `--rows` rows in INSERT
transactions of `--txn-rows` rows, round-robin over `--tables` tables (a table is one slot group,
so on a cluster its rows live on one master; several tables spread over the masters). Then
`binlog-mirror run` (a process of its own, changelog off) mirrors that binlog range from an empty
target, once into the single Redis and once into the cluster, alternating for `--repeat` rounds.
rows/s = rows / (time from the first stored checkpoint, at bootstrap, to the checkpoint reaching
the end of the workload): process start and imports are not counted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid

import redis
from redis.cluster import ClusterNode, RedisCluster

from benchmarks.harness import HERE, machine
from benchmarks.workload import WORK
from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack, StackInfo
from service.sink.checkpoints import decode_checkpoint
from service.sink.cluster import cluster_layout
from service.sink.keys import KeyLayout

ROOT = HERE.parent


def _workload(stack: LocalStack, db: str, rows: int, tables: int, txn_rows: int) -> None:
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for t in range(tables):
            cur.execute(
                f"CREATE TABLE {db}.t{t} (id BIGINT PRIMARY KEY, name VARCHAR(40), qty INT, "
                "price DECIMAL(10,2), note VARCHAR(100))"
            )
        done = 0
        while done < rows:
            n = min(txn_rows, rows - done)
            values = ",".join(
                f"({i}, 'name {i}', {i % 97}, {i % 1000}.25, 'a note about row {i}')"
                for i in range(done, done + n)
            )
            cur.execute(f"INSERT INTO {db}.t{(done // txn_rows) % tables} VALUES {values}")
            conn.commit()
            done += n
    conn.close()


def _master(stack: LocalStack) -> BinlogPosition:
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    conn.close()
    assert row is not None
    return BinlogPosition(str(row[0]), int(row[1]))


def _checkpoint(client: redis.Redis | RedisCluster, key: str) -> BinlogPosition | None:
    try:
        stored = decode_checkpoint(client.hgetall(key))
    except redis.RedisError:
        return None
    return stored.checkpoint.position if stored else None


def _run(info: StackInfo, url: str, db: str, target: BinlogPosition, cluster: bool) -> float:
    prefix = f"b{uuid.uuid4().hex[:6]}"
    client: redis.Redis | RedisCluster
    if cluster:
        client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in info.cluster_ports])
        key = cluster_layout(prefix).checkpoint_key
    else:
        client = redis.Redis(port=info.redis_port)
        key = KeyLayout(prefix).checkpoint_key
    cmd = [sys.executable, "-m", "service", "run", "--mysql", info.mysql_url, "--redis", url]
    cmd += ["--tables", f"{db}.*", "--prefix", prefix, "--no-api", "--on-no-checkpoint", "start"]
    cmd += ["--server-id", str(7000 + os.getpid() % 900)]
    log = (WORK / "cluster-e2e.log").open("ab")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        first = None
        while True:
            at = _checkpoint(client, key)
            now = time.monotonic()
            if at is not None and first is None:
                first = now
            if at is not None and not at < target:
                assert first is not None
                return now - first
            if proc.poll() is not None:
                raise RuntimeError(
                    f"binlog-mirror run exited ({proc.returncode}); see {WORK}/cluster-e2e.log"
                )
            time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(30)
        client.close()
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--tables", type=int, default=6)
    ap.add_argument("--txn-rows", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep-stack", action="store_true")
    args = ap.parse_args()
    WORK.mkdir(exist_ok=True)
    stack = LocalStack(WORK / "cluster-stack", redis_cluster=True)
    info = stack.up()
    stack.start_redis(info)  # the single Redis too, beside the cluster
    single = f"redis://127.0.0.1:{info.redis_port}/0"
    try:
        db = f"cbench_{uuid.uuid4().hex[:6]}"
        started = time.monotonic()
        _workload(stack, db, args.rows, args.tables, args.txn_rows)
        target = _master(stack)
        print(
            f"workload: {args.rows:,} rows in {args.tables} tables, {args.txn_rows} rows per "
            f"transaction ({time.monotonic() - started:.1f}s to commit)"
        )
        times: dict[str, list[float]] = {"1 node": [], "3-master cluster": []}
        for r in range(args.repeat):
            order = [False, True] if r % 2 == 0 else [True, False]
            for cluster in order:
                name = "3-master cluster" if cluster else "1 node"
                took = _run(info, info.redis_url if cluster else single, db, target, cluster)
                times[name].append(took)
                print(f"round {r + 1}: {name}: {args.rows / took:,.0f} rows/s ({took:.2f}s)")
        print(f"\nmachine: {machine()}")
        print("| target | best rows/s | every round (s) |\n|---|---:|---|")
        for name, ts in times.items():
            print(f"| {name} | {args.rows / min(ts):,.0f} | {', '.join(f'{t:.2f}' for t in ts)} |")
    finally:
        if not args.keep_stack:
            stack.down(purge=True)


if __name__ == "__main__":
    main()
