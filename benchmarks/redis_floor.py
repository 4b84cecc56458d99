"""The least Redis CPU a mirror can cost on a workload's rows, whatever its client.

    .venv/bin/python -m benchmarks.redis_floor [--rows 1000000] [--workload inserts] [--json] [--keep-stack]

Decodes the workload's binlog file with binlog-mirror's decoder and builds every row's command
before anything is sent: `HSET floor:{id} column value ...` (the after image in the mirror's
text forms, the default layout and the peer's), or with --json `SET floor:{id} document` (the
json layout). Then sends them as plain commands, one MULTI/EXEC per source transaction (no DEL,
lease, checkpoint, index or script: less than any mirror that checks what it overwrites does),
into the benchmark stack's emptied Redis with its AOF settled first, and reports the
redis-server's CPU (/proc) and the CPU of the AOF rewrites the writes started. With the CPU that
MariaDB spends sending the binlog and that the fastest client spends decoding it
(benchmarks.e2e and benchmarks.stream report both), it bounds the wall time any mirror of that
layout can reach on this machine (docs/BENCHMARKS.md, finding 3).
"""

from __future__ import annotations

import argparse
import json

import redis

from benchmarks.e2e import aof_persistence, settle_aof, wait_aof
from benchmarks.harness import bench_stack, cpu_seconds, machine
from benchmarks.workload import WORK, load_or_generate
from service.binlog import BinlogDecoder, RowsEvent, XidEvent, scan_binlog_file
from service.sink.values import field_value, json_document


def transactions(path: str, start: int, end: int, json_layout: bool) -> list[list[tuple[object, ...]]]:
    """Each source transaction of [start, end) as its rows' HSET (or SET) commands."""
    decoder = BinlogDecoder(file=path)
    txns: list[list[tuple[object, ...]]] = []
    current: list[tuple[object, ...]] = []
    for offset, data in scan_binlog_file(path, 4, end):
        event = decoder.feed(data, offset)
        if offset < start:
            continue
        if type(event) is XidEvent and current:
            txns.append(current)
            current = []
        elif type(event) is RowsEvent:
            for change in event.changes:
                row = change.after
                assert row is not None
                key = f"floor:{row['id']}"
                if json_layout:
                    current.append(("SET", key, json_document(row)))
                else:
                    pairs = [x for k, v in row.items() if v is not None for x in (k, field_value(v))]
                    current.append(("HSET", key, *pairs))
    return txns


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workload", default="inserts")
    parser.add_argument("--json", action="store_true", help="one JSON string per row (SET), not a hash")
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    args = parser.parse_args()
    stack, info = bench_stack()
    try:
        w = next(w for w in load_or_generate(stack, args.rows, False) if w.name == args.workload)
        txns = transactions(str(stack.mysql_dir / "binlog" / w.file), w.start, w.end, args.json)
        rows = sum(len(t) for t in txns)
        r = redis.Redis.from_url(info.redis_url, socket_timeout=300)
        r.flushdb()
        settle_aof(r)
        rewrites, child_cpu = aof_persistence(r)
        cpu0 = cpu_seconds(info.redis_pid or 0)
        for txn in txns:
            pipe = r.pipeline(transaction=True)
            for cmd in txn:
                pipe.execute_command(*cmd)
            pipe.execute()
        redis_cpu = cpu_seconds(info.redis_pid or 0) - cpu0
        wait_aof(r)
        rewrites_after, child_after = aof_persistence(r)
        result = {
            "workload": w.name,
            "layout": "json" if args.json else "hash",
            "rows": rows,
            "transactions": len(txns),
            "redis_cpu_s": round(redis_cpu, 2),
            "redis_cpu_us_per_row": round(redis_cpu / rows * 1e6, 2),
            "aof_rewrites": rewrites_after - rewrites,
            "rewrite_cpu_s": round(child_after - child_cpu, 2),
            "commit": machine()["commit"],
        }
        r.flushdb()
        r.close()
        print(json.dumps(result))
        (WORK / "redis-floor-results.json").write_text(json.dumps(result, indent=2))
    finally:
        if not args.keep_stack:
            stack.down()


if __name__ == "__main__":
    main()
