"""The rows on each side of a verify: the source's, by SQL on one connection, and the mirror's,
in the sink's layout (`__keys` members, row keys found by SCAN, hashes or JSON documents)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import aiomysql
from redis.asyncio import Redis

from service.checkpoint import BinlogPosition
from service.rowcompare import utc_row
from service.shaping import Shape
from service.sink.keys import KeyLayout, glob_literal, row_suffix_of, split_key
from service.sink.mirror import RedisMirror, map_redis_errors
from service.table_info import TableInfo
from service.transport.connection import ServerInfo, current_checkpoint, map_errors

__all__ = ["MirrorReader", "SourceReader", "as_str", "binary_key_columns"]

# key columns whose key text is 0x-hex (service.sink.values.key_text)
_BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})


def binary_key_columns(t: TableInfo, key: Sequence[str]) -> list[bool]:
    """For each key column, whether its key text is 0x-hex."""
    types = {c.name: c.type for c in t.columns}
    return [types.get(c, "") in _BINARY_TYPES for c in key]


def utc_columns(t: TableInfo) -> frozenset[str]:
    """The TIMESTAMP columns (read in UTC: the session's time zone is +00:00)."""
    return frozenset(c.name for c in t.columns if c.type == "TIMESTAMP")


class SourceReader:
    def __init__(
        self, conn: aiomysql.Connection, info: ServerInfo, shape_of: Callable[[str, str], Shape | None]
    ) -> None:
        self.conn = conn
        self.info = info
        self.shape_of = shape_of  # the catalog's: each table's [table."…"] section, if any

    def stored_form(self, t: TableInfo, row: dict[str, Any], utc: frozenset[str]) -> dict[str, Any]:
        """A row read by SELECT as the mirror stores it: TIMESTAMP columns in UTC, and for a shaped
        table only its kept fields, renamed (service/shaping.py)."""
        row = utc_row(row, utc)
        shape = self.shape_of(t.schema, t.table)
        return shape.apply(row) if shape is not None else row

    async def position(self) -> BinlogPosition:
        return (await current_checkpoint(self.conn, self.info)).position

    async def select(self, sql: str, what: str) -> list[dict[str, Any]]:
        with map_errors(what):
            async with self.conn.cursor(aiomysql.DictCursor) as cur:
                await cur.execute(sql)
                return list(await cur.fetchall())


class MirrorReader:
    def __init__(
        self, redis: Redis, layout: KeyLayout, mirror: RedisMirror, json_of: Callable[[str, str], bool]
    ) -> None:
        self.redis = redis
        self.layout = layout
        self.mirror = mirror
        self.json_of = json_of  # (schema, table) -> its rows are JSON documents

    async def suffixes(self, schema: str, table: str) -> set[str]:
        """Every row suffix the mirror holds for the table: `__keys` members and row keys."""
        lay = self.layout
        base = lay.table_base(schema, table)
        out: set[str] = set()
        with map_redis_errors("listing the mirror's keys"):
            async for member in self.redis.sscan_iter(lay.index_key(schema, table), count=1000):
                out.add(as_str(member))
            async for key in self.redis.scan_iter(match=glob_literal(base) + ":*", count=1000):
                if (suffix := row_suffix_of(key, base)) is not None:
                    out.add(suffix)
        return out

    async def tables(self) -> set[tuple[str, str]]:
        out = set()
        for tid in await self.mirror.mirrored_tables():
            parts = split_key(tid)
            if len(parts) == 2:
                out.add((parts[0], parts[1]))
        return out

    async def rows(self, schema: str, table: str, suffixes: Sequence[str]) -> list[tuple[Any, bool]]:
        """Each row's stored value (hash or JSON document) and whether `__keys` has it."""
        base = self.layout.table_base(schema, table)
        index = self.layout.index_key(schema, table)
        if not suffixes:
            return []
        json_rows = self.json_of(schema, table)
        with map_redis_errors("reading the mirror"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for suffix in suffixes:
                    key = f"{base}:{suffix}"
                    if json_rows:
                        pipe.get(key)
                    else:
                        pipe.hgetall(key)
                    pipe.sismember(index, suffix)
                replies = await pipe.execute()
        return [(replies[i], bool(replies[i + 1])) for i in range(0, len(replies), 2)]


def as_str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
