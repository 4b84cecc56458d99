"""API fan-out benchmark: websocket subscribers of /ws/events while a writer produces row changes.

    .venv/bin/python -m benchmarks.fanout [--subscribers 200] [--txn-rate 50] [--rows-per-txn 100]
                                          [--seconds 20] [--mode batch|change] [--client-procs 2]
                                          [--silent] [--keep-stack]

Processes on the benchmark stack:
  server       the Replicator + API in one event loop (benchmarks.ours_e2e live --api): what
               `binlog-mirror run` runs; mirrors bench_live.t_fanout from the current position
  subscribers  N websocket clients split over CLIENT_PROCS processes (benchmarks.subscribers; 2 by
               default: one client event loop for 200 sockets fell behind the server on this
               2-core machine while others' work ran), no permessage-deflate; --mode batch
               (default) subscribes with batch=true (many changes per message), --mode change
               gets one message per change;
               10 of them (spread evenly) parse every message for latency, the rest only count
  writer       TXN_RATE transactions/s x ROWS_PER_TXN rows (default 50 x 100 = 5,000 rows/s)
  this one     samples the server's CPU and RSS and polls GET /lag every 100 ms (httpx)

Reports the delivered rate per subscriber (min / median: its changes over the span between its
first and last one), how many rows and messages each received (min / median), how many
subscribers received every change and how many were closed (and why), the p50/p99
commit-to-delivery latency (writer's commit return -> the client's receive, one CLOCK_MONOTONIC),
the server's CPU (cores) and RSS, the subscriber processes' CPU, and the p50/p99 response time of
GET /lag under load.

--silent (issue 25: subscribers must not slow the apply): the subscribers never read (see
benchmarks.subscribers), and the server stops once it has applied every row; reports the apply
time (first commit -> last row applied in Redis, from the server's --record times), the slowest
GET /lag answer, and the server log's lease losses and asyncio send-failure lines. Run it with
--subscribers 0 too for the figure without subscribers (same writer, same stack), e.g.

    .venv/bin/python -m benchmarks.fanout --silent --mode change --txn-rate 40 --rows-per-txn 500 \
        --seconds 1 [--subscribers 0]
"""

from __future__ import annotations

import argparse
import array
import collections
import json
import os
import signal
import statistics
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis
from rich.console import Console

from benchmarks import writer
from benchmarks.harness import (
    Child,
    RssSampler,
    bench_stack,
    clock,
    cpu_seconds,
    last_json,
    machine,
    percentile,
    run_measured,
)
from benchmarks.workload import WORK

console = Console(width=200)
TABLE = "bench_live.t_fanout"
SAMPLED = 10  # subscribers that parse every message and record receive times


