"""ScriptChannel: the mirror's own Redis connection for apply script calls, pipelined.

A call is written to the socket as soon as it is planned, so Redis runs it while the replicator
plans the next one; replies are read later, in order. redis-py's pipeline cannot do this: it packs
every command before writing any, and its checkout and timed send suspend before the write, so a
command queued "in the background" only leaves once the synchronous planning is over.

Pipelining calls is safe because every apply call checks the checkpoint chain (and chunk progress)
before writing: if one fails, each later one fails its check too, so what Redis applied is always
a prefix of what was sent. Heavy calls (whole-table work) go through `call` instead, one at a time.
The channel is used by one task at a time (the applier).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from service.sink.plan import Arg

__all__ = ["ScriptChannel"]

IO_TIMEOUT = 30.0  # seconds without progress writing a call or waiting for its reply


class ScriptChannel:
    def __init__(self, redis: Redis, script: str) -> None:
        self._redis = redis
        self._script = script
        self._sha = ""
        self._conn: AbstractConnection | None = None
        self.epoch = 0  # connections closed so far: replies of an older one are lost
        self._unread = 0  # calls written on this connection whose replies were not read yet
        self._early: deque[Any] = deque()  # replies `call` read ahead, for `reply`
        self._timeout: float | None = None  # the pool's socket timeout, restored on release

    async def _open(self) -> AbstractConnection:
        # A connection of the client's pool, held until `close` (so closing the client closes it
        # too), without its socket timeout: `send` and `reply` bound their waits themselves, with
        # IO_TIMEOUT (an apply call may run longer than the client's other commands may take).
        conn: AbstractConnection = await self._redis.connection_pool.get_connection()  # type: ignore[no-untyped-call]
        self._timeout, conn.socket_timeout = conn.socket_timeout, None
        self._conn = conn
        await conn.send_command("SCRIPT", "LOAD", self._script)
        self._unread += 1
        sha = await self._read()
        self._sha = sha.decode() if isinstance(sha, bytes) else str(sha)
        return conn

    async def send(self, args: Sequence[Arg]) -> None:
        """Write one call of the apply script (EVALSHA, no keys) without waiting for its reply."""
        conn = self._conn or await self._open()
        command: Any = ("EVALSHA", self._sha, 0, *args)
        packed = hiredis.pack_command(command)
        try:
            async with asyncio.timeout(IO_TIMEOUT):
                # writelines + drain: written at once unless the transport is paused (backpressure)
                await conn.send_packed_command(packed, check_health=False)
        except BaseException:
            await self.close()
            raise
        self._unread += 1

    async def call(self, args: Sequence[Arg]) -> Any:
        """Write one call and wait for its reply. The replies of the calls before it are kept for
        `reply`. For heavy calls: Redis runs every call it reads in one go back to back, so
        pipelined heavy calls would keep its other clients waiting for all of them."""
        await self.send(args)
        while self._unread > 1:
            self._early.append(await self._read())
        return await self._read()

    async def reply(self) -> Any:
        """The reply to the oldest unread call (an error reply raises redis' ResponseError)."""
        if self._early:
            return self._early.popleft()
        return await self._read()

    async def _read(self) -> Any:
        assert self._conn is not None, "no call in flight"
        try:
            # Not read_response(timeout=...): on timeout that returns None, which would be taken for
            # the reply, and the late reply for the next call's.
            async with asyncio.timeout(IO_TIMEOUT):
                value = await self._conn.read_response()
        except BaseException:
            await self.close()
            raise
        self._unread -= 1
        return value

    async def close(self) -> None:
        """Drop the connection (replies not read yet with it); the next send opens a new one."""
        conn, self._conn = self._conn, None
        self.epoch += 1
        self._unread = 0
        self._early.clear()
        if conn is not None:
            await conn.disconnect(nowait=True)
            conn.socket_timeout = self._timeout
            await self._redis.connection_pool.release(conn)
