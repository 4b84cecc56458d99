"""Table operations on a big mirrored table: how long Redis stops serving other clients.

    .venv/bin/python -m benchmarks.table_ops [--steps 500,0] [--keep-stack]

For each `table_step_rows` value in --steps (0: no limit, the whole table in one script call, the
way every DROP/TRUNCATE/RENAME ran before they were split), a fresh prefix gets the 1,000,000-row
`inserts` workload mirrored (`benchmarks.ours_e2e replay`, untimed); then RedisMirror applies, as
a statement's transaction would, `RENAME TABLE bench.t_insert TO bench.t_moved`, the start of the
resync an `ALTER TABLE bench.t_moved` begins (its `__keys` copied to `__stale`; the copy from the
source is not run) and `DROP TABLE bench.t_moved`. Meanwhile a probe (a process of its own) sends
PING every millisecond on its own connection, as an application reading the cache would, and
records each reply's latency and every error reply (BUSY). Prints, per operation: wall time, the
probe's worst and p99 latency, its BUSY replies. Results: benchmarks/.work/table-ops-results.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
import uuid

from redis import Redis as SyncRedis
from redis import exceptions as rexc
from redis.asyncio import Redis

from benchmarks.harness import (
    WORK,
    Child,
    bench_stack,
    last_json,
    machine,
    markdown_table,
    percentile,
    run_measured,
)
from benchmarks.workload import load_or_generate
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink.keys import KeyLayout
from service.sink.mirror import MirrorOptions, RedisMirror
from service.sink.plan import ActionKind, TableAction
from service.transactions import Transaction

UNLIMITED = 10**12


def probe(redis_url: str) -> None:
    """PING every millisecond until SIGTERM; prints {"pings", "worst_ms", "p99_ms", "busy"} (small:
    the parent reads it only once this process has ended)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    r = SyncRedis.from_url(redis_url, socket_timeout=120)
    lat: list[float] = []
    busy = 0
    print(json.dumps({"ready": True}), flush=True)
    while not stop:
        t = time.perf_counter()
        try:
            r.ping()
        except rexc.BusyLoadingError:
            busy += 1
        except rexc.ResponseError as exc:
            if not str(exc).startswith("BUSY"):
                raise
            busy += 1
        lat.append((time.perf_counter() - t) * 1000)
        time.sleep(0.001)
    summary = {"pings": len(lat), "worst_ms": max(lat), "p99_ms": percentile(lat, 99), "busy": busy}
    print(json.dumps(summary), flush=True)


async def apply_action(redis_url: str, prefix: str, step: int, action: TableAction) -> float:
    """Apply `action` as the next transaction of the mirror under `prefix`; its wall time."""
    redis = Redis.from_url(redis_url, socket_timeout=600)
    try:
        mirror = RedisMirror(
            redis, KeyLayout(prefix), lambda s, t: ("id",), MirrorOptions(table_step=step, lease_ttl=600)
        )
        assert await mirror.acquire_lease()  # held for the whole run: nothing renews it here
        cp = await mirror.load_checkpoint()
        assert cp is not None
        end = Checkpoint(BinlogPosition(cp.position.file, cp.position.pos + 1), cp.gtid_set, cp.ts)
        t0 = time.perf_counter()
        await mirror.apply([(Transaction((), (), None, cp.ts, end), [action])])
        seconds = time.perf_counter() - t0
        await mirror.release_lease()
        return seconds
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="500,0", help="table_step_rows values; 0: no limit")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    args = parser.parse_args()
    stack, info = bench_stack()
    results = []
    try:
        inserts = next(w for w in load_or_generate(stack, args.rows) if w.name == "inserts")
        SyncRedis.from_url(info.redis_url, socket_timeout=300).flushdb()
        for step in (int(s) for s in args.steps.split(",")):
            prefix = f"ops-{uuid.uuid4().hex[:8]}"
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.ours_e2e",
                "replay",
                info.mysql_url,
                info.redis_url,
                prefix,
            ]
            run_measured(cmd + [inserts.file, str(inserts.start), str(inserts.end)])
            actions = [
                ("RENAME TABLE", TableAction(ActionKind.RENAME, "bench", "t_insert", "bench", "t_moved")),
                (
                    "ALTER TABLE (resync start)",
                    TableAction(ActionKind.RESYNC, "bench", "t_moved", reason="ALTER"),
                ),
                ("DROP TABLE", TableAction(ActionKind.DROP, "bench", "t_moved")),
            ]
            for name, action in actions:
                p = Child(
                    [sys.executable, "-m", "benchmarks.table_ops", "probe", info.redis_url],
                    WORK / "probe.log",
                )
                p.read_json()
                time.sleep(0.2)
                try:
                    seconds = asyncio.run(apply_action(info.redis_url, prefix, step or UNLIMITED, action))
                finally:
                    time.sleep(0.2)
                    p.signal(signal.SIGTERM)
                probed = last_json(p.finish(timeout=120).out)
                row = {
                    "table_step_rows": step or "no limit",
                    "operation": name,
                    "rows": inserts.rows,
                    "seconds": round(seconds, 2),
                    "probe_pings": probed["pings"],
                    "probe_worst_ms": round(probed["worst_ms"], 1),
                    "probe_p99_ms": round(probed["p99_ms"], 1),
                    "probe_busy_replies": probed["busy"],
                }
                results.append(row)
                print(json.dumps(row), flush=True)
            SyncRedis.from_url(info.redis_url, socket_timeout=300).flushdb()
    finally:
        if not args.keep_stack:
            stack.down()
    headers = [
        "table_step_rows",
        "operation",
        "rows",
        "seconds",
        "probe worst ms",
        "probe p99 ms",
        "BUSY replies",
    ]
    table = [
        [
            f"{r['table_step_rows']:,}" if isinstance(r["table_step_rows"], int) else r["table_step_rows"],
            r["operation"],
            f"{r['rows']:,}",
            f"{r['seconds']:.2f}",
            f"{r['probe_worst_ms']:.1f}",
            f"{r['probe_p99_ms']:.1f}",
            str(r["probe_busy_replies"]),
        ]
        for r in results
    ]
    md = markdown_table(headers, table)
    (WORK / "table-ops-results.json").write_text(
        json.dumps({"results": results, "machine": machine()}, indent=2)
    )
    (WORK / "table-ops-results.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        probe(sys.argv[2])
    else:
        main()
