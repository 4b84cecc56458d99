"""A source failover on real servers: a MariaDB primary and its GTID replica
(service/devtools/stack_replica.py), and the address the mirror connects to, a TCP proxy
switched from the old primary to the promoted replica (as a VIP, DNS or MaxScale would)."""

from __future__ import annotations

import asyncio
import contextlib


class SwitchingProxy:
    """Forwards 127.0.0.1:`port` to `upstream`; `switch(other)` drops every connection and sends
    new ones to `other`. A connection to an upstream that is down is closed at once."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> SwitchingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.drop()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def switch(self, upstream: int) -> None:
        self.upstream = upstream
        self.drop()

    def drop(self) -> None:
        for w in self._writers:
            w.transport.abort()
        self._writers.clear()

    def url(self, user: str, password: str) -> str:
        return f"mysql://{user}:{password}@127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers += [writer, up_writer]
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.close()
