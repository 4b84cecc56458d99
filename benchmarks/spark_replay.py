"""Replay benchmark: `binlog-mirror replay` on Spark local[1] and local[2] next to the
single-process decode of the same binlog files.

    .venv/bin/python -m benchmarks.spark_replay [--rows 200000] [--files 8] [--keep-stack]

Writes `--rows` row changes (inserts and updates of a 12-column table, 500 rows a transaction)
over `--files` binlog files (FLUSH BINARY LOGS) on a local stack (benchmarks/.work/spark-stack),
then measures, on exactly those files:

    decode      one process: the decoder over every file, row changes counted (benchmarks.ours_file's loop)
    local[1]    replay_to_parquet on a local[1] session: decode in a Spark task, Arrow batches,
                typed Parquet per table (the JVM start is excluded: the session exists before)
    local[2]    the same with two executor threads

rows/s = row changes / wall seconds. Results are printed as a table and as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from service.binlog import BinlogDecoder, RowsEvent, TransactionPayloadEvent, scan_binlog_file
from service.devtools.stack import LocalStack
from service.transactions import TableFilter

WORK = Path(__file__).resolve().parent / ".work"
console = Console()


def generate(stack: LocalStack, rows: int, files: int) -> list[Path]:
    conn = stack.root_connection()
    per_file = max(1, rows // files)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS sparkbench")
        cur.execute("CREATE DATABASE sparkbench")
        cur.execute(
            "CREATE TABLE sparkbench.t (id INT PRIMARY KEY, big BIGINT, name VARCHAR(64), "
            "amount DECIMAL(12,2), happened DATETIME(6), stamp TIMESTAMP(3) NULL, ratio DOUBLE, "
            "body TEXT, state ENUM('new','paid','void'), raw VARBINARY(16), doc JSON, flag TINYINT)"
        )
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        first = str(cur.fetchone()[0])  # type: ignore[index]
        next_id = 0
        for _ in range(files):
            written = 0
            while written < per_file:
                n = min(500, per_file - written)
                if next_id >= n and written % 2000 == 0:  # some updates too
                    cur.execute(
                        "UPDATE sparkbench.t SET amount = amount + 1, name = CONCAT(name, 'u') "
                        f"WHERE id BETWEEN {next_id - n} AND {next_id - 1}"
                    )
                else:
                    values = ", ".join(
                        f"({i}, {i * 7919}, 'name-{i}', {i % 10000}.25, "
                        f"'2024-01-02 03:04:05.{i % 1000000:06d}', '2024-05-06 07:08:09.123', {i / 7}, "
                        f"'body text {i}', 'paid', x'0a0b0c{i % 256:02x}', '{{\"k\": {i}}}', {i % 2})"
                        for i in range(next_id, next_id + n)
                    )
                    cur.execute(f"INSERT INTO sparkbench.t VALUES {values}")
                    next_id += n
                conn.commit()
                written += n
            cur.execute("FLUSH BINARY LOGS")
        cur.execute("SELECT @@log_bin_basename")
        base = Path(str(cur.fetchone()[0]))  # type: ignore[index]
        cur.execute("SHOW BINARY LOGS")
        names = [str(r[0]) for r in cur.fetchall()][:-1]
    conn.close()
    return [base.parent / n for n in names if n >= first]


def single_process_decode(paths: list[Path]) -> tuple[int, float]:
    rows = 0
    t0 = time.perf_counter()
    for path in paths:
        decoder = BinlogDecoder(file=path.name)
        for offset, data in scan_binlog_file(path):
            event = decoder.feed(data, offset)
            if event is None:
                continue
            inner = event.events if isinstance(event, TransactionPayloadEvent) else (event,)
            for ev in inner:
                if type(ev) is RowsEvent:
                    rows += len(ev.changes)
    return rows, time.perf_counter() - t0


def spark_replay(master: str, paths: list[Path], out: Path) -> tuple[int, float]:
    from service.batch.replay import replay_to_parquet
    from service.batch.session import spark_session

    spark = spark_session(master, f"bench {master}")
    try:
        spark.range(1).count()  # the JVM and the Python worker are up before the clock starts
        t0 = time.perf_counter()
        summary = replay_to_parquet(
            spark, [str(p) for p in paths], str(out), TableFilter(("sparkbench.*",)), overwrite=True
        )
        return summary.changes, time.perf_counter() - t0
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--keep-stack", action="store_true", help="leave the stack running")
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    stack = LocalStack(WORK / "spark-stack")
    stack.up()
    scratch = Path(tempfile.mkdtemp(prefix="spark-replay-bench-"))
    try:
        paths = generate(stack, args.rows, args.files)
        size = sum(p.stat().st_size for p in paths)
        results = []
        rows, secs = single_process_decode(paths)
        results.append(("decode (1 process)", rows, secs))
        for master in ("local[1]", "local[2]"):
            n, s = spark_replay(master, paths, scratch / master.replace("[", "").replace("]", ""))
            results.append((f"replay {master}", n, s))
        table = Table(title=f"{len(paths)} files, {size / 1e6:.1f} MB, {rows} row changes")
        for col in ("job", "rows", "seconds", "rows/s"):
            table.add_column(col, justify="right")
        for job, n, s in results:
            table.add_row(job, str(n), f"{s:.2f}", f"{n / s:,.0f}")
        console.print(table)
        doc = {
            "files": len(paths),
            "bytes": size,
            "results": [{"job": j, "rows": n, "seconds": s} for j, n, s in results],
        }
        console.print(json.dumps(doc))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.keep_stack:
            stack.down()


if __name__ == "__main__":
    main()
