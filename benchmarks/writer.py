"""A steady-rate writer for the live benchmarks (latency, fan-out), in a process of its own.

    python -m benchmarks.writer ADMIN_URL TABLE RATE ROWS_PER_TXN SECONDS OUT

Commits RATE transactions per second, each one autocommitted multi-row INSERT of ROWS_PER_TXN
rows with ids 1, 2, 3, ... on a fixed schedule (transaction i is due at t0 + i / RATE; a late
one is sent at once, never skipped). Writes the CLOCK_MONOTONIC time each transaction's commit
returned to OUT (float64 array, index = transaction number) and prints
{"transactions", "rows", "seconds", "rate", "late_p99_ms"}.
"""

from __future__ import annotations

import array
import json
import sys
import time
from pathlib import Path

import pymysql

from benchmarks.harness import clock, percentile
from service.settings import MySQLUrl

TABLE_DDL = """CREATE TABLE {table} (
  id INT PRIMARY KEY,
  name VARCHAR(64) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  happened DATETIME(6) NOT NULL,
  state ENUM('new','paid','shipped','void') NOT NULL
) ENGINE=InnoDB"""


def connect(admin_url: str) -> pymysql.connections.Connection:  # type: ignore[type-arg]
    url = MySQLUrl.parse(admin_url)
    return pymysql.connect(
        host=url.host,
        port=url.port,
        user=url.user,
        password=url.password.get_secret_value(),
        autocommit=True,
    )


def recreate(admin_url: str, table: str) -> None:
    """DROP + CREATE the live benchmark's table (schema `bench_live`)."""
    conn = connect(admin_url)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(TABLE_DDL.format(table=table))
    conn.close()


def main(admin_url: str, table: str, rate: float, per_txn: int, seconds: float, out: str) -> None:
    n = int(rate * seconds)
    conn = connect(admin_url)
    cur = conn.cursor()
    commits = array.array("d", bytes(8 * n))
    late: list[float] = []
    sql = f"INSERT INTO {table} VALUES " + ",".join(["(%s,%s,%s,NOW(6),'paid')"] * per_txn)
    t0 = clock()
    for i in range(n):
        due = t0 + i / rate
        ahead = due - clock()
        if ahead > 0:
            time.sleep(ahead)
        else:
            late.append(-ahead)
        args: list[object] = []
        for j in range(i * per_txn + 1, (i + 1) * per_txn + 1):
            args += [j, f"row-{j}", j % 10000 / 100]
        cur.execute(sql, args)
        commits[i] = clock()
    elapsed = clock() - t0
    conn.close()
    Path(out).write_bytes(commits.tobytes())
    late_ms = [x * 1000 for x in late] or [0.0]
    print(
        json.dumps(
            {
                "transactions": n,
                "rows": n * per_txn,
                "seconds": elapsed,
                "rate": n / elapsed,
                "late_p99_ms": percentile(late_ms, 99),
            }
        )
    )


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], float(a[2]), int(a[3]), float(a[4]), a[5])
