"""Redis memory per mirrored row, measured on a throwaway local stack (docs/operations.md, sizing).

    .venv/bin/python -m benchmarks.redis_sizing [--rows 100000] [--value-mode hash|json]

Starts a local MariaDB + Redis in a temp dir, fills `sizing.orders` (an id, a short string, two
numbers, a DECIMAL, a DATETIME and a nullable TEXT: a typical narrow business row), runs
`binlog-mirror run --on-no-checkpoint start` until every row is in Redis, and prints Redis'
`used_memory` growth per row (the row's key and value, the table's key index, the checkpoint).
Stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis as redis_sync

from service.devtools.stack import LocalStack
from service.sink.keys import KeyLayout

DB = "sizing"
DDL = (
    f"CREATE TABLE {DB}.orders (id BIGINT PRIMARY KEY, customer VARCHAR(40), qty INT, "
    "status TINYINT, amount DECIMAL(12,2), created DATETIME, note TEXT NULL)"
)


def fill(stack: LocalStack, rows: int) -> None:
    with stack.root_connection() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(DDL)
        for start in range(0, rows, 5000):
            values = ",".join(
                f"({i}, 'customer-{i % 9973:05d}', {i % 17}, {i % 4}, {i % 100000}.{i % 100:02d}, "
                f"'2026-01-01 00:00:00' + INTERVAL {i} SECOND, {'NULL' if i % 3 else repr('gift wrap')})"
                for i in range(start, min(rows, start + 5000))
            )
            cur.execute(f"INSERT INTO {DB}.orders VALUES {values}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--value-mode", choices=("hash", "json"), default="hash")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bm-sizing-") as tmp:
        stack = LocalStack(Path(tmp))
        info = stack.up()
        proc: subprocess.Popen[bytes] | None = None
        try:
            r = redis_sync.Redis.from_url(info.redis_url)
            before = int(r.info("memory")["used_memory"])
            fill(stack, args.rows)
            env = {
                **os.environ,
                "BINLOG_MIRROR_MYSQL": info.mysql_url,
                "BINLOG_MIRROR_REDIS": info.redis_url,
                "BINLOG_MIRROR_TABLES": f"{DB}.*",
                "BINLOG_MIRROR_ON_NO_CHECKPOINT": "start",
                "BINLOG_MIRROR_VALUE_MODE": args.value_mode,
            }
            proc = subprocess.Popen(
                [sys.executable, "-m", "service", "run", "--no-api"], env=env, stderr=subprocess.DEVNULL
            )
            index = KeyLayout().table_base(DB, "orders") + ":__keys"
            deadline = time.monotonic() + 600
            while r.scard(index) < args.rows:
                if proc.poll() is not None or time.monotonic() > deadline:
                    done = r.scard(index)
                    print(f"mirror stopped or too slow: {done} of {args.rows} rows", file=sys.stderr)
                    return 1
                time.sleep(0.5)
            after = int(r.info("memory")["used_memory"])
            sample = r.memory_usage(KeyLayout().row_key(DB, "orders", [args.rows // 2]))
            print(f"rows: {args.rows}  value_mode: {args.value_mode}")
            print(f"used_memory: {before} -> {after} bytes: {(after - before) / args.rows:.0f} bytes per row")
            print(f"MEMORY USAGE of one row key: {sample} bytes (the rest: key index, allocator overhead)")
            r.close()
        finally:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
            stack.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
