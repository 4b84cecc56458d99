"""Documents (issue 41): child updates per second kept in documents, against the same updates of
rows in no document.

    .venv/bin/python -m benchmarks.documents [--orders 100000] [--updates 20000] [--keep-stack]

A database gets `orders` (--orders rows), `order_lines` (5 per order) and `line_options` (2 per
line), and one more order with 10,000 lines. For each case a fresh key prefix is copied by
`binlog-mirror run` (untimed, until its bootstrap copy is done), the process stopped; then
--updates single-row transactions are committed with it stopped, and a new `binlog-mirror run`
process is timed (wall clock, start-up included) until its checkpoint reaches the source's
position (Redis' AOF rewritten before, as `benchmarks.e2e` does). Cases:

- `lone rows`: the tables mirrored with no document (the baseline);
- `json` / `hash`: `[document.orders]` (lines, their options) in that format, the updates change
  one line each (random lines of the 100k orders);
- `big hash` / `big lone`: the updates change lines of the order with 10,000 lines, in a hash
  document and with no document.

Prints a table and writes benchmarks/.work/documents-results.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from benchmarks.e2e import settle_aof
from benchmarks.harness import WORK, bench_stack, machine, markdown_table
from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from service.sink.checkpoints import decode_checkpoint

DB = "docbench"
SCHEMA = (
    f"DROP DATABASE IF EXISTS {DB}",
    f"CREATE DATABASE {DB}",
    f"CREATE TABLE {DB}.orders (id INT NOT NULL PRIMARY KEY, customer VARCHAR(40) NOT NULL,"
    " total DECIMAL(10,2), placed DATETIME)",
    f"CREATE TABLE {DB}.order_lines (id INT NOT NULL PRIMARY KEY, order_id INT, sku VARCHAR(20),"
    " qty INT NOT NULL, price DECIMAL(8,2), KEY (order_id))",
    f"CREATE TABLE {DB}.line_options (id INT NOT NULL PRIMARY KEY, line_id INT, name VARCHAR(20),"
    " KEY (line_id))",
)
BIG = 10_000  # lines of the big order


def document(prefix: str, fmt: str) -> str:
    return f"""
[document.orders]
root = "{DB}.orders"
key = "doc{prefix}:order:{{id}}"
format = "{fmt}"
max_document_bytes = 16777216

[[document.orders.child]]
table = "{DB}.order_lines"
on = {{ order_id = "id" }}
field = "lines"

[[document.orders.child.child]]
table = "{DB}.line_options"
on = {{ line_id = "id" }}
field = "options"
shape = "array"
"""


def load(stack: LocalStack, orders: int) -> int:
    """The rows; returns the big order's id."""
    conn = stack.root_connection()
    big = orders + 1
    with conn.cursor() as cur:
        for sql in SCHEMA:
            cur.execute(sql)
        cur.execute(
            f"INSERT INTO {DB}.orders SELECT seq, CONCAT('c', seq), seq / 100, '2026-01-01'"
            f" FROM {DB}.seq_1_to_{big}"
        )
        cur.execute(
            f"INSERT INTO {DB}.order_lines SELECT seq, (seq - 1) DIV 5 + 1, 'sku', 1, 9.5"
            f" FROM {DB}.seq_1_to_{orders * 5}"
        )
        cur.execute(
            f"INSERT INTO {DB}.order_lines SELECT {orders * 5} + seq, {big}, 'big', 1, 1"
            f" FROM {DB}.seq_1_to_{BIG}"
        )
        cur.execute(
            f"INSERT INTO {DB}.line_options SELECT seq, (seq - 1) DIV 2 + 1, 'opt'"
            f" FROM {DB}.seq_1_to_{orders * 10}"
        )
    conn.commit()
    conn.close()
    return big


def run(stack: LocalStack, prefix: str, config: Path | None, log: Path) -> subprocess.Popen[bytes]:
    info = stack.load()
    assert info is not None
    cmd = [sys.executable, "-m", "service", "run", "--mysql", info.mysql_url, "--redis", info.redis_url]
    cmd += [
        "--tables",
        f"{DB}.*",
        "--prefix",
        prefix,
        "--no-api",
        "--server-id",
        str(random.randint(7000, 7999)),
    ]
    if config is not None:
        cmd += ["--config", str(config)]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, env=os.environ, stdout=out, stderr=subprocess.STDOUT)


