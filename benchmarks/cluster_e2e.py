"""End-to-end inserts/s into one Redis vs a 3-master Redis Cluster (docs/BENCHMARKS.md, Redis Cluster).

    .venv/bin/python -m benchmarks.cluster_e2e [--rows 200000] [--tables 6] [--txn-rows 100] [--repeat 2]

A throwaway stack in benchmarks/.work/cluster-stack (MariaDB, one Redis and a 3-master cluster,
`LocalStack(redis_cluster=True)`). The tables (`--tables`, empty) are created and every run's
key prefix is bootstrapped first (`binlog-mirror run` until its first checkpoint, then stopped).
Then the workload is committed: `--rows` rows in INSERT transactions of `--txn-rows` rows,
round-robin over the tables (a table is one slot group, so on a cluster its rows live on one
master; several tables spread over the masters). Each timed run is `binlog-mirror run` (a process
of its own, changelog off) resuming from its prefix's checkpoint, once into the single Redis and
once into the cluster, alternating for `--repeat` rounds. rows/s = rows / (time from the process
log line "streaming from" (connected, resuming: imports and connects are not counted) until
the checkpoint stored in Redis reaches the end of the workload).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
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


def _client(info: StackInfo, cluster: bool) -> redis.Redis | RedisCluster:
    if cluster:
        return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in info.cluster_ports])
    return redis.Redis(port=info.redis_port)


def _run(
    info: StackInfo, url: str, db: str, prefix: str, target: BinlogPosition | None, cluster: bool
) -> float:
    """`binlog-mirror run` until its checkpoint reaches `target` (None: until it has one, the
    bootstrap); seconds from its "streaming from" log line to then."""
    client = _client(info, cluster)
    key = (cluster_layout(prefix) if cluster else KeyLayout(prefix)).checkpoint_key
    cmd = [sys.executable, "-m", "service", "run", "--mysql", info.mysql_url, "--redis", url]
    cmd += ["--tables", f"{db}.*", "--prefix", prefix, "--no-api", "--on-no-checkpoint", "now"]
    cmd += ["--server-id", str(7000 + os.getpid() % 900), "--log-format", "json"]
    path = WORK / f"cluster-e2e-{prefix}.log"
    with path.open("ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            at = _checkpoint(client, key)
            if at is not None and (target is None or not at < target):
                done = time.time()
                break
            if proc.poll() is not None:
                raise RuntimeError(f"binlog-mirror run exited ({proc.returncode}); see {path}")
            time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(30)
        client.close()
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]
    streaming = [x["time"] for x in lines if x["message"].startswith("streaming from")]
    started = dt.datetime.fromisoformat(streaming[-1].replace("Z", "+00:00")).timestamp()
    return done - started


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
        conn = stack.root_connection()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            for t in range(args.tables):
                cur.execute(
                    f"CREATE TABLE {db}.t{t} (id BIGINT PRIMARY KEY, name VARCHAR(40), qty INT, "
                    "price DECIMAL(10,2), note VARCHAR(100))"
                )
        conn.close()
        runs = [
            (r, cluster, f"b{uuid.uuid4().hex[:6]}") for r in range(args.repeat) for cluster in (False, True)
        ]
        for _, cluster, prefix in runs:  # bootstrapped before the workload: the runs resume
            _run(info, info.redis_url if cluster else single, db, prefix, None, cluster)
        started = time.monotonic()
        _workload(stack, db, args.rows, args.tables, args.txn_rows)
        target = _master(stack)
        print(
            f"workload: {args.rows:,} rows in {args.tables} tables, {args.txn_rows} rows per "
            f"transaction ({time.monotonic() - started:.1f}s to commit)"
        )
        times: dict[str, list[float]] = {"1 node": [], "3-master cluster": []}
        for r, cluster, prefix in sorted(runs, key=lambda x: (x[0], x[1] != (x[0] % 2 == 1))):
            name = "3-master cluster" if cluster else "1 node"
            took = _run(info, info.redis_url if cluster else single, db, prefix, target, cluster)
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
