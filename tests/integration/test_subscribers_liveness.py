"""Subscribers cannot slow the apply (issue 25): websocket clients that never read, on the same
process as the Replicator, during a 20,000-row load.

Each client opens a TCP connection, sends the websocket upgrade request with its subscription in
the query string, and never reads a byte: its socket's buffers fill and the server's sends to it
stop making progress. The load is applied once without subscribers and once with them; the apply
time may grow (the fan-out work is real) but stays within 2x, `/health/live` (timed from another
process, as a prober does, so that a starved event loop shows) keeps answering (see the bound
below), and the writer lease is never lost. The subscribers are cut off with 1013 (lagging). The
figures are printed (pytest -s) for docs/BENCHMARKS.md; benchmarks/fanout.py --silent measures the
same with the subscribers in processes of their own."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from api.main import create_app
from api.server import ApiServer
from service.checkpoint import BinlogPosition
from service.cli.runtime import tune_gc
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from tests.integration.mirror_helpers import master_position, mirror_settings, root, unique_names, wait_hooks

TOKEN = "liveness-token"

pytestmark = pytest.mark.integration

SUBSCRIBERS = 200
ROWS = 20_000
ROWS_PER_TXN = 500


def _silent_subscriber(port: int, db: str, batch: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    query = f"tables={db}.*&token={TOKEN}" + ("&batch=true" if batch else "")
    sock.sendall(
        (
            f"GET /ws/events?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    return sock


# The prober runs in a process of its own, as a kubelet or load balancer does: a thread of this
# process would share its GIL with the event loop under test and time its own waits for the GIL.
_PROBE = """
import sys, time, httpx
with httpx.Client(base_url=sys.argv[1], timeout=30) as http:
    while True:
        t0 = time.monotonic()
        try:
            http.get("/health/live").raise_for_status()
            error = ""
        except httpx.HTTPError as exc:
            error = repr(exc)
        print(f"{t0:.6f} {time.monotonic() - t0:.6f} {error}", flush=True)
        time.sleep(0.05)
