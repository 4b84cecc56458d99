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
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis import exceptions as rexc

from service.sink import channel as channel_module
from service.sink.channel import ScriptChannel
from service.sink.client import redis_client

pytestmark = pytest.mark.redis


async def test_a_task_cancelled_during_a_command_always_stops(redis_url: str) -> None:
    redis = redis_client(redis_url, socket_timeout=10)  # the replicator's setting
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


@dataclass
class PrivateRedis:
    """A redis-server of the test's own, which it may freeze (SIGSTOP: reads and answers nothing)."""

    url: str
    process: subprocess.Popen[bytes]

    def freeze(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)


@pytest.fixture
async def private_redis(tmp_path: Path) -> AsyncIterator[PrivateRedis]:
    port = _free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    server = PrivateRedis(f"redis://127.0.0.1:{port}/0", process)
    probe = redis_client(server.url, retry=None)
    try:
        for _ in range(200):
            with contextlib.suppress(rexc.ConnectionError):
                if await probe.ping():
                    break
            await asyncio.sleep(0.05)
        yield server
    finally:
        await probe.aclose()
        server.thaw()
        process.terminate()
        process.wait(10)


async def test_a_write_to_a_redis_that_stopped_reading_times_out(private_redis: PrivateRedis) -> None:
    """Still bounded by the socket timeout, and raised as redis-py's own TimeoutError."""
    redis = redis_client(private_redis.url, socket_timeout=0.3, retry=None)
    try:
        await redis.ping()
        private_redis.freeze()
        started = time.monotonic()
        with pytest.raises(rexc.TimeoutError, match="Timeout writing to socket"):
            await redis.set("k", b"x" * (64 << 20))  # more than the socket buffers hold
        assert time.monotonic() - started < 5
    finally:
        private_redis.thaw()
        await redis.aclose()


async def test_an_apply_call_without_a_reply_times_out_and_drops_its_connection(
    private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apply channel's wait for a reply is bounded (IO_TIMEOUT), and ends in an error: redis-py
    returns None from a read given a timeout, which was taken for the call's reply. The next call
    uses a new connection, so no late reply is ever read as another call's."""
    monkeypatch.setattr(channel_module, "IO_TIMEOUT", 0.3)
    redis = redis_client(private_redis.url, socket_timeout=10)
    channel = ScriptChannel(redis, "return tonumber(ARGV[1])")
    try:
        assert await channel.call([1]) == 1
        private_redis.freeze()
        await channel.send([2])  # small: written to the socket buffer, never read by the server
        epoch = channel.epoch
        with pytest.raises(TimeoutError):
            await channel.reply()
        assert channel.epoch == epoch + 1  # the connection was dropped
        private_redis.thaw()
        assert await channel.call([3]) == 3
    finally:
        private_redis.thaw()
        await channel.close()
        await redis.aclose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
