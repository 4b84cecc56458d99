"""End-to-end benchmark: binlog -> Redis, binlog-mirror's Replicator next to a python-mysql-replication peer.

    .venv/bin/python -m benchmarks.e2e [--rows 1000000] [--quick] [--only ours,peer] [--repeat N]
                                       [--latency-rate 2000] [--latency-seconds 20] [--keep-stack]

Throughput: each tool mirrors the workloads' binlog ranges (benchmarks.workload: inserts, then
updates of those rows, then small transactions) in order, each in a process of its own, into the
benchmark stack's Redis under one key prefix, starting from an empty Redis (FLUSHDB before each
tool: the benchmark stack's Redis belongs to the benchmarks); the updates change stored rows:

  binlog-mirror   service.pipeline.replicator.Replicator, tables bench.*, start = "FILE:START"
                  (later workloads resume from the stored checkpoint: the previous workload's
                  end, an empty binlog file before); timed until the on_applied hook sees the
                  transaction that ends at END (its checkpoint is stored with it) (benchmarks.ours_e2e replay)
  peer            python-mysql-replication + redis-py, one MULTI/EXEC pipeline (rows + checkpoint)
                  per source transaction (benchmarks/peers/pymysqlrepl_redis.py)

rows/s, the process's CPU (wait4), the Redis server's CPU during the run (/proc), peak RSS, and
the Redis key count afterwards (a cross-check that both wrote every row; it adds up over the
workloads of a tool). Before every timed workload of either tool, Redis' append-only file is
rewritten (BGREWRITEAOF, waited for), so each run starts from the same compacted AOF and only its
own writes can trigger an automatic rewrite during it; the table counts those rewrites and their
child process's CPU (--no-aof-settle: leave the AOF as the previous run left it). --repeat N:
N rounds per tool, the tools' order alternating from round to round; the table shows each tool's
fastest round per workload, and every round's time follows it.

Latency: a writer process commits single-row INSERT transactions at a steady rate (default 2,000
txn/s for 20 s) into bench_live.t_latency while the Replicator (its own process) mirrors that table;
the replicator's on_applied hook records when each row's transaction was applied; latency =
apply time - the writer's commit-return time (one CLOCK_MONOTONIC for all processes). The
Replicator's RSS is sampled every 0.5 s to show whether memory stays flat.

--quick: 100,000-row workloads (generated once, in new binlog files) and a 5 s latency run.
BINLOG_MIRROR_VALUE_MODE=json: binlog-mirror's replay writes the json layout (the peer still writes
hashes, so that is not the same job).
"""

from __future__ import annotations

import argparse
import array
import json
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import redis
from rich.console import Console
from rich.table import Table

from benchmarks import writer
from benchmarks.harness import (
    HERE,
    Child,
    RssSampler,
    bench_stack,
    clock,
    cpu_seconds,
    last_json,
    machine,
    markdown_table,
    percentile,
    run_measured,
)
from benchmarks.workload import WORK, Workload, load_or_generate
from service.devtools.stack import StackInfo

console = Console(width=200)
OURS, PEER = "binlog-mirror (Replicator)", "python-mysql-replication + redis-py"
LATENCY_TABLE = "bench_live.t_latency"


@dataclass
class Result:
    tool: str
    workload: str
    rows: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    redis_cpu_s: float = 0.0
    mariadb_cpu_s: float = 0.0  # the source server's CPU during the run (its binlog dump thread)
    aof_rewrites: int = 0  # automatic AOF rewrites during the run
    rewrite_cpu_s: float = 0.0  # their child processes' CPU (not in redis_cpu_s)
    rss_mb: float = 0.0
    keys: int = 0
    error: str = ""
    round: int = 1

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def _commands(info: StackInfo, w: Workload, prefix: str) -> dict[str, list[str]]:
    py = sys.executable
    ours = [py, "-m", "benchmarks.ours_e2e", "replay", info.mysql_url, info.redis_url, prefix]
    peer = [py, str(HERE / "peers" / "pymysqlrepl_redis.py"), "127.0.0.1", str(info.mysql_port)]
    peer += ["mirror", info.repl_password, w.file, str(w.start), str(w.end), info.redis_url, prefix]
    return {OURS: [*ours, w.file, str(w.start), str(w.end)], PEER: peer}


