"""Replication-stream benchmark: binlog-mirror's transport next to its peers, same server, same ranges.

    .venv/bin/python -m benchmarks.stream [--rows 1000000] [--only ours,zongji] [--repeat 3] [--keep-stack]

For each workload (benchmarks.workload: 1M-row inserts, 1M-row updates, 100k single-row
transactions, each in its own binlog file), each tool streams the workload's binlog range from
the benchmark stack's MariaDB as a replica, in its own process, and counts row changes:

  binlog-mirror             service.transport.BinlogSource -> Transactions (benchmarks.ours_stream)
  python-mysql-replication  BinLogStreamReader (benchmarks/peers/pymysqlrepl_count.py)
  zongji (Node.js)          ZongJi (benchmarks/peers/zongji_count.js)

Reported per tool: rows/s and MB/s of the tool's own timed loop, CPU seconds per row (ru_utime +
ru_stime of the whole process from wait4, start-up included), peak RSS (wait4), and for
binlog-mirror the p99 event-loop lag measured by a concurrent task while it streams, on the wall
clock and on the process's CPU clock (the wall-clock figure includes the time other processes
held the cores; see benchmarks/ours_stream.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass

from rich.console import Console
from rich.table import Table

from benchmarks.harness import (
    HERE,
    bench_stack,
    ensure_zongji,
    last_json,
    machine,
    markdown_table,
    run_measured,
)
from benchmarks.workload import WORK, Workload, load_or_generate

console = Console(width=200)
OURS, PYMYSQLREPL, ZONGJI = "binlog-mirror (transport)", "python-mysql-replication", "zongji (Node.js)"


@dataclass
class Result:
    tool: str
    workload: str
    rows: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    rss_mb: float = 0.0
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    lag_cpu_p99_ms: float | None = None
    error: str = ""

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def commands(mysql_url: str, port: int, password: str) -> dict[str, object]:
    py = sys.executable
    server = ["127.0.0.1", str(port), "mirror", password]

    def ours(w: Workload) -> tuple[list[str], None]:
        return [py, "-m", "benchmarks.ours_stream", mysql_url, w.file, str(w.start), str(w.end)], None

    def pymysqlrepl(w: Workload) -> tuple[list[str], None]:
        script = str(HERE / "peers" / "pymysqlrepl_count.py")
        return [py, script, *server, w.file, str(w.start), str(w.end)], None

    out: dict[str, object] = {OURS: ours, PYMYSQLREPL: pymysqlrepl}
    modules = ensure_zongji(console)
    if modules is not None:

        def zongji(w: Workload) -> tuple[list[str], dict[str, str]]:
            env = {**os.environ, "NODE_PATH": str(modules)}
            script = str(HERE / "peers" / "zongji_count.js")
            return ["node", script, *server, w.file, str(w.start), str(w.end)], env

        out[ZONGJI] = zongji
    else:
        console.print("[yellow]node/npm not found: zongji skipped[/]")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    parser.add_argument("--only", default="", help="comma-separated substrings of tool names to run")
    parser.add_argument("--workloads", default="", help="comma-separated workload names (default: all)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds per workload, the tools alternating; each tool's fastest round is reported "
        "(the machine's noise is one-sided: other load only ever slows a run down)",
    )
    args = parser.parse_args()

    stack, info = bench_stack()
    try:
        workloads = load_or_generate(stack, args.rows, args.regenerate)
        if args.workloads:
            workloads = [w for w in workloads if w.name in args.workloads.split(",")]
        tools = {
            name: make
            for name, make in commands(info.mysql_url, info.mysql_port, info.repl_password).items()
            if not args.only or any(s.strip() in name for s in args.only.split(","))
        }
        env_info = machine()
        results: list[Result] = []
        for w in workloads:
            best: dict[str, Result] = {}
            for _ in range(args.repeat):
                for name, make in tools.items():
                    r = measure(name, w, *make(w))  # type: ignore[operator]
                    if name not in best or (r.rate > best[name].rate and not r.error):
                        best[name] = r
            results += best.values()
        md = report(workloads, results, env_info, args.repeat)
        (WORK / "stream-results.md").write_text(md + "\n")
        out = {"machine": env_info, "workloads": [asdict(w) for w in workloads]}
        out["results"] = [asdict(r) for r in results]
        (WORK / "stream-results.json").write_text(json.dumps(out, indent=2))
    finally:
        if not args.keep_stack:
            stack.down()


def measure(name: str, w: Workload, cmd: list[str], env: dict[str, str] | None) -> Result:
    r = Result(name, w.name)
    try:
        m = run_measured(cmd, env)
        data = last_json(m.out)
        r.rows, r.seconds, r.cpu_s, r.rss_mb = data["rows"], data["seconds"], m.cpu_s, m.rss_mb
        r.lag_p99_ms, r.lag_max_ms = data.get("lag_p99_ms"), data.get("lag_max_ms")
        r.lag_cpu_p99_ms = data.get("lag_cpu_p99_ms")
    except (RuntimeError, ValueError, KeyError) as exc:
        r.error = str(exc)[:80]
    console.print(f"  {w.name:8} {name:28} rows={r.rows:>9,} {r.seconds:8.2f}s cpu={r.cpu_s:6.2f}s {r.error}")
    return r


def report(
    workloads: list[Workload], results: list[Result], env_info: dict[str, str], repeat: int = 1
) -> str:
    cols = ["workload", "tool", "rows", "seconds", "rows/s", "MB/s", "CPU µs/row", "peak RSS MB"]
    cols += ["loop lag p99 ms", "lag p99 ms (CPU clock)", "vs pymysqlrepl", "vs zongji"]
    by_name = {w.name: w for w in workloads}

    def peer(r: Result, tool: str) -> Result | None:
        return next((p for p in results if p.workload == r.workload and p.tool == tool and p.rate), None)

    rows: list[list[str]] = []
    for r in results:
        w = by_name[r.workload]
        if r.error:
            rows.append([r.workload, r.tool, "-", "-", r.error, *[""] * 7])
            continue
        ratios = []
        for tool in (PYMYSQLREPL, ZONGJI):
            p = peer(r, tool)
            ratios.append(f"{r.rate / p.rate:.2f}x" if p and p.tool != r.tool else "")
        rows.append(
            [
                r.workload,
                r.tool,
                f"{r.rows:,}",
                f"{r.seconds:.2f}",
                f"{r.rate:,.0f}",
                f"{w.bytes / r.seconds / 1e6:.1f}" if r.seconds else "",
                f"{r.cpu_s / r.rows * 1e6:.1f}" if r.rows else "",
                f"{r.rss_mb:.0f}",
                f"{r.lag_p99_ms:.1f}" if r.lag_p99_ms is not None else "",
                f"{r.lag_cpu_p99_ms:.1f}" if r.lag_cpu_p99_ms is not None else "",
                *ratios,
            ]
        )
    title = "Replication stream from the server (" + ("one run; " if repeat == 1 else f"best of {repeat}; ")
    title += f"{env_info['nproc']} cores, commit {env_info['commit']})"
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("workload", "tool") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return markdown_table(cols, rows)


if __name__ == "__main__":
    main()
