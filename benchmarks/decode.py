"""Decode benchmark: binlog-mirror next to its peers on the same binlog, in one run.

    .venv/bin/python -m benchmarks.decode [--rows 1000000] [--regenerate] [--keep-stack]

Each tool runs in its own process and reports the row changes it decoded and the seconds its
decode loop took (start-up and connect excluded); peak RSS comes from wait4() of that process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.harness import ensure_zongji, run_measured
from benchmarks.workload import WORK, Workload, load_or_generate
from service.devtools.stack import LocalStack

HERE = Path(__file__).resolve().parent
console = Console()


@dataclass
class Result:
    tool: str
    workload: str
    rows: int
    seconds: float
    rss_mb: float
    error: str = ""


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[str, str, float]:
    m = run_measured(cmd, env, timeout)
    return m.out, m.err, m.rss_mb


def tools(stack: LocalStack, zongji_modules: Path | None) -> dict[str, object]:
    info = stack.load()
    assert info is not None
    server = ["127.0.0.1", str(info.mysql_port), "mirror", info.repl_password]
    binlog_dir = stack.mysql_dir / "binlog"
    py = sys.executable

    def ours_file(w: Workload) -> list[str]:
        return [py, "-m", "benchmarks.ours_file", str(binlog_dir / w.file), str(w.start), str(w.end)]

    def pymysqlrepl(w: Workload) -> list[str]:
        return [py, str(HERE / "peers" / "pymysqlrepl_count.py"), *server, w.file, str(w.start), str(w.end)]

    def mariadb_binlog(w: Workload) -> list[str]:
        return [
            py,
            "-m",
            "benchmarks.timed",
            "mariadb-binlog",
            "-v",
            f"--start-position={w.start}",
            f"--stop-position={w.end}",
            str(binlog_dir / w.file),
        ]

    out: dict[str, object] = {"binlog-mirror (file)": ours_file, "python-mysql-replication": pymysqlrepl}
    if zongji_modules is not None:

        def zongji(w: Workload) -> tuple[list[str], dict[str, str]]:
            script = HERE / "peers" / "zongji_count.js"
            env = {**os.environ, "NODE_PATH": str(zongji_modules)}
            return ["node", str(script), *server, w.file, str(w.start), str(w.end)], env

        out["zongji (Node.js)"] = zongji
    out["mariadb-binlog -v (C)"] = mariadb_binlog
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    parser.add_argument("--only", default="", help="comma-separated substrings of tool names to run")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds per workload, tools alternating; the fastest is reported",
    )
    args = parser.parse_args()

    WORK.mkdir(exist_ok=True)
    stack = LocalStack(WORK / "stack")
    stack.up()
    try:
        workloads = load_or_generate(stack, args.rows, args.regenerate)
        selected = {
            name: make
            for name, make in tools(stack, ensure_zongji(console)).items()
            if not args.only or any(s.strip() in name for s in args.only.split(","))
        }
        results: list[Result] = []
        for w in workloads:
            best: dict[str, Result] = {}
            for _ in range(args.repeat):  # as benchmarks.stream --repeat: each tool's fastest round
                for name, make in selected.items():
                    r = _measure(name, w, make(w))  # type: ignore[operator]
                    old = best.get(name)
                    if old is None or (not r.error and (old.error or r.seconds < old.seconds)):
                        best[name] = r
            results += best.values()
        report(workloads, results, args.repeat)
        (WORK / "results.json").write_text(json.dumps([r.__dict__ for r in results], indent=2))
    finally:
        if not args.keep_stack:
            stack.down()


def _measure(name: str, w: Workload, made: list[str] | tuple[list[str], dict[str, str]]) -> Result:
    cmd, env = made if isinstance(made, tuple) else (made, None)
    try:
        out, _, rss = _run(cmd, env)
        data = json.loads(out.strip().splitlines()[-1])
        r = Result(name, w.name, data["rows"], data["seconds"], rss)
    except (RuntimeError, ValueError, KeyError) as exc:
        r = Result(name, w.name, 0, 0.0, 0.0, str(exc)[:80])
    console.print(f"  {w.name:8} {name:28} rows={r.rows:>9,} {r.seconds:8.2f}s {r.error}")
    return r


def report(workloads: list[Workload], results: list[Result], repeat: int = 1) -> None:
    runs = "one run" if repeat == 1 else f"best of {repeat}"
    table = Table(title=f"Decode throughput ({runs}, same binlog)")
    for col in ("workload", "tool", "rows", "seconds", "rows/s", "MB/s", "peak RSS MB", "vs pymysqlrepl"):
        table.add_column(col, justify="right" if col not in ("workload", "tool") else "left")
    by_workload = {w.name: w for w in workloads}
    for r in results:
        w = by_workload[r.workload]
        if r.error:
            table.add_row(r.workload, r.tool, "-", "-", r.error, "", "", "")
            continue
        rate = r.rows / r.seconds if r.seconds else 0.0
        peer = next(
            (
                p
                for p in results
                if p.workload == r.workload and p.tool == "python-mysql-replication" and p.seconds
            ),
            None,
        )
        ratio = f"{rate / (peer.rows / peer.seconds):.1f}x" if peer else ""
        table.add_row(
            r.workload,
            r.tool,
            f"{r.rows:,}",
            f"{r.seconds:.2f}",
            f"{rate:,.0f}",
            f"{w.bytes / r.seconds / 1e6:.1f}" if r.seconds else "",
            f"{r.rss_mb:.0f}",
            ratio,
        )
    console.print(table)


if __name__ == "__main__":
    main()
