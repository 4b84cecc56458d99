"""Helpers for the replication-stream tests: settings, workloads, a TCP proxy."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from service.checkpoint import Checkpoint
from service.devtools.stack import REPLICATION_USER, LocalStack
from service.settings import Settings, load_settings
from service.transactions import Transaction
from service.transport.source import BinlogSource

_server_ids = itertools.count(7000 + uuid.uuid4().int % 1000)


def unique_db(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def settings_for(stack: LocalStack, url: str | None = None, **overrides: Any) -> Settings:
    info = stack.load()
    assert info is not None
    overrides.setdefault("server_id", next(_server_ids))
    overrides.setdefault("heartbeat_seconds", 0.5)
    return load_settings(mysql=url or info.mysql_url, **overrides)


@contextlib.contextmanager
def admin(stack: LocalStack, database: str | None = None) -> Iterator[pymysql.connections.Connection[Any]]:
    conn = stack.root_connection(database)
    try:
        yield conn
    finally:
        conn.close()


def run_sql(stack: LocalStack, statements: Iterable[str], database: str | None = None) -> None:
    with admin(stack, database) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def make_tables(db: str) -> list[str]:
    return [
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)",
        f"CREATE TABLE {db}.notes (id INT PRIMARY KEY, body TEXT)",
    ]


def workload(db: str, start: int, count: int, *, rotate_every: int = 0) -> list[str]:
    """`count` transactions: inserts, updates and deletes over two tables, FLUSH BINARY LOGS between."""
    out: list[str] = []
    for i in range(start, start + count):
        if i % 3 == 0:
            out += [
                "BEGIN",
                f"INSERT INTO {db}.items VALUES ({i}, 'n{i}', {i})",
                f"INSERT INTO {db}.notes VALUES ({i}, 'b{i}')",
                "COMMIT",
            ]
        elif i % 3 == 1:
            out += [
                f"INSERT INTO {db}.items VALUES ({i}, 'n{i}', 0)",
                f"UPDATE {db}.items SET qty = qty + 1 WHERE id = {i}",
            ]
        else:
            out += [f"INSERT INTO {db}.notes VALUES ({i}, 'x')", f"DELETE FROM {db}.notes WHERE id = {i}"]
        if rotate_every and i % rotate_every == rotate_every - 1:
            out.append("FLUSH BINARY LOGS")
    return out


def changes_of(txns: Iterable[Transaction], db: str) -> list[tuple[str, str, Any, Any]]:
    return [(c.op.value, c.table, c.before, c.after) for t in txns for c in t.changes if c.schema == db]


async def collect(source: BinlogSource, db: str, n_changes: int, timeout: float = 20.0) -> list[Transaction]:
    """Transactions until `n_changes` row changes of `db` have arrived."""
    got: list[Transaction] = []
    seen = 0
    async with asyncio.timeout(timeout):
        async for txn in source:
            got.append(txn)
            seen += sum(1 for c in txn.changes if c.schema == db)
            if seen >= n_changes:
                break
    return got


def expected_changes(db: str, start: int, count: int) -> list[tuple[str, str, Any, Any]]:
    out: list[tuple[str, str, Any, Any]] = []
    for i in range(start, start + count):
        if i % 3 == 0:
            out += [
                ("insert", "items", None, {"id": i, "name": f"n{i}", "qty": i}),
                ("insert", "notes", None, {"id": i, "body": f"b{i}"}),
            ]
        elif i % 3 == 1:
            row = {"id": i, "name": f"n{i}", "qty": 0}
            out += [("insert", "items", None, row), ("update", "items", row, {**row, "qty": 1})]
        else:
            row = {"id": i, "body": "x"}
            out += [("insert", "notes", None, row), ("delete", "notes", row, None)]
    return out


class Proxy:
    """A TCP proxy in front of mariadbd that can drop or silently stall its connections, or switch
    to another server (a failover, as a VIP, DNS or MaxScale would). A connection while the server
    is down is closed at once."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.port = 0
        self.stalled = False
        self.cut_after: int | None = None  # drop everything once the server has sent this many more bytes
        self._server: asyncio.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._frozen: set[asyncio.StreamWriter] = set()
        self.connections = 0

    async def __aenter__(self) -> Proxy:
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

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._pairs.append((writer, up_writer))
        for src, dst, downstream in ((reader, up_writer, False), (up_reader, writer, True)):
            task = asyncio.create_task(self._pipe(src, dst, downstream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, downstream: bool) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                while (self.stalled or dst in self._frozen) and not dst.is_closing():
                    await asyncio.sleep(0.05)  # hold the bytes: a half-open connection
                if downstream and self.cut_after is not None:
                    if len(data) >= self.cut_after:  # pass part of the chunk, then fail mid-packet
                        dst.write(data[: self.cut_after])
                        self.cut_after = None
                        self.drop()
                        break
                    self.cut_after -= len(data)
                dst.write(data)
                await dst.drain()
        dst.close()

    def freeze(self) -> None:
        """Hold every byte of the connections open now, both ways, for good, without closing
        them (a black-holed path); connections made later pass."""
        for a, b in self._pairs:
            self._frozen |= {a, b}

    def drop(self) -> None:
        """Close every current connection (both sides), like a network failure."""
        for a, b in self._pairs:
            for w in (a, b):
                w.transport.abort()
        self._pairs.clear()

    def switch(self, port: int) -> None:
        """New connections go to `port`; every current one is dropped."""
        self.upstream = port
        self.drop()

    def url(self, user: str, password: str) -> str:
        return f"mysql://{user}:{password}@127.0.0.1:{self.port}"


def peer_changes(
    stack: LocalStack, start: Checkpoint, db: str, server_id: int, **options: Any
) -> list[tuple[str, str, Any, Any]]:
    """python-mysql-replication's (op, table, before, after) for `db` from `start` to the end of
    the binlog (non-blocking); `options` go to its BinLogStreamReader."""
    info = stack.load()
    assert info is not None
    reader = BinLogStreamReader(
        connection_settings={
            "host": "127.0.0.1",
            "port": info.mysql_port,
            "user": REPLICATION_USER,
            "passwd": info.repl_password,
        },
        server_id=server_id,
        log_file=start.position.file,
        log_pos=start.position.pos,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[db],
        **options,
    )
    out: list[tuple[str, str, Any, Any]] = []
    try:
        for event in reader:
            for row in event.rows:
                if isinstance(event, WriteRowsEvent):
                    out.append(("insert", event.table, None, row["values"]))
                elif isinstance(event, UpdateRowsEvent):
                    out.append(("update", event.table, row["before_values"], row["after_values"]))
                else:
                    out.append(("delete", event.table, row["values"], None))
    finally:
        reader.close()
    return out
