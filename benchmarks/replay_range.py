"""A replay range's cost per row change, in one process without Spark (issue 42).

    PYTHONPATH=. .venv/bin/python -m benchmarks.replay_range [--file BINLOG] [--rows 50000] [--repeat 5]
                                                              [--canonical] [--profile] [--keep-stack]

Does what a `replay` executor does with one binlog file: the driver's scan (`scan_file`, the
table versions, each table's union columns), then `decode_range` of the file's whole range into
a scratch directory (pyarrow's Parquet writes included). Prints µs per row change of each round
and the best, beside the decoder's own cost (`BinlogDecoder.feed` over the same file, the events
only) and the load average.

Without `--file` it writes the file first: `--rows` row changes of benchmarks.spark_replay's
12-column table (inserts and updates, 500 rows a transaction) in one binlog file of a local stack
(benchmarks/.work/spark-stack, stopped afterwards unless --keep-stack), copied to a scratch dir.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from service.batch.changes import RangeTask, decode_options, decode_range
from service.batch.ranges import scan_file
from service.batch.replay import SPLIT_BYTES, _catalog, _log_table
from service.binlog import BinlogDecoder, scan_binlog_file
from service.devtools.build_decoder import is_compiled
from service.transactions import TableFilter


def make_file(rows: int, keep_stack: bool, into: Path) -> Path:
    from benchmarks.spark_replay import WORK, generate
    from service.devtools.stack import LocalStack

    WORK.mkdir(exist_ok=True)
    stack = LocalStack(WORK / "spark-stack")
    stack.up()
    try:
        paths = generate(stack, rows, 1)
        big = max(paths, key=lambda p: p.stat().st_size)
        shutil.copy(big, into / big.name)
        return into / big.name
    finally:
        if not keep_stack:
            stack.down()


def feed_only(path: str) -> float:
    decoder = BinlogDecoder(decode_options(None), file=os.path.basename(path))
    t0 = time.perf_counter()
    for offset, data in scan_binlog_file(path, 4, None):
        decoder.feed(data, offset)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--file", help="a binlog file (else one is written on a local stack)")
    parser.add_argument("--rows", type=int, default=50_000, help="row changes of the written file")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the best is kept")
    parser.add_argument("--canonical", action="store_true", help="also the canonical JSON images")
    parser.add_argument("--profile", action="store_true", help="one more round under cProfile")
    parser.add_argument("--keep-stack", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="replay-range-bench-"))
    try:
        path = args.file or str(make_file(args.rows, args.keep_stack, scratch))
        tables = TableFilter()
        scan = scan_file(path, 0, tables, decode_options(None), SPLIT_BYTES)
        log_tables = tuple(_log_table(c) for c in _catalog([scan], []))
        (rng,) = scan.ranges[:1]
        task = RangeTask(rng, str(scratch / "out"), tables, log_tables, args.canonical)
        changes = 0
        times = []
        for _ in range(args.repeat):
            shutil.rmtree(scratch / "out", ignore_errors=True)
            t0 = time.perf_counter()
            result = decode_range(task)
            times.append(time.perf_counter() - t0)
            changes = sum(result.changes.values())
        feed = min(feed_only(path) for _ in range(args.repeat))
        build = "compiled" if is_compiled() else "pure"
        print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB, {changes} changes, {build} decoder")
        print("decode_range s: " + " ".join(f"{t:.3f}" for t in times))
        print(f"decode_range: {min(times) / changes * 1e6:.2f} µs/change (best of {args.repeat})")
        print(f"decoder feed: {feed / changes * 1e6:.2f} µs/change (best of {args.repeat})")
        print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        if args.profile:
            import cProfile
            import pstats

            shutil.rmtree(scratch / "out", ignore_errors=True)
            prof = cProfile.Profile()
            prof.runcall(decode_range, task)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