class LagPoller:
    """GET /lag every `interval` s in a thread; response times in ms and status codes."""

    def __init__(self, port: int, interval: float = 0.1) -> None:
        self.url = f"http://127.0.0.1:{port}/lag"
        self.interval = interval
        self.ms: list[float] = []
        self.codes: collections.Counter[int] = collections.Counter()
        self.last: dict[str, Any] = {}
        self.rows_waiting_max = 0  # the replicator's backlog (read, not yet applied) seen by any poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                t = clock()
                try:
                    resp = client.get(self.url)
                    self.codes[resp.status_code] += 1
                    self.last = resp.json()
                    self.rows_waiting_max = max(self.rows_waiting_max, self.last.get("rows_waiting") or 0)
                except httpx.HTTPError:
                    self.codes[0] += 1
                self.ms.append((clock() - t) * 1000)
                self._stop.wait(max(0.0, self.interval - (clock() - t)))

    def start(self) -> LagPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _start_subscribers(args: argparse.Namespace, port: int, total: int) -> list[tuple[Child, Path]]:
    """The subscriber processes (each with its share of subscribers and of the sampled ones),
    with the file each one writes its results to."""
    procs = max(1, min(args.client_procs, args.subscribers))
    clients: list[tuple[Child, Path]] = []
    for k in range(procs):
        n = args.subscribers // procs + (k < args.subscribers % procs)
        out = WORK / f"fanout-subscribers-{k}.json"
        cmd = [sys.executable, "-m", "benchmarks.subscribers", str(port), str(n), TABLE, str(total)]
        cmd += [str(args.seconds + args.grace), str(out), "--sample", str(-(-SAMPLED // procs))]
        if args.mode == "batch":
            cmd.append("--batch")
        if args.silent:
            cmd.append("--silent")
        clients.append((Child(cmd, WORK / f"fanout-subscribers-{k}.log"), out))
    return clients


def _cpu(clients: list[tuple[Child, Path]]) -> float:
    return sum(cpu_seconds(c.pid) for c, _ in clients)


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    stack, info = bench_stack()
    try:
        writer.recreate(info.admin_url, TABLE)
        redis.Redis.from_url(info.redis_url, socket_timeout=300).flushdb()
        n_txn = int(args.txn_rate * args.seconds)
        total = n_txn * args.rows_per_txn
        py = sys.executable
        cmd = [py, "-m", "benchmarks.ours_e2e", "live", info.mysql_url, info.redis_url]
        cmd += [f"fan-{uuid.uuid4().hex[:8]}", TABLE, "--api"]
        if args.ws_queue:
            cmd += ["--ws-queue", str(args.ws_queue)]
        applied_file = WORK / "fanout-applied.bin"
        if args.silent:  # the server stops once every row is applied, recording when each was
            cmd += ["--expect", str(total), "--record", str(applied_file)]
        server = Child(cmd, WORK / "fanout-server.log")
        children = [server]
        try:
            port = server.read_json(timeout=60)["port"]
            clients = _start_subscribers(args, port, total) if args.subscribers else []
            children += [c for c, _ in clients]
            connected = sum(c.read_json(timeout=180)["connected"] for c, _ in clients)
            console.print(
                f"server on :{port}; {connected} subscribers ({args.mode} mode, {len(clients)} client "
                f"processes) connected; writing {total:,} rows"
            )
            sampler = RssSampler(server.pid, 0.5).start()
            poller = LagPoller(port).start()
            cpu0, sub_cpu0, t0 = cpu_seconds(server.pid), _cpu(clients), clock()
            commits_file = WORK / "fanout-commits.bin"
            wcmd = [py, "-m", "benchmarks.writer", info.admin_url, TABLE, str(args.txn_rate)]
            wcmd += [str(args.rows_per_txn), str(args.seconds), str(commits_file)]
            wrote = last_json(run_measured(wcmd).out)
            t1 = clock()
            cpu1, sub_cpu1 = cpu_seconds(server.pid), _cpu(clients)
            if args.silent:
                server_done = server.finish(timeout=args.grace + 60)
                poller.stop()
                for c, _ in clients:
                    c.signal(signal.SIGTERM)
                subs_peak_rss = max((c.finish(timeout=60).rss_mb for c, _ in clients), default=0.0)
            else:
                subs_peak_rss = max(c.finish(timeout=args.grace + 60).rss_mb for c, _ in clients)
                poller.stop()
                server.signal(signal.SIGTERM)
                server_done = server.finish(timeout=60)
        except BaseException:
            for child in children:
                child.signal(signal.SIGKILL)
            raise
        samples = sampler.stop()
    finally:
        if not args.keep_stack:
            stack.down()

    commits = array.array("d")
    commits.frombytes(Path(commits_file).read_bytes())
    apply_s: float | None = None
    if args.silent:
        applied = array.array("d")
        applied.frombytes(applied_file.read_bytes())
        apply_s = max(applied[1:]) - commits[0]
    server_log = (WORK / "fanout-server.log").read_text()
    per = args.rows_per_txn
    subs_data = [s for _, out in clients for s in json.loads(out.read_text())]
    counts = [s["count"] for s in subs_data]
    messages = [s["messages"] for s in subs_data]
    # a subscriber's delivered rate: its changes over the span it was receiving them
    rates = [
        s["count"] / (s["last_at"] - s["first_at"])
        for s in subs_data
        if s["count"] > 1 and s["last_at"] > s["first_at"]
    ]
    lat = [
        (t - commits[(i - 1) // per]) * 1000
        for s in subs_data
        if s["sampled"]
        for i, t in zip(s["ids"], s["times"], strict=True)
        if 0 < i <= total
    ]
    closes = collections.Counter(
        f"{s['close_code']} {s['close_reason']}".strip() for s in subs_data if s["close_code"]
    )
    during = [mb for t, mb in samples if t0 <= t <= t1]
    return {
        "machine": machine(),
        "load_before": load_before,
        "subscribers": args.subscribers,
        "mode": args.mode,
        "client_processes": args.client_procs,
        "ws_queue_events": args.ws_queue or "default (1000)",
        "connected": connected,
        "target_rows_per_s": args.txn_rate * per,
        "writer": wrote,
        "rows_written": total,
        "delivered_rate_min": min(rates, default=0.0),
        "delivered_rate_median": statistics.median(rates) if rates else 0.0,
        "delivered_rate_max": max(rates, default=0.0),
        "received_min": min(counts, default=0),
        "received_median": statistics.median(counts) if counts else 0,
        "messages_median": statistics.median(messages) if messages else 0,
        "message_bytes_median": statistics.median(
            s["bytes"] / s["messages"] for s in subs_data if s["messages"]
        )
        if any(messages)
        else 0,
        "subscribers_complete": sum(c >= total for c in counts),
        "closed": dict(closes),
        "deliveries_total": sum(counts),
        "latency_samples": len(lat),
        "latency_p50_ms": percentile(lat, 50),
        "latency_p99_ms": percentile(lat, 99),
        "latency_max_ms": max(lat, default=float("nan")),
        "server_cpu_cores": (cpu1 - cpu0) / (t1 - t0),
        "subscribers_cpu_cores": (sub_cpu1 - sub_cpu0) / (t1 - t0),
        "server_rss_start_mb": during[0] if during else 0.0,
        "server_rss_max_mb": max(during, default=0.0),
        "server_peak_rss_mb": server_done.rss_mb,
        "subscribers_peak_rss_mb": subs_peak_rss,
        "lag_polls": len(poller.ms),
        "lag_status_codes": dict(poller.codes),
        "lag_p50_ms": percentile(poller.ms, 50),
        "lag_p99_ms": percentile(poller.ms, 99),
        "lag_max_ms": max(poller.ms, default=float("nan")),
        "lag_last": poller.last,
        "replicator_rows_waiting_max": poller.rows_waiting_max,
        "silent": args.silent,
        "apply_seconds": apply_s,
        "lease_lost": server_log.count("lost the writer lease"),
        "send_exception_lines": server_log.count("socket.send() raised exception"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--txn-rate", type=float, default=50.0, help="transactions/s")
    parser.add_argument("--rows-per-txn", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--grace", type=float, default=30.0, help="s after the writer for deliveries")
    parser.add_argument("--ws-queue", type=int, default=0, help="ws_queue_events (default: the setting's)")
    parser.add_argument(
        "--mode", choices=("batch", "change"), default="batch", help="many changes per message, or one"
    )
    parser.add_argument("--client-procs", type=int, default=2, help="subscriber processes")
    parser.add_argument("--keep-stack", action="store_true", help="leave the benchmark stack running")
    parser.add_argument("--silent", action="store_true", help="subscribers that never read; apply time")
    args = parser.parse_args()
    r = run(args)
    w = r["writer"]
    lines = []
    if r["silent"]:
        lines.append(
            f"apply time {r['apply_seconds']:.2f} s (first commit -> last row applied) with "
            f"{r['connected']} silent subscribers ({r['mode']} mode); lease lost {r['lease_lost']} times; "
            f"{r['send_exception_lines']} 'socket.send() raised exception' lines"
        )
    lines += [
        f"{r['connected']} subscribers ({r['mode']} mode, {r['client_processes']} client processes, "
        f"ws_queue_events {r['ws_queue_events']}); "
        f"writer {w['rows'] / w['seconds']:,.0f} rows/s achieved "
        f"(target {r['target_rows_per_s']:,.0f}) for {w['seconds']:.1f} s = {r['rows_written']:,} rows",
        f"delivered per subscriber: min {r['delivered_rate_min']:,.0f} rows/s, median "
        f"{r['delivered_rate_median']:,.0f} rows/s; received min {r['received_min']:,} / median "
        f"{r['received_median']:,.0f} of {r['rows_written']:,} in a median {r['messages_median']:,.0f} "
        f"messages of {r['message_bytes_median'] / 1024:,.1f} KiB; "
        f"{r['subscribers_complete']} received every row; "
        f"closed: {r['closed'] or 'none'}; {r['deliveries_total']:,} changes delivered in all",
        f"commit -> delivery: p50 {r['latency_p50_ms']:.1f} ms, p99 {r['latency_p99_ms']:.1f} ms, "
        f"max {r['latency_max_ms']:.1f} ms ({r['latency_samples']:,} samples from sampled subscribers)",
        f"server (replicator + API) CPU {r['server_cpu_cores']:.2f} cores, RSS {r['server_rss_start_mb']:.0f}"
        f" -> max {r['server_rss_max_mb']:.0f} MB; subscribers' process CPU "
        f"{r['subscribers_cpu_cores']:.2f} cores; load average before {r['load_before']}",
        f"GET /lag under load: p50 {r['lag_p50_ms']:.1f} ms, p99 {r['lag_p99_ms']:.1f} ms, max "
        f"{r['lag_max_ms']:.1f} ms over {r['lag_polls']} polls, status {r['lag_status_codes']}; "
        f"replicator backlog max {r['replicator_rows_waiting_max']:,} rows",
    ]
    for line in lines:
        console.print(line)
    (WORK / "fanout-results.json").write_text(json.dumps(r, indent=2))
    (WORK / "fanout-results.md").write_text("\n".join(f"- {line}" for line in lines) + "\n")


if __name__ == "__main__":
    main()
