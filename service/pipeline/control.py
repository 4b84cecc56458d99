"""Operator control of a running replicator: pause/resume applying, copy one table again.

Requests come from the API (POST /control/..., `binlog-mirror ctl`) and are taken by the
replicator's applier between batches, with nothing in flight, so a pause never leaves a batch
half-read and a resync is ordered with the stream like the one a DDL starts. While paused the
reader keeps its bounded queue full and then stops reading: the source's TCP window pushes back,
as when Redis is slow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["Control"]


class Control:
    def __init__(self) -> None:
        self.paused = False
        self.resyncs: list[tuple[str, str]] = []  # tables to copy again, in request order
        self._changed = asyncio.Event()

    @property
    def wanted(self) -> bool:
        """The applier has something to do for the operator before its next batch."""
        return self.paused or bool(self.resyncs)

    def pause(self) -> None:
        self.paused = True
        self._changed.set()

    def resume(self) -> None:
        self.paused = False
        self._changed.set()

    def request_resync(self, schema: str, table: str) -> None:
        if (schema, table) not in self.resyncs:
            self.resyncs.append((schema, table))
        self._changed.set()

    async def requested(self) -> None:
        """Return once the operator wants something (the idle applier waits on this too)."""
        while not self.wanted:
            self._changed.clear()
            await self._changed.wait()

    async def serve(
        self, resync: Callable[[list[tuple[str, str]]], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        """Called by the applier with no batch in flight: start the requested resyncs, then wait
        while paused (until resumed or stopped)."""
        while not stop.is_set():
            if self.resyncs:
                todo, self.resyncs = self.resyncs, []
                await resync(todo)
            if not self.paused:
                return
            self._changed.clear()
            waits = {asyncio.ensure_future(self._changed.wait()), asyncio.ensure_future(stop.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