def aof_persistence(r: redis.Redis) -> tuple[int, float]:
    """AOF rewrites so far, and the CPU seconds of the Redis children reaped so far."""
    info = r.info("persistence", "cpu")
    return int(info.get("aof_rewrites", 0)), info["used_cpu_sys_children"] + info["used_cpu_user_children"]


def settle_aof(r: redis.Redis) -> None:
    """Rewrite Redis' AOF and wait for it. A rewrite is a forked child copying the whole dataset
    (6.2 s of CPU at 1M rows): on a 2-core machine, whichever run it lands in loses a third of a
    core, and whether it does depends on how much AOF the runs before it left, not on the tool."""
    if r.info("persistence").get("aof_enabled") != 1:
        return
    try:
        r.bgrewriteaof()
    except redis.ResponseError:
        pass  # one already in progress: wait for it
    wait_aof(r)


def wait_aof(r: redis.Redis) -> None:
    """Wait until no AOF rewrite is running or scheduled."""
    while True:
        p = r.info("persistence")
        if not p.get("aof_rewrite_in_progress") and not p.get("aof_rewrite_scheduled"):
            return
        time.sleep(0.2)


def throughput(
    info: StackInfo, workloads: list[Workload], only: str, repeat: int = 1, settle: bool = True
) -> list[Result]:
    """Every round of every tool (the tools alternate their order from round to round)."""
    r = redis.Redis.from_url(info.redis_url, socket_timeout=300)
    tools = [n for n in (OURS, PEER) if not only or any(s.strip() in n for s in only.split(","))]
    results: list[Result] = []
    for k in range(1, repeat + 1):
        for name in tools if k % 2 else tools[::-1]:
            # Each tool mirrors the workloads in order into one empty Redis, under one prefix: the
            # updates then change the rows the inserts wrote, as in a mirror that keeps up.
            r.flushdb()
            prefix = f"bench-{uuid.uuid4().hex[:8]}"
            for w in workloads:
                cmd = _commands(info, w, prefix)[name]
                res = Result(name, w.name, round=k)
                if settle:
                    settle_aof(r)
                rewrites, child_cpu = aof_persistence(r)
                redis_cpu = cpu_seconds(info.redis_pid or 0)
                mariadb_cpu = cpu_seconds(info.mysql_pid or 0)
                try:
                    m = run_measured(cmd, timeout=1800)
                    data = last_json(m.out)
                    res.rows, res.seconds, res.cpu_s, res.rss_mb = (
                        data["rows"],
                        data["seconds"],
                        m.cpu_s,
                        m.rss_mb,
                    )
                except (RuntimeError, ValueError, KeyError) as exc:
                    res.error = str(exc)[:100]
                res.redis_cpu_s = cpu_seconds(info.redis_pid or 0) - redis_cpu
                res.mariadb_cpu_s = cpu_seconds(info.mysql_pid or 0) - mariadb_cpu
                wait_aof(r)  # a rewrite the run started ends, and its child's CPU counts, here
                rewrites_after, child_after = aof_persistence(r)
                res.aof_rewrites, res.rewrite_cpu_s = rewrites_after - rewrites, child_after - child_cpu
                res.keys = int(r.dbsize())
                results.append(res)
                console.print(
                    f"  round {k} {w.name:8} {name:36} rows={res.rows:>9,} {res.seconds:7.2f}s "
                    f"cpu={res.cpu_s:6.2f}s redis-cpu={res.redis_cpu_s:5.2f}s "
                    f"mariadb-cpu={res.mariadb_cpu_s:5.2f}s "
                    f"aof-rewrites={res.aof_rewrites} ({res.rewrite_cpu_s:.1f}s) "
                    f"keys={res.keys:,} {res.error}"
                )
    r.flushdb()
    r.close()
    return results


def fastest(workloads: list[Workload], results: list[Result]) -> list[Result]:
    """Each tool's fastest round per workload (other load on the machine only ever slows a run)."""
    best: dict[tuple[str, str], Result] = {}
    for res in results:
        key = (res.tool, res.workload)
        cur = best.get(key)
        if cur is None or cur.error or (not res.error and res.rate > cur.rate):
            best[key] = res
    order = [w.name for w in workloads]
    return sorted(best.values(), key=lambda res: (order.index(res.workload), res.tool != OURS))


