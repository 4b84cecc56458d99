"""The resync tasks of a session: one per table being re-read from the source after a DDL, a
newly selected table, or a resync left pending by an earlier run (service/pipeline/resync.py
copies; this module starts, follows and ends the tasks and their status)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from service.catalog import Catalog
from service.checkpoint import Checkpoint
from service.pipeline.progress import Progress, TableCounters
from service.pipeline.resync import resync_table, write_fk_defs
from service.pipeline.status import ResyncStatus, State
from service.settings import Settings
from service.sink.mirror import RedisMirror
from service.transport.connection import connect, map_errors

__all__ = ["Resyncs"]

log = logging.getLogger(__name__)

# key columns whose key text is 0x-hex (service.sink.values.key_text), for a resync's reread
_BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})


class Resyncs:
    def __init__(self, settings: Settings, mirror: RedisMirror, catalog: Catalog, progress: Progress) -> None:
        self.settings, self.mirror, self.catalog, self.progress = settings, mirror, catalog, progress
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._source_position: Callable[[], Awaitable[Checkpoint]] | None = None

    def attach(self, tg: asyncio.TaskGroup, source_position: Callable[[], Awaitable[Checkpoint]]) -> None:
        """Start tasks in the session's TaskGroup from now on."""
        self._tg, self._source_position = tg, source_position

    def detach(self) -> None:
        """The session ends: cancel every task."""
        self._tg = self._source_position = None
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    def start(self, key: tuple[str, str]) -> None:
        """(Re)start the copy of `key`; outside a session, nothing (the next one resumes it)."""
        if self._tg is None:
            return
        self.cancel(key)
        self._tasks[key] = self._tg.create_task(self._resync(key), name=f"resync {key[0]}.{key[1]}")

    def cancel(self, key: tuple[str, str]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    async def _resync(self, key: tuple[str, str]) -> None:
        schema, table = key
        counters = self.progress.tables.setdefault(key, TableCounters())
        started = time.time()
        # before any SELECT: every row read from here on is at least as new as this mark
        generation = await self.mirror.resync_generation(schema, table)
        if generation is None:  # none, or ended or fenced by a statement applied meanwhile
            self._done(key)
            return
        self.progress.set_state(State.RESYNCING)
        counters.resync = ResyncStatus(started, 0, None, "resync")
        conn = await connect(self.settings)
        try:
            with map_errors("resync session"):
                async with conn.cursor() as cur:
                    await cur.execute("SET SESSION time_zone = '+00:00'")
            # A fresh definition, swapped in by load() in one step. Never forget() it here: the
            # applier plans transactions across awaits, and a change planned while the table is
            # unknown to the catalog counts as unkeyable and is skipped (rows were lost that way).
            with map_errors(f"reading the definition of {schema}.{table}"):
                info = await self.catalog.load(conn, schema, table)
            if self.catalog.foreign_keys is None:  # the copy puts rows in their foreign keys' sets
                # (read again after a DDL by the applier only: a graph swapped under its planning
                # could name tables it has not loaded; a constraint this copy did not know is not
                # marked filled (`__fkready`), and the applier has the table copied again)
                with map_errors("reading the foreign keys of the source's tables"):
                    await self.catalog.load_foreign_keys(conn)
                await write_fk_defs(self.mirror)

            def progress(done: int, total: int | None, reread: int) -> None:
                counters.resync = ResyncStatus(started, done, total, "resync", reread)
                if reread:
                    log.info("resync %s.%s: %d rows read again (partial images)", schema, table, reread)
                else:
                    of = total if total is not None else "?"
                    log.info("resync %s.%s: %d/%s rows", schema, table, done, of)

            await resync_table(
                conn,
                self.mirror,
                schema,
                table,
                info.key,
                generation=generation,
                chunk_rows=self.settings.resync_chunk_rows,
                progress=progress,
                utc_columns=frozenset(c.name for c in info.columns if c.type == "TIMESTAMP"),
                binary_columns=frozenset(c.name for c in info.columns if c.type in _BINARY_TYPES),
                source_position=self._source_position,
                shape=self.catalog.shape(schema, table),
            )
        finally:
            conn.close()
            self._done(key)

    def _done(self, key: tuple[str, str]) -> None:
        owner = self._tasks.get(key)
        if owner is None or owner is asyncio.current_task():  # else a restarted copy owns it
            self.progress.tables[key].resync = None
            self._tasks.pop(key, None)
        if not self._tasks and self.progress.state == State.RESYNCING:
            self.progress.set_state(State.STREAMING)
