"""Crash safety and single-writer: `python -m service run` subprocesses killed with SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis as redis_sync

from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from tests.integration.mirror_helpers import (
    Workload,
    actual,
    create_schema,
    expected,
    master_position,
    stored_position,
    unique_names,
    wait_applied,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _start(
    stack: LocalStack,
    db: str,
    prefix: str,
    log: Path,
    *args: str,
    lease_ttl: float = 0.6,
    chunk_rows: int = 4,
    changelog: bool = True,
) -> subprocess.Popen[bytes]:
    info = stack.load()
    assert info is not None
    env = {
        **os.environ,
        "BINLOG_MIRROR_LEASE_TTL_SECONDS": str(lease_ttl),
        "BINLOG_MIRROR_HEARTBEAT_SECONDS": "1",
        "BINLOG_MIRROR_CHUNK_ROWS": str(chunk_rows),
        "BINLOG_MIRROR_TABLE_STEP_ROWS": "2",  # kills land inside TRUNCATE/RENAME too
    }
    cmd = [sys.executable, "-m", "service", "run", "--mysql", info.mysql_url, "--redis", info.redis_url]
    cmd += ["--tables", f"{db}.*", "--prefix", prefix, "--no-api", *args]
    if changelog:
        cmd += ["--changelog-maxlen", "1000000"]
    cmd += ["--server-id", str(6000 + random.randint(0, 999))]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _ledger_ids(redis_url: str, prefix: str) -> list[int]:
    r = redis_sync.Redis.from_url(redis_url)
    entries = r.xrange(f"{prefix}:__changes")
    r.close()
    return sorted(
        int(e[1][b"key"]) for e in entries if e[1][b"table"] == b"ledger" and e[1][b"op"] == b"insert"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_advance(redis_url: str, prefix: str, since: BinlogPosition | None, timeout: float = 40.0) -> None:
    """Until the checkpoint moves past `since`: the current process has taken the lease and applies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cp = stored_position(redis_url, prefix)
        if cp is not None and (since is None or since < cp):
            return
        time.sleep(0.02)
    raise AssertionError(f"mirror did not move past {since}")


