"""The mirror's Redis client against a real Redis: a task cancelled while it talks to Redis stops.

redis-py bounds each write with `asyncio.wait_for` when the connection has a socket timeout, and
on Python 3.11 that drops a cancellation arriving as the write completes (CPython gh-86296). The
mirror's lease renewal was such a task: cancelled at the end of its session, it kept renewing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from redis import exceptions as rexc

from service.sink.client import redis_client
from service.stack import LocalStack

pytestmark = pytest.mark.integration


async def test_a_task_cancelled_during_a_command_always_stops(stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    redis = redis_client(info.redis_url, socket_timeout=10)  # the replicator's setting
    carried_on = 0

    async def commands() -> None:
        nonlocal carried_on
        while True:
            await redis.execute_command("PING")
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # cancelled, yet the command returned
                carried_on += 1
                raise asyncio.CancelledError

    rng = random.Random(5)
    try:
        for _ in range(400):  # before the fix, about 6 cancellations in 10 were lost
            task = asyncio.create_task(commands())
            await asyncio.sleep(rng.random() * 0.0005)  # lands before, during or after a write
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await redis.aclose()
    assert carried_on == 0


async def test_a_write_to_a_redis_that_stopped_reading_times_out(tmp_path: Path) -> None:
    """Still bounded by the socket timeout, and raised as redis-py's own TimeoutError. The server
    is a private redis-server, frozen with SIGSTOP so that it reads nothing."""
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    redis = redis_client(f"redis://127.0.0.1:{port}/0", socket_timeout=0.3, retry=None)
    try:
        for _ in range(200):
            with contextlib.suppress(rexc.ConnectionError):
                if await redis.ping():
                    break
            await asyncio.sleep(0.05)
        os.kill(server.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(rexc.TimeoutError, match="Timeout writing to socket"):
            await redis.set("k", b"x" * (64 << 20))  # more than the socket buffers hold
        assert time.monotonic() - started < 5
    finally:
        os.kill(server.pid, signal.SIGCONT)
        await redis.aclose()
        server.terminate()
        server.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
