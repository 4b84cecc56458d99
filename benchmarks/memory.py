"""Memory over a long run: the Replicator's RSS while it mirrors 10,000,000 row changes.

    .venv/bin/python -m benchmarks.memory [--rows 10000000] [--table-rows 100000] [--keep-stack]

The source writes `rows` row changes into bench_mem.t_memory (the workload table's columns) as fast as
it can, in 1,000-row transactions: `table-rows` inserts, then rounds of updates of every row, so
Redis holds `table-rows` keys however long the run. binlog-mirror's Replicator (its own process,
`benchmarks.ours_e2e live`, started at the source's position before the first write) mirrors the
table; the source writes faster than the mirror applies, so the mirror runs behind and its
bounded queues stay full (the worst case for memory). Its RSS is sampled every second until it
has applied every change. Prints the RSS at each tenth of the run and writes
benchmarks/.work/memory-results.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import uuid

import redis

from benchmarks.harness import WORK, Child, RssSampler, bench_stack, clock, last_json, machine, markdown_table
from benchmarks.workload import INSERT_CHUNK, TABLE_DDL
from benchmarks.writer import connect

SCHEMA, TABLE = "bench_mem", "t_memory"  # not `bench`: the other benchmarks mirror bench.*
CHUNK = 1000


def write(admin_url: str, rows: int, table_rows: int, done: list[float]) -> None:
    """`rows` row changes: inserts of `table_rows` rows, then updates of all of them, round after round."""
    conn = connect(admin_url)
    cur = conn.cursor()
    cur.execute(f"USE {SCHEMA}")  # the SEQUENCE engine tables (seq_1_to_N) need a current database
    written = 0
    for lo in range(1, table_rows + 1, CHUNK):
        cur.execute("BEGIN")
        cur.execute(INSERT_CHUNK.format(schema=SCHEMA, name=TABLE, lo=lo, hi=min(lo + CHUNK - 1, table_rows)))
        cur.execute("COMMIT")
        written += min(CHUNK, table_rows - lo + 1)
    while written < rows:
        for lo in range(1, table_rows + 1, CHUNK):
            n = min(CHUNK, table_rows - lo + 1, rows - written)
            if n <= 0:
                break
            cur.execute("BEGIN")
            cur.execute(
                f"UPDATE {SCHEMA}.{TABLE} SET big = big + 1, amount = amount + 0.01,"
                f" flag = IF(flag IS NULL, 1, NULL) WHERE id BETWEEN {lo} AND {lo + n - 1}"
            )
            cur.execute("COMMIT")
            written += n
    conn.close()
    done.append(clock())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--table-rows", type=int, default=100_000)
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    args = parser.parse_args()
    stack, info = bench_stack()
    try:
        admin = connect(info.admin_url)
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
            cur.execute(f"DROP TABLE IF EXISTS {SCHEMA}.{TABLE}")
            cur.execute(TABLE_DDL.format(schema=SCHEMA, name=TABLE))
        admin.close()
        redis.Redis.from_url(info.redis_url, socket_timeout=300).flushdb()
        cmd = [sys.executable, "-m", "benchmarks.ours_e2e", "live", info.mysql_url, info.redis_url]
        cmd += [f"mem-{uuid.uuid4().hex[:8]}", f"{SCHEMA}.{TABLE}", "--expect", str(args.rows)]
        replicator = Child(cmd, WORK / "memory-replicator.log")
        try:
            replicator.read_json(timeout=60)
            sampler = RssSampler(replicator.pid, 1.0).start()
            t0 = clock()
            wrote: list[float] = []
            writer = threading.Thread(target=write, args=(info.admin_url, args.rows, args.table_rows, wrote))
            writer.start()
            done = replicator.finish(timeout=24 * 3600)
            t1 = clock()
            writer.join()
        except BaseException:
            replicator.signal(signal.SIGKILL)
            raise
        samples = sampler.stop()
    finally:
        if not args.keep_stack:
            stack.down()
    applied = last_json(done.out)["applied"]
    cut = [t0 + (t1 - t0) * k / 10 for k in range(1, 11)]
    tenths = [max((mb for t, mb in samples if t <= c), default=0.0) for c in cut]
    result = {
        "rows": args.rows,
        "table_rows": args.table_rows,
        "applied": applied,
        "seconds": t1 - t0,
        "writer_seconds": (wrote[0] - t0) if wrote else None,
        "rows_per_second": applied / (t1 - t0),
        "cpu_seconds": done.cpu_s,
        "rss_peak_mb": done.rss_mb,
        "rss_max_by_tenth_mb": [round(mb, 1) for mb in tenths],
        "rss_samples": [round(mb, 1) for _, mb in samples],
        "machine": machine(),
    }
    (WORK / "memory-results.json").write_text(json.dumps(result, indent=2))
    headers = ["run so far", *[f"{k}0%" for k in range(1, 11)]]
    md = markdown_table(headers, [["max RSS MB", *[f"{mb:.0f}" for mb in tenths]]])
    summary = (
        f"{applied:,} row changes applied in {t1 - t0:.0f} s ({applied / (t1 - t0):,.0f} rows/s); "
        f"the source finished writing after {result['writer_seconds'] or 0:.0f} s; "
        f"peak RSS {done.rss_mb:.0f} MB; CPU {done.cpu_s:.0f} s"
    )
    (WORK / "memory-results.md").write_text(summary + "\n\n" + md + "\n")
    print(summary)
    print(md)


if __name__ == "__main__":
    main()
