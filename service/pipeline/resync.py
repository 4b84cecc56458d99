"""Re-reading a table from the source while the stream keeps applying (docs/mirror.md, "DDL resync").

The mirror marks the table when the resync begins (inside the apply of the DDL's transaction, or of
the bootstrap transaction for a newly mirrored table). From then on every row the stream writes is
added to the table's `__touched` set, and `resync_rows` never overwrites a touched row: the stream's
version is newer than anything read here, because every row read here is at least as new as the
mark (the source executed the DDL before we applied it). Rows present before the resync and neither
seen here nor touched by the stream are deleted at the end.

Each mark has a generation; the resync reads it before its first SELECT and every write carries
it. A TRUNCATE, DROP, RENAME or newer ALTER applied meanwhile moves the generation inside its
apply script, so a chunk read before that change and written after it is refused (the script
writes nothing) and this copy stops; the replicator starts the next one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiomysql

from service.checkpoint import BinlogPosition, Checkpoint
from service.rowcompare import key_values, utc_row
from service.shaping import Shape
from service.sink.fks import ForeignKeys, ready_key, set_prefix
from service.sink.mirror import RedisMirror
from service.sink.replies import map_redis_errors
from service.sqltext import keyset_page, rows_by_key
from service.transport.connection import fetch, map_errors

__all__ = ["resync_table"]

log = logging.getLogger(__name__)


async def resync_table(
    conn: aiomysql.Connection,
    mirror: RedisMirror,
    schema: str,
    table: str,
    key: tuple[str, ...] | None,
    *,
    generation: int,
    chunk_rows: int,
    progress: Callable[[int, int | None, int], None],
    utc_columns: frozenset[str] = frozenset(),
    binary_columns: frozenset[str] = frozenset(),
    source_position: Callable[[], Awaitable[Checkpoint]] | None = None,
    shape: Shape | None = None,
) -> int:
    """Copy `schema.table` into the mirror in key order; returns rows read. `generation` is the
    resync mark's, read before this call (`RedisMirror.resync_generation`).

    `source_position` reads the source's end of binlog: read after the last SELECT, it bounds
    what the copy saw, and the table's settle window lasts until the stream passes it
    (`TableMarks.settling`).

    Rows that partial images changed meanwhile were skipped (the stream's change is newer) but
    may keep columns in the old shape: at the end they are read again by key and written whole
    (`RedisMirror.resync_reread`). `binary_columns` (key columns of binary types) turn their
    key text (`0x…`) back into bytes for that SELECT.

    `utc_columns` are the TIMESTAMP columns: SELECT returns them naive (the session's time_zone
    is +00:00), the binlog decodes them as aware UTC datetimes; they are made aware here so both
    paths store the same value (canonical JSON `...Z`).

    `shape`: the table's `[table."…"]` section (service/shaping.py): rows are written with only
    their kept fields, renamed, as the stream writes them."""
    started = time.monotonic()
    fks = mirror.planner.cascades.foreign_keys()  # the constraints whose sets this copy fills
    total: int | None = None
    est = await fetch(
        conn,
        "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
        (schema, table),
    )
    if est and est[0][0] is not None:
        total = int(est[0][0])
    done = 0
    if not est:
        # The table is gone (dropped or renamed since): nothing to copy, its stale rows go.
        log.warning("resync of %s.%s: the table no longer exists on the source", schema, table)
        key = None
    if key:
        last: tuple[Any, ...] | None = None
        while True:
            sql = keyset_page(schema, table, key, last, chunk_rows)
            with map_errors(f"resync of {schema}.{table}"):
                async with conn.cursor(aiomysql.DictCursor) as cur:
                    await cur.execute(sql)
                    rows = list(await cur.fetchall())
            if not rows:
                break
            if utc_columns:
                rows = [utc_row(row, utc_columns) for row in rows]
            last = tuple(rows[-1][c] for c in key)
            if shape is not None:
                rows = [shape.apply(row) for row in rows]
            await add_fk_members(mirror, schema, table, rows)  # before the rows: see add_fk_members
            if await mirror.resync_rows(schema, table, rows, generation) is None:
                _superseded(schema, table, done)
                return done
            done += len(rows)
            progress(done, total, 0)
            if len(rows) < chunk_rows:
                break

    async def copied_at() -> BinlogPosition | None:
        assert source_position is not None
        return (await source_position()).position

    reread_rows = 0

    async def reread(entries: list[tuple[str, str]]) -> bool:
        nonlocal reread_rows
        rows: list[dict[str, Any]] = []
        if key:
            binary = [c in binary_columns for c in key]
            values = [kv for s, _ in entries if (kv := key_values(s, binary)) is not None]
            if values:
                with map_errors(f"resync of {schema}.{table} (rows read again)"):
                    async with conn.cursor(aiomysql.DictCursor) as cur:
                        await cur.execute(rows_by_key(schema, table, key, values))
                        rows = list(await cur.fetchall())
            if utc_columns:
                rows = [utc_row(row, utc_columns) for row in rows]
            if shape is not None:
                rows = [shape.apply(row) for row in rows]
        await add_fk_members(mirror, schema, table, rows)
        written = await mirror.resync_reread(schema, table, generation, entries, rows)
        if written:
            reread_rows += written
            progress(done, total, reread_rows)
        if written == 0:  # each row changed again meanwhile: let the stream get ahead of the next read
            await asyncio.sleep(0.05)
        return written is not None

    removed = await mirror.resync_finish(
        schema, table, generation, copied_at if source_position else None, reread
    )
    if removed is None:
        _superseded(schema, table, done)
        return done
    await fk_sets_ready(mirror, schema, table, fks)
    log.info(
        "resync of %s.%s done: %d rows read, %d read again, %d stale rows removed in %.2fs",
        schema,
        table,
        done,
        reread_rows,
        removed,
        time.monotonic() - started,
        extra={"schema": schema, "table": table, "rows": done, "reread": reread_rows, "removed": removed},
    )
    return done


def _superseded(schema: str, table: str, done: int) -> None:
    log.info(
        "resync of %s.%s superseded after %d rows (TRUNCATE, DROP, RENAME or a newer ALTER): "
        "nothing more written by this copy",
        schema,
        table,
        done,
    )


async def add_fk_members(mirror: RedisMirror, schema: str, table: str, rows: list[dict[str, Any]]) -> None:
    """Put rows copied from the source (a resync, the bootstrap) in the sets of their foreign-key
    values, before the copy writes them: the sets are candidates that a cascade checks against
    the stored row, so a member whose row the copy then does not write (the stream did) is
    harmless, while a row without its member would be missed."""
    mirror = await mirror.fk_mirror(schema, table)
    sets = mirror.planner.cascades.members(schema, table, rows)
    if not sets:
        return
    with map_redis_errors(f"indexing the foreign keys of {schema}.{table}"):
        async with mirror.redis.pipeline(transaction=False) as pipe:
            for key, members in sets.items():
                pipe.sadd(key, *members)
            await pipe.execute()


async def write_fk_defs(mirror: RedisMirror) -> None:
    """Store each child table's `__fkdefs` (its sets and their columns) after the foreign keys
    were read: what DROP, TRUNCATE and RENAME read to take the rows out of their sets
    (lua/cascade.lua, op FC). Metadata only: a definition more than needed costs an SREM."""
    for m in await mirror.fk_mirrors():
        defs = m.planner.cascades.defs()
        if not defs:
            continue
        with map_redis_errors("storing the tables' foreign-key sets (__fkdefs)"):
            async with m.redis.pipeline(transaction=False) as pipe:
                for key, mapping in defs.items():
                    pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
                await pipe.execute()


async def fk_sets_ready(mirror: RedisMirror, schema: str, table: str, known: ForeignKeys) -> None:
    """After a whole copy of a table: the sets of the foreign keys it knew from its start hold
    every row (`__fkready`; a constraint the graph gained meanwhile waits for another copy)."""
    mirror = await mirror.fk_mirror(schema, table)
    now = mirror.planner.cascades.foreign_keys().by_child.get((schema, table), ())
    fks = [fk for fk in now if fk in known.by_child.get((schema, table), ())]
    if fks:
        fields = {set_prefix(mirror.layout, fk): 1 for fk in fks}
        with map_redis_errors(f"marking the foreign-key sets of {schema}.{table} whole"):
            await mirror.redis.hset(ready_key(mirror.layout), mapping=fields)  # type: ignore[arg-type]


async def fk_sets_missing(mirror: RedisMirror) -> list[tuple[str, str]]:
    """The child tables with a constraint whose sets were never filled by a copy (`__fkready`)."""
    out: set[tuple[str, str]] = set()
    for m in await mirror.fk_mirrors():
        fks = m.planner.cascades.foreign_keys()
        if not fks.keys:
            continue
        with map_redis_errors("reading which foreign-key sets are whole (__fkready)"):
            ready = {_text(k) for k in await m.redis.hkeys(ready_key(m.layout))}
        out |= {fk.child for fk in fks.keys if set_prefix(m.layout, fk) not in ready}
    return sorted(out)


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v
