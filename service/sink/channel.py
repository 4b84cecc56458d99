"""ScriptChannel: the mirror's own Redis connection for apply script calls, pipelined.

A call is written to the socket as soon as it is planned, so Redis runs it while the replicator
plans the next one; replies are read later, in order. redis-py's pipeline cannot do this: it packs
every command before writing any, and its checkout and timed send suspend before the write, so a
command queued "in the background" only leaves once the synchronous planning is over.

Pipelining calls is safe because every apply call checks the checkpoint chain (and chunk progress)
before writing: if one fails, each later one fails its check too, so what Redis applied is always
a prefix of what was sent. Heavy calls (whole-table work) go through `call` instead, one at a time.
The channel is used by one task at a time (the applier).

Insert-only calls go in their plain form when the mirror allows it (service/sink/plain.py): the
same writes, at about half Redis' CPU. One that did not apply (a check refused it, or a watched key
changed), and every call written after it, are sent again as the script: Redis then holds the same
prefix of the calls as if they had all been scripts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import hiredis
from redis import exceptions as rexc
from redis._parsers import hiredis as redis_hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from service.sink.codec import Arg, CallEncoder
from service.sink.ir import ApplyCall
from service.sink.plain import plain_call
from service.sink.scripts import GUARD

__all__ = ["PlainSetup", "ScriptChannel"]

log = logging.getLogger(__name__)

# what redis-py's hiredis reader returns while a reply is incomplete (redis-py 5.1+; False before)
_NOT_ENOUGH_DATA: Any = getattr(redis_hiredis, "NOT_ENOUGH_DATA", False)

IO_TIMEOUT = 30.0  # seconds without progress writing a call or waiting for its reply


@dataclass(frozen=True, slots=True)
class PlainSetup:
    """Where a channel may send insert-only calls in their plain form (service/sink/plain.py)."""

    guard_key: str
    fence_key: str
    tables_key: str
    avoid: Callable[[], Collection[str]]  # table ids whose calls go as the script (resyncs)


@dataclass(slots=True)
class _Sent:
    call: ApplyCall | Sequence[Arg]  # to send again as the script when its plain form did not apply
    replies: int  # replies it gets: 1 as the script
    nseq: int = 0  # plain: the change count (its INCRBY's reply is the last sequence number)


class ScriptChannel:
    def __init__(
        self, redis: Redis, script: str, plain: PlainSetup | None = None, encoder: CallEncoder | None = None
    ) -> None:
        self._redis = redis
        self._encoder = encoder  # for the calls sent as IR (ApplyCall)
        self._script = script
        self._plain = plain
        self._sha = ""
        self._guard_sha = ""
        self._conn: AbstractConnection | None = None
        self.epoch = 0  # connections closed so far: replies of an older one are lost
        self._sent: deque[_Sent] = deque()  # calls written on this connection, replies not read yet
        self._early: deque[Any] = deque()  # replies `call` read ahead, for `reply`
        self._timeout: float | None = None  # the pool's socket timeout, restored on release
        self.plain_calls = 0  # calls sent in the plain form, and those sent again as the script
        self.plain_redone = 0

    async def _open(self) -> AbstractConnection:
        # A connection of the client's pool, held until `close` (so closing the client closes it
        # too), without its socket timeout: `send` and `reply` bound their waits themselves, with
        # IO_TIMEOUT (an apply call may run longer than the client's other commands may take).
        conn: AbstractConnection = await self._redis.connection_pool.get_connection()  # type: ignore[no-untyped-call]
        self._timeout, conn.socket_timeout = conn.socket_timeout, None
        self._conn = conn
        self._sha = await self._load(conn, self._script)
        # the plain form reads its replies from redis-py's hiredis reader (one Python call per
        # reply would cost more than the form saves): without one, every call goes as the script
        if self._plain is not None and _reads_with_hiredis(conn):
            self._guard_sha = await self._load(conn, GUARD)
        return conn

    async def _load(self, conn: AbstractConnection, script: str) -> str:
        await conn.send_command("SCRIPT", "LOAD", script)
        self._sent.append(_Sent((), 1))
        sha = await self._read()
        return sha.decode() if isinstance(sha, bytes) else str(sha)

    def _args(self, call: ApplyCall | Sequence[Arg]) -> Sequence[Arg]:
        """The script's ARGV of a call."""
        if isinstance(call, ApplyCall):
            assert self._encoder is not None, "a channel for IR calls has an encoder"
            return self._encoder.encode(call)
        return call

    async def send(self, call: ApplyCall | Sequence[Arg]) -> None:
        """Write one apply call (EVALSHA, no keys; or its plain form) without waiting for its reply."""
        conn = self._conn or await self._open()
        plain = None
        if self._guard_sha and isinstance(call, ApplyCall):
            assert self._plain is not None
            setup = self._plain
            plain = plain_call(
                call, setup.tables_key, self._guard_sha, setup.guard_key, setup.fence_key, setup.avoid()
            )
        if plain is None:
            command: Any = ("EVALSHA", self._sha, 0, *self._args(call))
            await self._write(conn, hiredis.pack_command(command))
            self._sent.append(_Sent(call, 1))
            return
        await self._write(conn, plain.packed)
        assert isinstance(call, ApplyCall)
        self._sent.append(_Sent(call, plain.replies, call.header.nseq))
        self.plain_calls += 1

    async def _write(self, conn: AbstractConnection, packed: bytes) -> None:
        try:
            async with asyncio.timeout(IO_TIMEOUT):
                # writelines + drain: written at once unless the transport is paused (backpressure)
                await conn.send_packed_command(packed, check_health=False)
        except BaseException:
            await self.close()
            raise

    async def call(self, args: ApplyCall | Sequence[Arg]) -> Any:
        """Write one call and wait for its reply. The replies of the calls before it are kept for
        `reply`. For heavy calls: Redis runs every call it reads in one go back to back, so
        pipelined heavy calls would keep its other clients waiting for all of them."""
        await self.send(args)
        while len(self._sent) > 1:
            self._early.append(await self._read())
        return await self._read()

    async def reply(self) -> Any:
        """The reply to the oldest unread call (an error reply raises redis' ResponseError)."""
        if self._early:
            return self._early.popleft()
        return await self._read()

    async def _read(self) -> Any:
        assert self._conn is not None and self._sent, "no call in flight"
        try:
            # Not read_response(timeout=...): on timeout that returns None, which would be taken for
            # the reply, and the late reply for the next call's.
            async with asyncio.timeout(IO_TIMEOUT):
                if self._sent[0].replies == 1:
                    self._sent.popleft()
                    return await self._conn.read_response()
                sent = self._sent.popleft()
                value = await self._plain_reply(sent)
                if value is None:  # it applied nothing: it and the calls after it go as the script
                    await self._redo(sent)
        except BaseException:
            await self.close()
            raise
        return await self._read() if value is None else value

    async def _plain_reply(self, sent: _Sent) -> int | None:
        """A plain call's first sequence number, from its replies (WATCH, guard, MULTI, a QUEUED
        per command, EXEC); None when it applied nothing (refused, or a watched key changed)."""
        replies = await self._read_replies(sent.replies)
        guard, done = replies[1], replies[-1]
        if guard != b"OK" or done is None:
            return None
        if isinstance(done, Exception):  # EXECABORT: a command was refused (OOM), nothing ran
            raise next((r for r in replies if isinstance(r, Exception)), done)
        for r in done:
            if isinstance(r, Exception):  # cannot be, after the guard's checks: say it all
                raise rexc.ResponseError(
                    f"{r} (in the plain form of an apply call, whose other commands ran: the call "
                    "may be partly applied; `binlog-mirror verify --repair` finds and repairs it)"
                )
        return int(done[0]) - sent.nseq + 1

    async def _read_replies(self, n: int) -> list[Any]:
        """The next n replies, from the hiredis reader itself; a run of "QUEUED" kept as one."""
        assert self._conn is not None
        parser: Any = self._conn._parser  # redis-py's hiredis parser (checked by _open)
        reader = parser._reader
        out: list[Any] = []
        while n:
            r = reader.gets()
            if r is _NOT_ENOUGH_DATA:
                await parser.read_from_socket()
                continue
            n -= 1
            if r != b"QUEUED" or not out or out[-1] != b"QUEUED":
                out.append(r)
        return out

    async def _redo(self, first: _Sent) -> None:
        """The call `first` did not apply: read the replies of the calls written after it (each
        failed its chain check: nothing of theirs applied either) and send them all again, in
        order, as the script."""
        redo = [first, *self._sent]
        for sent in redo[1:]:
            await self._read_replies(sent.replies)
        self._sent.clear()
        assert self._conn is not None
        for sent in redo:  # encoded as the script now (a plain call had no ARGV)
            command: Any = ("EVALSHA", self._sha, 0, *self._args(sent.call))
            await self._write(self._conn, hiredis.pack_command(command))
            self._sent.append(_Sent(sent.call, 1))
        self.plain_redone += len(redo)
        log.info(
            "a plain apply call was not applied (its check refused it, or a key it watched changed): "
            "it and the %d calls after it were sent again as the apply script",
            len(redo) - 1,
        )

    async def close(self) -> None:
        """Drop the connection (replies not read yet with it); the next send opens a new one."""
        conn, self._conn = self._conn, None
        self.epoch += 1
        self._sent.clear()
        self._early.clear()
        self._guard_sha = ""
        if conn is not None:
            await conn.disconnect(nowait=True)
            conn.socket_timeout = self._timeout
            await self._redis.connection_pool.release(conn)


def _reads_with_hiredis(conn: AbstractConnection) -> bool:
    """Whether the connection's parser is redis-py's hiredis one, which `_read_replies` uses."""
    parser = getattr(conn, "_parser", None)
    reader = getattr(parser, "_reader", None)
    return isinstance(reader, hiredis.Reader) and callable(getattr(parser, "read_from_socket", None))