def latency(info: StackInfo, rate: float, seconds: float) -> dict[str, object]:
    n = int(rate * seconds)
    writer.recreate(info.admin_url, LATENCY_TABLE)
    redis.Redis.from_url(info.redis_url, socket_timeout=300).flushdb()
    applied_file, commits_file = WORK / "latency-applied.bin", WORK / "latency-commits.bin"
    cmd = [sys.executable, "-m", "benchmarks.ours_e2e", "live", info.mysql_url, info.redis_url]
    cmd += [f"lat-{uuid.uuid4().hex[:8]}", LATENCY_TABLE, "--expect", str(n), "--record", str(applied_file)]
    server = Child(cmd, WORK / "latency-replicator.log")
    try:
        server.read_json(timeout=60)
        sampler = RssSampler(server.pid, 0.5).start()
        cpu0, t0 = cpu_seconds(server.pid), clock()
        wcmd = [sys.executable, "-m", "benchmarks.writer", info.admin_url, LATENCY_TABLE, str(rate), "1"]
        wrote = last_json(run_measured([*wcmd, str(seconds), str(commits_file)]).out)
        t1 = clock()
        cpu1 = cpu_seconds(server.pid)
        done = server.finish(timeout=120)
    except BaseException:
        server.signal(signal.SIGKILL)
        raise
    samples = sampler.stop()
    applied = array.array("d")
    applied.frombytes(Path(applied_file).read_bytes())
    commits = array.array("d")
    commits.frombytes(Path(commits_file).read_bytes())
    lat = [(applied[i] - commits[i - 1]) * 1000 for i in range(1, n + 1) if applied[i]]
    during = [mb for t, mb in samples if t0 <= t <= t1]
    half = len(during) // 2
    return {
        "target_rate": rate,
        "writer": wrote,
        "applied": len(lat),
        "expected": n,
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat, default=float("nan")),
        "replicator_cpu_cores": (cpu1 - cpu0) / (t1 - t0),
        "rss_first_half_mb": max(during[:half], default=0.0),
        "rss_second_half_mb": max(during[half:], default=0.0),
        "rss_start_mb": during[0] if during else 0.0,
        "rss_end_mb": during[-1] if during else 0.0,
        "rss_peak_mb": done.rss_mb,
        "rss_samples": [round(mb, 1) for mb in during],
    }