def last_commit(stack: LocalStack) -> BinlogPosition:
    """The end of the source's last transaction (a BINLOG_CHECKPOINT may follow it)."""
    conn = stack.root_connection()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file = str(cur.fetchone()[0])  # type: ignore[index]
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}'")
        ends = [int(e[4]) for e in cur.fetchall() if e[2] in ("Xid", "Query", "Format_desc")]
    conn.close()
    return BinlogPosition(file, ends[-1])


def stored_position(redis_url: str, prefix: str) -> BinlogPosition | None:
    with redis.Redis.from_url(redis_url) as r:
        stored = decode_checkpoint(r.hgetall(f"{prefix}:__checkpoint"))
    return stored.checkpoint.position if stored else None


def wait_for(stack: LocalStack, prefix: str, timeout: float = 3600) -> None:
    info = stack.load()
    assert info is not None
    target = last_commit(stack)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = stored_position(info.redis_url, prefix)
        if at is not None and not at < target:
            return
        time.sleep(0.01)
    raise SystemExit(f"{prefix}: the mirror did not reach {target}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)


def case(stack: LocalStack, name: str, fmt: str | None, ids: list[int], log: Path) -> dict[str, Any]:
    prefix = f"db{uuid.uuid4().hex[:6]}"
    config = None
    if fmt is not None:
        config = WORK / f"documents-{prefix}.toml"
        config.write_text(document(prefix, fmt))
    proc = run(stack, prefix, config, log)
    copy_started = time.monotonic()
    info = stack.load()
    assert info is not None
    while stored_position(info.redis_url, prefix) is None:
        time.sleep(0.05)
    wait_for(stack, prefix)
    r = redis.Redis.from_url(info.redis_url)
    while set(r.hkeys(f"{prefix}:__resync")) - {b"__gen"}:  # the first copy of each table
        time.sleep(0.1)
    copy_seconds = time.monotonic() - copy_started
    stop(proc)
    conn = stack.root_connection(DB)
    conn.autocommit(True)
    with conn.cursor() as cur:
        for line in ids:
            cur.execute("UPDATE order_lines SET qty = qty + 1 WHERE id = %s", (line,))
    conn.close()
    settle_aof(r)  # (the copy's AOF rewritten first: else it lands in whichever run comes next)
    started = time.monotonic()
    proc = run(stack, prefix, config, log)
    wait_for(stack, prefix)
    seconds = time.monotonic() - started
    stop(proc)
    if config is not None:
        config.unlink()
    return {
        "case": name,
        "updates": len(ids),
        "seconds": round(seconds, 2),
        "updates_per_s": round(len(ids) / seconds),
        "copy_seconds": round(copy_seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    args = parser.parse_args()
    stack, _ = bench_stack()
    log = WORK / "documents.log"
    rng = random.Random(1)
    results = []
    try:
        load(stack, args.orders)
        lines = [rng.randint(1, args.orders * 5) for _ in range(args.updates)]
        big = [args.orders * 5 + rng.randint(1, BIG) for _ in range(args.updates)]
        for name, fmt, ids in (
            ("lone rows", None, lines),
            ("json", "json", lines),
            ("hash", "hash", lines),
            ("big lone", None, big),
            ("big hash", "hash", big),
        ):
            results.append(case(stack, name, fmt, ids, log))
            print(json.dumps(results[-1]), flush=True)
    finally:
        if not args.keep_stack:
            stack.down()
    rows = [[r["case"], str(r["updates"]), f"{r['seconds']:.2f}", f"{r['updates_per_s']:,}"] for r in results]
    table = markdown_table(["case", "updates", "seconds (whole process)", "updates/s"], rows)
    print(table)
    (WORK / "documents-results.json").write_text(
        json.dumps({"machine": machine(), "results": results}, indent=1)
    )
    (WORK / "documents-results.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