class _Writer(threading.Thread):
    """Commits the random workload continuously, so every kill lands while transactions flow.
    Holding `lock` pauses it (for the MariaDB restart)."""

    def __init__(self, wl: Workload) -> None:
        super().__init__(daemon=True)
        self.wl, self.lock, self.done, self.error = wl, threading.Lock(), threading.Event(), None
        self.steps = 0

    def run(self) -> None:
        try:
            while not self.done.is_set():
                with self.lock:
                    self.wl.step()
                self.steps += 1
                time.sleep(0.01)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def test_sigkill_at_random_moments(stack: LocalStack, tmp_path: Path) -> None:
    """22 SIGKILLs, each after the new process has started applying and while the workload keeps
    committing; Redis and MariaDB each restarted once under a running mirror."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    log = tmp_path / "run.log"
    rng = random.Random(7)
    proc = _start(stack, db, prefix, log)
    # bootstrapped: from here every write goes through the binlog
    wait_applied(info.redis_url, prefix, None, timeout=40)
    wl = Workload(stack, db, seed=3)
    writer = _Writer(wl)
    writer.start()
    kills = 0
    try:
        for i in range(22):
            _wait_advance(info.redis_url, prefix, stored_position(info.redis_url, prefix))
            if i == 7:
                stack.stop_redis()
                stack.start_redis()
                _wait_advance(info.redis_url, prefix, stored_position(info.redis_url, prefix))
            if i == 14:
                with writer.lock:
                    wl.close()
                    stack.stop_mysql()
                    stack.start_mysql()
                    wl.conn = stack.root_connection(db)
                    wl.conn.autocommit(False)
                _wait_advance(info.redis_url, prefix, stored_position(info.redis_url, prefix))
            time.sleep(rng.uniform(0.0, 0.3))
            proc.kill()
            proc.wait()
            kills += 1
            proc = _start(stack, db, prefix, log)
        writer.done.set()
        writer.join()
        assert writer.error is None, writer.error
        # End on a commit: after a final FLUSH BINARY LOGS the source's position lies past the
        # last transaction, where no checkpoint can ever be.
        wl.ledger += 1
        with wl.conn.cursor() as cur:
            cur.execute("INSERT INTO ledger VALUES (%s, 'last')", (wl.ledger,))
        wl.conn.commit()
        try:
            wait_applied(info.redis_url, prefix, master_position(stack), timeout=60)
        except AssertionError as exc:  # seen once in ~12 runs: keep what the processes logged
            raise AssertionError(
                f"{exc}\n--- run.log (tail) ---\n{log.read_text(errors='replace')[-6000:]}"
            ) from None
        time.sleep(0.5)
        for _ in range(50):
            if actual(info.redis_url, prefix, db) == expected(stack, db):
                break
            time.sleep(0.2)  # a resync after the last ALTER may still be copying
        assert actual(info.redis_url, prefix, db) == expected(stack, db)
        assert _ledger_ids(info.redis_url, prefix) == list(range(1, wl.ledger + 1))
    finally:
        writer.done.set()
        _stop(proc)
        wl.close()
    assert kills >= 20 and writer.steps > 100, (kills, writer.steps)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert "without whole rows" not in text, text[-3000:]  # no update met a missing row


def test_two_instances_one_writer_and_takeover(stack: LocalStack, tmp_path: Path) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    a = _start(stack, db, prefix, tmp_path / "a.log")
    b = _start(stack, db, prefix, tmp_path / "b.log")
    wl = Workload(stack, db, seed=5)
    try:
        wait_applied(info.redis_url, prefix, None, timeout=40)
        for _ in range(30):
            wl.step(allow_ddl=False)
        wait_applied(info.redis_url, prefix, master_position(stack), timeout=40)
        r = redis_sync.Redis.from_url(info.redis_url)
        holder = r.get(f"{prefix}:__lease")
        r.close()
        assert holder is not None
        deadline = time.monotonic() + 20
        while True:  # both processes up: one leads, the other reports standby
            logs = {p: (tmp_path / f"{p}.log").read_text() for p in "ab"}
            standby = [p for p, text in logs.items() if "standby" in text]
            if standby or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(standby) == 1, logs  # exactly one instance waited
        assert "bootstrap at" not in logs[standby[0]]  # ... and wrote nothing
        leader, other = (b, a) if standby == ["a"] else (a, b)
        before = stored_position(info.redis_url, prefix)  # the source's position: only a writer moves it
        killed = time.monotonic()
        leader.kill()
        leader.wait()
        for _ in range(30):
            wl.step(allow_ddl=False)
        _wait_advance(info.redis_url, prefix, before, timeout=20)
        takeover = time.monotonic() - killed
        assert takeover < 5, f"the standby applied its first transaction {takeover:.1f}s after the kill"
        wait_applied(info.redis_url, prefix, master_position(stack), timeout=20)
        assert actual(info.redis_url, prefix, db) == expected(stack, db)
        assert _ledger_ids(info.redis_url, prefix) == list(range(1, wl.ledger + 1))
        assert other.poll() is None
    finally:
        _stop(a)
        _stop(b)
        wl.close()


def test_sigkill_during_a_load_with_two_instances(stack: LocalStack, tmp_path: Path) -> None:
    """A load (INSERT-only transactions of 1-300 rows, no change log: the plain form of the apply,
    service/sink/plain.py) while two instances run and one of them, the writer or the standby,
    is SIGKILLed every 0.2-1.5 s and started again: the mirror ends equal to the source, each
    row in its `__keys`, none lost or written twice by a writer that had lost the lease."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    rng = random.Random(11)

    def start(name: str) -> subprocess.Popen[bytes]:
        return _start(stack, db, prefix, tmp_path / f"{name}.log", chunk_rows=1000, changelog=False)

    def watches() -> int:  # WATCH opens each plain call (and nothing else in `run`)
        r = redis_sync.Redis.from_url(info.redis_url)
        stats = r.info("commandstats").get("cmdstat_watch", {"calls": 0})
        r.close()
        return int(stats["calls"])

    watched = watches()
    procs = {"a": start("a"), "b": start("b")}
    wait_applied(info.redis_url, prefix, None, timeout=40)
    done, loaded = threading.Event(), [0]

    def load() -> None:
        conn = stack.root_connection(db)
        try:
            while not done.is_set():
                n = rng.choice([1, 2, 50, 300])
                rows = [(loaded[0] + i, f"n{loaded[0] + i}", i % 7 or None, "1.50") for i in range(n)]
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO items (id, name, qty, price) VALUES (%s, %s, %s, %s)", rows)
                conn.commit()
                loaded[0] += n
        finally:
            conn.close()

    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    try:
        # eight kills, and on until the plain form has run (a loaded machine may spend the first
        # kills' intervals starting processes and catching up in chunked calls, which go as the
        # script): bounded, so a plain form that never runs still fails below
        kills, deadline = 0, time.monotonic() + 90
        while kills < 8 or (watches() - watched <= 20 and time.monotonic() < deadline):
            time.sleep(rng.uniform(0.2, 1.5))
            name = rng.choice("ab")
            procs[name].kill()
            procs[name].wait()
            procs[name] = start(name)
            kills += 1
        done.set()
        writer.join()
        wait_applied(info.redis_url, prefix, master_position(stack), timeout=60)
        assert actual(info.redis_url, prefix, db) == expected(stack, db)
        assert loaded[0] > 1000
        assert watches() - watched > 20
    finally:
        done.set()
        for proc in procs.values():
            _stop(proc)
    text = "".join((tmp_path / f"{n}.log").read_text(errors="replace") for n in "ab")
    assert "Traceback" not in text, text[-3000:]
