"""Helpers shared by the benchmarks: child processes measured with wait4, /proc sampling, stats.

Every tool under test runs in a process of its own, so its CPU time (ru_utime + ru_stime) and
peak RSS (ru_maxrss) come from wait4() of exactly that process and nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.workload import WORK
from service.devtools.stack import LocalStack, StackInfo

__all__ = [
    "HERE",
    "Child",
    "Measured",
    "RssSampler",
    "bench_stack",
    "clock",
    "cpu_seconds",
    "ensure_zongji",
    "last_json",
    "machine",
    "markdown_table",
    "percentile",
    "rss_mb",
    "run_measured",
]

HERE = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def clock() -> float:
    """CLOCK_MONOTONIC: one system-wide clock, comparable between the benchmark's processes."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass
class Measured:
    out: str
    err: str
    rss_mb: float  # peak RSS of the process (ru_maxrss)
    cpu_s: float  # ru_utime + ru_stime of the process (and its waited-for children)
    wall_s: float


def run_measured(
    cmd: Sequence[str], env: dict[str, str] | None = None, timeout: float = 3600, cwd: Path | None = None
) -> Measured:
    """Run `cmd` to completion; resource usage from wait4() of that process. Raises RuntimeError
    with the last stderr line when it fails."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
    )
    # Drain the pipes in threads so a chatty child never blocks on a full pipe.
    chunks: dict[str, list[str]] = {"out": [], "err": []}
    readers = [
        threading.Thread(target=lambda s=s, k=k: chunks[k].append(s.read()), daemon=True)
        for s, k in ((proc.stdout, "out"), (proc.stderr, "err"))
    ]
    for r in readers:
        r.start()
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.02)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join()
    out, err = "".join(chunks["out"]), "".join(chunks["err"])
    if proc.returncode != 0:
        raise RuntimeError(err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}")
    return Measured(out, err, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, wall)


class Child:
    """A long-running child (a server, subscribers): JSON lines on stdout, stderr to a log file,
    resource usage from wait4() when it ends."""

    def __init__(self, cmd: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._err = log.open("w")
        self.proc = subprocess.Popen(
            list(cmd), stdout=subprocess.PIPE, stderr=self._err, text=True, env=env, bufsize=1
        )
        self.pid = self.proc.pid
        self.t0 = time.monotonic()

    def read_json(self, timeout: float = 60) -> Any:
        """The next JSON line of its stdout (non-JSON lines are skipped)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        result: list[Any] = []

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                try:
                    result.append(json.loads(line))
                    return
                except ValueError:
                    continue

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(max(0.0, deadline - time.monotonic()))
        if not result:
            tail = self.log.read_text()[-600:] if self.log.exists() else ""
            raise RuntimeError(f"{self.proc.args[:4]}: no JSON line within {timeout:.0f}s; stderr: {tail}")
        return result[0]

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, sig)

    def finish(self, timeout: float = 60) -> Measured:
        """Wait for it to end (SIGKILL after `timeout`); its remaining stdout and resource usage."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, 9)
            time.sleep(0.02)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        self._err.close()
        err = self.log.read_text()
        if self.proc.returncode != 0:
            raise RuntimeError(f"{self.proc.args[:4]} exited {self.proc.returncode}: {err.strip()[-600:]}")
        return Measured(
            out, err, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, time.monotonic() - self.t0
        )


def last_json(out: str) -> Any:
    """The child's result: the last line of its stdout, as JSON."""
    return json.loads(out.strip().splitlines()[-1])


def ensure_zongji(console: Any = None) -> Path | None:
    """node_modules holding @vlasky/zongji (installed under benchmarks/.work once), or None."""
    if not shutil.which("node") or not shutil.which("npm"):
        return None
    modules = WORK / "node_modules" / "@vlasky" / "zongji"
    if not modules.exists():
        if console is not None:
            console.print("installing @vlasky/zongji with npm ...")
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(WORK), "@vlasky/zongji"],
            check=True,
            capture_output=True,
        )
    return WORK / "node_modules"


def bench_stack() -> tuple[LocalStack, StackInfo]:
    """The benchmark stack (benchmarks/.work/stack), started if it is not running."""
    WORK.mkdir(exist_ok=True)
    stack = LocalStack(WORK / "stack")
    info = stack.up()
    return stack, info


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(-(-p * len(ordered) // 100)) - 1))
    return ordered[rank]


def rss_mb(pid: int) -> float:
    """Current resident set size of `pid` in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class RssSampler:
    """Samples a process's RSS every `interval` seconds in a thread: (clock(), MB) pairs."""

    pid: int
    interval: float = 0.5
    samples: list[tuple[float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> RssSampler:
        def loop() -> None:
            while not self._stop.is_set():
                mb = rss_mb(self.pid)
                if mb:
                    self.samples.append((clock(), mb))
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.samples

    def between(self, t0: float, t1: float) -> list[float]:
        return [mb for t, mb in self.samples if t0 <= t <= t1]


def machine() -> dict[str, str]:
    """What the figures were measured on: cores, CPU model, commit, load before the run."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "service", "api"],
        capture_output=True,
        text=True,
        cwd=HERE.parent,
    ).stdout.strip()
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "commit": commit + (" (+ uncommitted changes in service/ or api/)" if dirty else ""),
        "python": sys.version.split()[0],
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The same figures as the rich table, as Markdown (for docs/BENCHMARKS.md)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