"""


class _LivePoller(threading.Thread):
    """GET /health/live every 50 ms from another process; keeps each poll's start and duration.
    A poll counts for the phase in which it started (CLOCK_MONOTONIC is the same in both
    processes): one sent while the subscribers connected and answered during the load is the
    connecting's, not the load's."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.polls: list[tuple[float, float]] = []  # (start, seconds)
        self.failures: list[str] = []
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _PROBE, f"http://127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True
        )

    def run(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            start, seconds, error = line.rstrip("\n").split(" ", 2)
            if error:
                self.failures.append(error)
            self.polls.append((float(start), float(seconds)))

    def worst(self, since: float, until: float) -> float:
        return max((s for t, s in self.polls if since <= t < until), default=0.0)

    async def answered_after(self, moment: float) -> None:
        """Wait until a poll sent after `moment` has its answer: the probe polls one at a time,
        so every poll sent before it has been answered and counted."""
        async with asyncio.timeout(60):
            while not any(t > moment for t, _ in self.polls):
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(30)
        self.join(60)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


async def _load(stack: LocalStack, db: str, rep: Replicator, first_id: int) -> float:
    """Insert ROWS rows in transactions of ROWS_PER_TXN; seconds until all are applied."""

    def write() -> BinlogPosition:
        conn = root(stack, db)
        with conn.cursor() as cur:
            for start in range(first_id, first_id + ROWS, ROWS_PER_TXN):
                values = ",".join(f"({i}, 'row {i} {'x' * 40}')" for i in range(start, start + ROWS_PER_TXN))
                cur.execute(f"INSERT INTO t VALUES {values}")
                conn.commit()
        conn.close()
        return master_position(stack)

    t0 = time.monotonic()
    end = await asyncio.to_thread(write)
    await wait_hooks(rep, end, timeout=300)
    return time.monotonic() - t0


@pytest.fixture
def gc_as_run() -> Any:
    """The collector as `binlog-mirror run` sets it (service.cli.runtime.tune_gc), restored after: at
    CPython's defaults, in this test process, full collections paused the loop for up to 0.5 s
    (4.8 s of collections in a 20 s run), more than anything the fan-out did."""
    threshold = gc.get_threshold()
    tune_gc()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.parametrize("batch", [False, True], ids=["change", "batch"])
@pytest.mark.usefixtures("gc_as_run")
async def test_silent_subscribers_do_not_slow_the_apply(stack: LocalStack, batch: bool) -> None:
    db, prefix = unique_names()
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(80))")
    conn.commit()
    conn.close()
    # a 6 s lease (renewed every 2 s): its loss means a stall of 4 s, far past the 1 s bound on
    # /health/live below; with 3 s it was lost twice in whole-suite runs on a loaded machine
    settings = mirror_settings(stack, db, prefix, api_port=0, api_token=TOKEN, lease_ttl_seconds=6.0)
    rep = Replicator(settings)
    app = create_app(settings, rep)
    hub = app.state.hub  # the Broadcaster
    server = ApiServer(app, settings)
    tasks = [asyncio.create_task(server.serve()), asyncio.create_task(rep.run())]
    socks: list[socket.socket] = []
    poller: _LivePoller | None = None
    try:
        async with asyncio.timeout(30):
            await server.started.wait()
            while rep.status().state != State.STREAMING:
                await asyncio.sleep(0.05)
        poller = _LivePoller(server.port)
        poller.start()
        started = time.monotonic()
        base = await _load(stack, db, rep, 1)
        connecting = time.monotonic()
        # connected from a thread: this event loop is the server's
        socks = await asyncio.to_thread(
            lambda: [_silent_subscriber(server.port, db, batch) for _ in range(SUBSCRIBERS)]
        )
        async with asyncio.timeout(60):
            while hub.subscribers < SUBSCRIBERS:
                await asyncio.sleep(0.05)
        errors_before = rep.status().errors.count
        loading = time.monotonic()
        loaded = await _load(stack, db, rep, 1 + ROWS)
        status = rep.status()
        done = time.monotonic()
        await poller.answered_after(done)
        poller.stop()
        base_worst = poller.worst(started, connecting)
        connect_worst = poller.worst(connecting, loading)  # 200 handshakes at once: not the load
        worst = poller.worst(loading, done)
        print(  # noqa: T201  (the figures, for the record: pytest -s)
            f"apply {ROWS} rows: {base:.2f}s alone, {loaded:.2f}s with {SUBSCRIBERS} silent subscribers "
            f"({'batch' if batch else 'change'} mode); /health/live worst {worst * 1000:.0f} ms "
            f"with them, {base_worst * 1000:.0f} ms without ({connect_worst * 1000:.0f} ms while they "
            f"connected), {len(poller.polls)} polls; "
            f"{hub.dropped} subscribers dropped"
        )
        assert not poller.failures, poller.failures[:3]
        # Under a second (issue 25). Timed from a thread of this process the worst was once 1.09 s
        # inside the whole suite: that thread waited for the GIL the event loop holds; a prober in
        # its own process saw 42-552 ms with the machine at load average 4-6 (docs/BENCHMARKS.md).
        # Polls count for the phase they were sent in: twice in the whole suite one sent while the
        # subscribers connected was answered 1.00-1.01 s later, after a load of 0.87 s.
        assert worst < 1.0, f"/health/live took {worst:.2f}s ({base_worst:.2f}s without)"
        assert status.leader and status.errors.count == errors_before, status.errors
        assert loaded < 2 * base, f"{loaded:.1f}s with subscribers, {base:.1f}s without"
        # cut off as lagging (1013); in batch mode a few may hold the whole load in their
        # sockets' buffers (a few large messages each) and never fall behind
        assert hub.dropped >= (SUBSCRIBERS if not batch else 1)
    finally:
        if poller is not None:
            poller.stop()
        for sock in socks:
            sock.close()
        rep.stop()
        tasks[0].cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(30):
                    await task