def report(workloads: list[Workload], results: list[Result], env: dict[str, str], repeat: int = 1) -> str:
    cols = ["workload", "tool", "rows", "seconds", "rows/s", "CPU s", "Redis CPU s", "MariaDB CPU s"]
    cols += ["AOF rewrites (CPU s)", "peak RSS MB", "keys after", "vs peer"]
    rows: list[list[str]] = []
    for r in results:
        if r.error:
            rows.append([r.workload, r.tool, "-", "-", r.error, *[""] * 7])
            continue
        peer = next((p for p in results if p.workload == r.workload and p.tool == PEER and p.rate), None)
        rows.append(
            [
                r.workload,
                r.tool,
                f"{r.rows:,}",
                f"{r.seconds:.2f}",
                f"{r.rate:,.0f}",
                f"{r.cpu_s:.1f}",
                f"{r.redis_cpu_s:.1f}",
                f"{r.mariadb_cpu_s:.1f}",
                f"{r.aof_rewrites} ({r.rewrite_cpu_s:.1f})",
                f"{r.rss_mb:.0f}",
                f"{r.keys:,}",
                f"{r.rate / peer.rate:.2f}x" if peer and r.tool != PEER else "",
            ]
        )
    runs = "one run" if repeat == 1 else f"fastest of {repeat} alternating rounds"
    table = Table(title=f"binlog -> Redis ({runs}; {env['nproc']} cores, commit {env['commit']})")
    for col in cols:
        table.add_column(col, justify="left" if col in ("workload", "tool") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return markdown_table(cols, rows)


def cpu_budget(results: list[Result], cores: int) -> str:
    """Per workload, the CPU that 10x the peer leaves on this machine's cores, next to what the
    servers spent on the peer's own plain commands (MariaDB sending the binlog, Redis, the AOF
    rewrites its writes started) and what our run used in all. For how little Redis can spend
    on a workload's rows whatever the client, see benchmarks.redis_floor."""

    def parts(cpu: tuple[float, ...]) -> str:
        return " + ".join(f"{c:.1f}" for c in cpu)

    lines = []
    ok = [r for r in results if not r.error]
    for peer in (r for r in ok if r.tool == PEER):
        ours = next((r for r in ok if r.workload == peer.workload and r.tool == OURS), None)
        servers = (peer.mariadb_cpu_s, peer.redis_cpu_s, peer.rewrite_cpu_s)
        line = (
            f"{peer.workload}: 10x the peer = {peer.seconds / 10:.2f} s = "
            f"{cores * peer.seconds / 10:.1f} CPU-s on {cores} cores; MariaDB + Redis + AOF rewrites "
            f"on the peer's commands {sum(servers):.1f} CPU-s ({parts(servers)})"
        )
        if ours:
            used = (ours.cpu_s, ours.mariadb_cpu_s, ours.redis_cpu_s, ours.rewrite_cpu_s)
            line += (
                f"; ours {sum(used):.1f} CPU-s in {ours.seconds:.2f} s "
                f"({parts(used)}: ours + MariaDB + Redis + AOF rewrites)"
            )
        lines.append(f"- CPU budget, {line}")
    text = "\n".join(lines)
    console.print(text)
    return text


def round_times(workloads: list[Workload], rounds: list[Result]) -> str:
    """Seconds of every round, per workload and tool."""
    lines = []
    for w in workloads:
        for tool in (OURS, PEER):
            times = [f"{r.seconds:.2f}" for r in rounds if r.workload == w.name and r.tool == tool]
            if times:
                lines.append(f"- rounds, {w.name}, {tool}: {' / '.join(times)} s")
    text = "\n".join(lines)
    console.print(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=0, help="workload size (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="100,000-row workloads, 5 s latency run")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    parser.add_argument("--only", default="", help="comma-separated substrings of tool names to run")
    parser.add_argument("--workloads", default="", help="comma-separated workload names (default: all)")
    parser.add_argument("--latency-rate", type=float, default=2000.0, help="transactions/s")
    parser.add_argument("--latency-seconds", type=float, default=0.0, help="default 20 (5 with --quick)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds per tool, alternating; each tool's fastest is reported"
    )
    parser.add_argument(
        "--no-aof-settle", action="store_true", help="do not rewrite Redis' AOF before each timed run"
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    lat_seconds = args.latency_seconds or (5.0 if args.quick else 20.0)

    stack, info = bench_stack()
    try:
        env = machine()
        out: dict[str, object] = {"machine": env}
        md: list[str] = []
        if not args.skip_throughput:
            workloads = load_or_generate(stack, rows, args.regenerate)
            if args.workloads:
                workloads = [w for w in workloads if w.name in args.workloads.split(",")]
            rounds = throughput(info, workloads, args.only, args.repeat, not args.no_aof_settle)
            results = fastest(workloads, rounds)
            md.append(report(workloads, results, env, args.repeat))
            md.append(cpu_budget(results, int(env["nproc"])))
            if args.repeat > 1:
                md.append(round_times(workloads, rounds))
            out["workloads"] = [asdict(w) for w in workloads]
            out["throughput"] = [asdict(r) for r in results]
            out["throughput_rounds"] = [asdict(r) for r in rounds]
        if not args.skip_latency:
            lat = latency(info, args.latency_rate, lat_seconds)
            out["latency"] = lat
            w = lat["writer"]
            assert isinstance(w, dict)
            lines = [
                f"latency run: writer {w['rate']:,.0f} txn/s achieved (target {args.latency_rate:,.0f}) "
                f"for {w['seconds']:.1f} s; {lat['applied']:,}/{lat['expected']:,} rows applied",
                f"commit -> Redis: p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, "
                f"max {lat['max_ms']:.1f} ms; replicator CPU {lat['replicator_cpu_cores']:.2f} cores",
                f"replicator RSS during the run: start {lat['rss_start_mb']:.0f} MB, end "
                f"{lat['rss_end_mb']:.0f} MB, max first half {lat['rss_first_half_mb']:.0f} MB, "
                f"max second half {lat['rss_second_half_mb']:.0f} MB",
            ]
            for line in lines:
                console.print(line)
            md.append("\n".join(f"- {line}" for line in lines))
        (WORK / "e2e-results.json").write_text(json.dumps(out, indent=2))
        (WORK / "e2e-results.md").write_text("\n\n".join(md) + "\n")
    finally:
        if not args.keep_stack:
            stack.down()


if __name__ == "__main__":
    main()
