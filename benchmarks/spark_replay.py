"""Replay benchmark: `binlog-mirror replay DIR --out OUT` as a user runs it (a whole process, the
JVM start included) next to one `binlog-mirror decode FILE... > /dev/null` process on the same files.

    .venv/bin/python -m benchmarks.spark_replay [--rows 200000] [--files 8] [--masters local[*],local[1]]
                                                [--repeat 2] [--keep-stack] [--binlogs DIR]

Writes `--rows` row changes (inserts and updates of a 12-column table, 500 rows a transaction)
over `--files` binlog files (FLUSH BINARY LOGS) on a local stack (benchmarks/.work/spark-stack),
copies them to a directory of their own, then runs alternating rounds of

    decode      python -m service decode FILE... > /dev/null (one process, JSON lines written)
    replay M    python -m service replay DIR --out OUT --master M --overwrite, for each master

and keeps each command's fastest round (other load only slows a run down). `--files 1` writes one
big file (up to 1 GiB, MariaDB's largest; 3,800,000 rows make ~1 GB): what splitting a file into
ranges is for. rows/s = row changes / wall seconds.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from service.devtools.stack import LocalStack

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
        # one file per --files (the stack rotates at max_binlog_size, 64 MiB): up to 1 GiB each
        cur.execute("SELECT @@max_binlog_size")
        max_size = int(cur.fetchone()[0])  # type: ignore[index]
        cur.execute("SET GLOBAL max_binlog_size = 1073741824")
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
        cur.execute(f"SET GLOBAL max_binlog_size = {max_size}")
        cur.execute("SELECT @@log_bin_basename")
        base = Path(str(cur.fetchone()[0]))  # type: ignore[index]
        cur.execute("SHOW BINARY LOGS")
        names = [str(r[0]) for r in cur.fetchall()][:-1]
    conn.close()
    return [base.parent / n for n in names if n >= first]


def _timed(cmd: list[str], out: Path | None = None) -> float:
    """Wall seconds of one whole process (start-up included); stdout to /dev/null."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return seconds


def _replayed_rows(out: Path) -> int:
    return int(json.loads((out / "_replay.json").read_text())["changes"])


def rounds(files: list[Path], scratch: Path, masters: list[str], repeat: int) -> dict[str, list[float]]:
    """Alternating rounds of each command; every replay's row count is checked."""
    py = sys.executable
    inputs = scratch / "binlogs"
    inputs.mkdir()
    for f in files:
        shutil.copy(f, inputs / f.name)
    local = sorted(inputs.iterdir())
    times: dict[str, list[float]] = {}
    for _ in range(repeat):
        times.setdefault("decode", []).append(_timed([py, "-m", "service", "decode", *map(str, local)]))
        for master in masters:
            out = scratch / "out"
            cmd = [
                py,
                "-m",
                "service",
                "replay",
                str(inputs),
                "--out",
                str(out),
                "--master",
                master,
                "--overwrite",
            ]
            times.setdefault(f"replay {master}", []).append(_timed(cmd))
            times.setdefault(f"rows {master}", []).append(_replayed_rows(out))
    return times


def compact_load(stack: LocalStack, scratch: Path, master: str) -> dict[str, list[float]]:
    """`compact OUT --out STATE`, then `load STATE` into a fresh prefix of the stack's Redis."""
    info = stack.load()
    assert info is not None
    py, state = sys.executable, scratch / "state"
    prefix = f"bench{int(time.time())}"
    # into an empty Redis (the stack is the benchmark's own): an earlier round's millions of keys
    # left in it made the same load 2x slower (33 s against 14 s for 1,500,500 rows)
    import redis

    with redis.Redis.from_url(info.redis_url) as r:
        r.flushdb()
    compact = _timed(
        [py, "-m", "service", "compact", str(scratch / "out"), "--out", str(state), "--master", master]
    )
    rows = sum(json.loads((state / "_compact.json").read_text())["rows"].values())
    load = _timed(
        [
            py,
            "-m",
            "service",
            "load",
            str(state),
            "--redis",
            info.redis_url,
            "--prefix",
            prefix,
            "--master",
            master,
        ]
    )
    console.print(
        f"compact {master}: {compact:.2f} s, load: {load:.2f} s, {rows} rows "
        f"({rows / (compact + load):,.0f} rows/s)"
    )
    return {"compact": [compact], "load": [load], "state rows": [rows]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--masters", default="local[*],local[1]", help="comma-separated Spark masters")
    parser.add_argument("--repeat", type=int, default=2, help="alternating rounds; the fastest is kept")
    parser.add_argument(
        "--compact-load", action="store_true", help="then time compact and load of the last replay's output"
    )
    parser.add_argument("--keep-stack", action="store_true", help="leave the stack running")
    parser.add_argument(
        "--binlogs",
        help="replay these files (a directory of an earlier run's copies) instead of writing new ones: "
        "the same input for before/after rounds of two trees",
    )
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    stack = LocalStack(WORK / "spark-stack")
    stack.up()
    scratch = Path(tempfile.mkdtemp(prefix="spark-replay-bench-"))
    try:
        if args.binlogs:
            paths = sorted(p for p in Path(args.binlogs).iterdir() if p.is_file())
        else:
            paths = generate(stack, args.rows, args.files)
        size = sum(p.stat().st_size for p in paths)
        masters = args.masters.split(",")
        times = rounds(paths, scratch, masters, args.repeat)
        if args.compact_load:
            times.update(compact_load(stack, scratch, masters[0]))
        decode = min(times["decode"])
        table = Table(title=f"{len(paths)} files, {size / 1e6:.1f} MB, {args.rows} rows asked")
        for col in ("command", "rows", "best s", "rounds s", "rows/s", "vs decode"):
            table.add_column(col, justify="right")
        rows = int(times[f"rows {masters[0]}"][0])
        table.add_row(
            "decode > /dev/null",
            str(rows),
            f"{decode:.2f}",
            " ".join(f"{t:.2f}" for t in times["decode"]),
            f"{rows / decode:,.0f}",
            "1.00x",
        )
        for m in masters:
            best = min(times[f"replay {m}"])
            n = int(times[f"rows {m}"][0])
            table.add_row(
                f"replay {m}",
                str(n),
                f"{best:.2f}",
                " ".join(f"{t:.2f}" for t in times[f"replay {m}"]),
                f"{n / best:,.0f}",
                f"{decode / best:.2f}x",
            )
        console.print(table)
        console.print(json.dumps({"files": len(paths), "bytes": size, "times": times}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.keep_stack:
            stack.down()


if __name__ == "__main__":
    main()
