"""N websocket subscribers in one process (for benchmarks.fanout), so the server's process only
does the server's work; benchmarks.fanout may start several of these to use more cores.

    python -m benchmarks.subscribers PORT N TABLES EXPECT DEADLINE_S OUT [--sample K] [--batch]
                                     [--silent]

Opens N connections to ws://127.0.0.1:PORT/ws/events?tables=TABLES (no permessage-deflate; with
--batch, `batch=true`: many changes per message), prints {"ready": true, "connected": N} once
every one is subscribed, then reads until each subscriber has EXPECT changes, was closed, or
DEADLINE_S seconds passed. K subscribers, spread evenly, parse every message and record
(row id, CLOCK_MONOTONIC receive time) for latency; the others only count the change objects in
the raw bytes (never decoded to text, never parsed) to keep the client cheap. Writes OUT (JSON).

--silent: subscribers that never read. Each opens a TCP connection, sends the upgrade request
(subscription in the query string), reads the 101 response, and reads nothing more: its socket's
buffers fill and the server's sends to it stop making progress. They hold their connections until
DEADLINE_S or SIGTERM; nothing is counted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from benchmarks.harness import clock

# Every change object starts with this; inside JSON strings a quote is always escaped, so a
# row value can never contain it.
CHANGE = b'{"type":"change"'


@dataclass
class Sub:
    index: int
    sampled: bool
    count: int = 0
    messages: int = 0
    bytes: int = 0
    first_at: float = 0.0
    last_at: float = 0.0
    close_code: int | None = None
    close_reason: str = ""
    ids: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def record(self, msg: bytes, now: float) -> None:
        """Count the changes in one received message (and keep their ids when sampled)."""
        if self.sampled:
            data = orjson.loads(msg)
            changes = data["changes"] if data["type"] == "changes" else [data]
            ids = [c["after"]["id"] for c in changes if c["type"] == "change"]
            self.ids += ids
            self.times += [now] * len(ids)
            n = len(ids)
        else:
            n = msg.count(CHANGE)
        if n:
            if not self.count:
                self.first_at = now
            self.count += n
            self.messages += 1
            self.bytes += len(msg)
            self.last_at = now


async def run(args: argparse.Namespace) -> None:
    mode = "&batch=true" if args.batch else ""
    url = f"ws://127.0.0.1:{args.port}/ws/events?tables={args.tables}{mode}"
    step = max(1, args.n // max(1, args.sample))
    subs = [Sub(i, args.sample > 0 and i % step == 0) for i in range(args.n)]
    ready = 0
    all_ready = asyncio.Event()
    start = asyncio.Event()

    sem = asyncio.Semaphore(20)  # handshakes in flight

    async def one(sub: Sub) -> None:
        nonlocal ready
        async with sem:
            ws = await connect(url, compression=None, proxy=None, max_queue=1024, open_timeout=60)
            hello = orjson.loads(await ws.recv())
        assert hello["type"] == "subscribed", hello
        ready += 1
        if ready == len(subs):
            all_ready.set()
        async with ws:
            await start.wait()
            try:
                while sub.count < args.expect:
                    msg = await ws.recv(decode=False)
                    sub.record(msg, clock())
            except ConnectionClosed as exc:
                rcvd = exc.rcvd
                sub.close_code = rcvd.code if rcvd else None
                sub.close_reason = rcvd.reason if rcvd else "no close frame"

    tasks = [asyncio.create_task(one(s)) for s in subs]
    await asyncio.wait_for(all_ready.wait(), 120)
    print(json.dumps({"ready": True, "connected": ready}), flush=True)
    start.set()
    t0 = time.monotonic()
    _, pending = await asyncio.wait(tasks, timeout=args.deadline)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    Path(args.out).write_text(json.dumps([asdict(s) for s in subs]))
    print(json.dumps({"done": True, "seconds": time.monotonic() - t0, "timed_out": len(pending)}))


def silent(args: argparse.Namespace) -> None:
    mode = "&batch=true" if args.batch else ""
    request = (
        f"GET /ws/events?tables={args.tables}{mode} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    )
    socks = []
    for _ in range(args.n):
        sock = socket.create_connection(("127.0.0.1", args.port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(f"{request}Sec-WebSocket-Key: {key}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:  # the 101 response: subscribed from here on
            chunk = sock.recv(1)
            assert chunk, "connection closed during the handshake"
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head
        socks.append(sock)
    print(json.dumps({"ready": True, "connected": len(socks)}), flush=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # taken below: then exit 0
    signal.sigtimedwait([signal.SIGTERM], args.deadline)
    for sock in socks:
        sock.close()
    Path(args.out).write_text(json.dumps([asdict(Sub(i, False)) for i in range(args.n)]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("tables")
    parser.add_argument("expect", type=int)
    parser.add_argument("deadline", type=float)
    parser.add_argument("out")
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument("--batch", action="store_true", help="subscribe with batch=true")
    parser.add_argument("--silent", action="store_true", help="subscribers that never read")
    args = parser.parse_args()
    if args.silent:
        silent(args)
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
