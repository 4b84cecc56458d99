"""Helpers shared by the mirror's integration tests: workloads, the Redis == MariaDB check, and the
setup most of them open with (a database of their own, a running Replicator, a redis-server of
their own)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
import redis as redis_sync

from service.binlog.canonical import row_to_json
from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.settings import Settings, load_settings
from service.sink.checkpoints import decode_checkpoint
from service.sink.keys import KeyLayout
from service.sink.values import field_value

TABLES = {
    "items": "CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, price DECIMAL(10,2), "
    "note TEXT NULL, at DATETIME(3) NULL, raw VARBINARY(8) NULL)",
    "pairs": "CREATE TABLE {db}.pairs (a VARCHAR(10) NOT NULL, b INT NOT NULL, v VARCHAR(20), "
    "PRIMARY KEY (a, b))",
    "uniq": "CREATE TABLE {db}.uniq (code VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (code))",
    "nokey": "CREATE TABLE {db}.nokey (v INT)",
    "ledger": "CREATE TABLE {db}.ledger (id INT PRIMARY KEY, note VARCHAR(20))",
}
KEYS = {"items": ("id",), "pairs": ("a", "b"), "uniq": ("code",), "ledger": ("id",)}


def mirror_settings(stack: LocalStack, db: str, prefix: str, **overrides: Any) -> Settings:
    """Settings for a Replicator mirroring `db.*` of the stack under `prefix`."""
    info = stack.load()
    assert info is not None
    values: dict[str, Any] = {
        "mysql": info.mysql_url,
        "redis": info.redis_url,
        "tables": [f"{db}.*"],
        "key_prefix": prefix,
        "server_id": 4000 + hash(prefix) % 1000,
        "heartbeat_seconds": 1.0,
    }
    return load_settings(None, **{**values, **overrides})


def unique_names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"mt_{tag}", f"p{tag}"


def new_database(stack: LocalStack, *statements: str) -> tuple[str, str]:
    """A database of its own (and a key prefix for its mirror), with `statements` run in it."""
    db, prefix = unique_names()
    run_sql(stack, None, f"CREATE DATABASE {db}")
    if statements:
        run_sql(stack, db, *statements)
    return db, prefix


def stack_redis_url(stack: LocalStack) -> str:
    info = stack.load()
    assert info is not None
    return info.redis_url


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """A redis-server of its own, in `directory` (no mariadbd); yields its URL, stops it after."""
    local = LocalStack(directory)
    local.start_redis()
    try:
        info = local.load()
        assert info is not None
        yield info.redis_url
    finally:
        local.down()


def root(stack: LocalStack, db: str | None = None) -> pymysql.connections.Connection[Any]:
    return stack.root_connection(db)


def run_sql(stack: LocalStack, db: str | None, *statements: str) -> list[Any]:
    """Run statements as root (in `db`, when given) and commit; returns the last one's rows."""
    conn = root(stack, db)
    try:
        out: list[Any] = []
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
                out = list(cur.fetchall())
        conn.commit()
        return out
    finally:
        conn.close()


def create_schema(stack: LocalStack, db: str) -> None:
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for sql in TABLES.values():
            cur.execute(sql.format(db=db))
    conn.close()


def master_position(stack: LocalStack) -> BinlogPosition:
    """The source's position, less a trailing BINLOG_CHECKPOINT: MariaDB writes one when the
    previous file's transactions are durable, which may come after the last commit; the mirror's
    checkpoint moves with transactions, so it stays before that event until the next one."""
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        assert row is not None
        file, pos = str(row[0]), int(row[1])
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}'")
        events = [(str(e[2]), int(e[1]), int(e[4])) for e in cur.fetchall()]  # type, start, end
    conn.close()
    if not events or events[-1][2] != pos:
        return BinlogPosition(file, pos)
    run = len(events)  # the trailing run of BINLOG_CHECKPOINTs (two when two files became durable)
    while run > 1 and events[run - 1][0] == "Binlog_checkpoint":
        run -= 1
    if run == len(events) or events[run - 1][0] in ("Gtid_list", "Format_desc"):
        return BinlogPosition(file, pos)  # none, or the head of a new file: passed on rotation
    return BinlogPosition(file, events[run][1])


def binlog_tail(stack: LocalStack, rep: Any) -> list[tuple[str, int, int, str]]:
    """(type, start, end, info) of the source's events from the replicator's applied position on."""
    applied = rep.status().applied
    if applied is None:
        return []
    conn = root(stack)
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{applied.position.file}' FROM {applied.position.pos}")
        rows = [(str(e[2]), int(e[1]), int(e[4]), str(e[5])[:80]) for e in cur.fetchall()]
    conn.close()
    return rows


class Workload:
    """Random transactions; `ledger` gets one row per committed transaction (exactly-once check)."""

    def __init__(self, stack: LocalStack, db: str, seed: int, row_image: str = "FULL") -> None:
        self.db = db
        self.rng = random.Random(seed)
        self.conn = root(stack, db)
        self.conn.autocommit(False)
        with self.conn.cursor() as cur:  # MINIMAL/NOBLOB: partial images (docs/mirror.md)
            cur.execute("SET SESSION binlog_row_image = %s", (row_image,))
        self.next_id = 1
        self.ledger = 0
        self.ddl_done = 0

    def _ids(self, cur: Any, table: str = "items") -> list[int]:
        cur.execute(f"SELECT id FROM {table}")
        return [r[0] for r in cur.fetchall()]

    def step(self, allow_ddl: bool = True) -> None:
        rng, cur = self.rng, self.conn.cursor()
        roll = rng.random()
        if allow_ddl and roll < 0.03:
            self._ddl(cur)
            return
        if allow_ddl and roll < 0.05:
            cur.execute("FLUSH BINARY LOGS")
            return
        rollback = rng.random() < 0.1
        for _ in range(rng.randint(1, 4)):
            self._write(cur)
        if not rollback:
            self.ledger += 1
            cur.execute("INSERT INTO ledger VALUES (%s, %s)", (self.ledger, f"t{self.ledger}"))
            self.conn.commit()
        else:
            self.conn.rollback()
            self.ledger_rollback = True
        cur.close()

    def _write(self, cur: Any) -> None:
        rng = self.rng
        kind = rng.random()
        ids = self._ids(cur)
        if kind < 0.35 or not ids:
            self.next_id += 1
            cur.execute(
                "INSERT INTO items (id, name, qty, price, note, at, raw) VALUES (%s,%s,%s,%s,%s,%s,%s)",
                (
                    self.next_id,
                    rng.choice(["a", "b:c", "d\\e", "__keys", "ü"]),
                    rng.choice([None, rng.randint(-5, 5)]),
                    f"{rng.randint(0, 9999) / 100:.2f}",
                    rng.choice([None, "x" * rng.randint(0, 20)]),
                    rng.choice([None, "2024-01-02 03:04:05.123"]),
                    rng.choice([None, bytes([rng.randint(0, 255) for _ in range(3)])]),
                ),
            )
        elif kind < 0.55:
            cur.execute(
                "UPDATE items SET qty = %s, note = NULL WHERE id = %s", (rng.randint(0, 9), rng.choice(ids))
            )
        elif kind < 0.62:
            self.next_id += 1
            cur.execute("UPDATE items SET id = %s WHERE id = %s", (self.next_id, rng.choice(ids)))
        elif kind < 0.72:
            cur.execute("DELETE FROM items WHERE id = %s", (rng.choice(ids),))
        elif kind < 0.85:
            a, b = rng.choice(["x", "y:z", "__keys"]), rng.randint(0, 3)
            cur.execute("REPLACE INTO pairs VALUES (%s, %s, %s)", (a, b, str(rng.random())[:8]))
            if rng.random() < 0.3:
                cur.execute("UPDATE IGNORE pairs SET b = b + 10 WHERE a = %s AND b = %s", (a, b))
        elif kind < 0.95:
            cur.execute(
                "INSERT INTO uniq VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = v + 1", (rng.choice("abc"), 1)
            )
            cur.execute("INSERT INTO nokey VALUES (%s)", (rng.randint(0, 9),))
        else:
            cur.execute("DELETE FROM pairs WHERE b > %s", (rng.randint(0, 12),))

    def _ddl(self, cur: Any) -> None:
        self.conn.commit()
        self.ddl_done += 1
        choice = self.ddl_done % 4
        if choice == 1:
            cur.execute(f"ALTER TABLE items ADD COLUMN extra{self.ddl_done} INT NOT NULL DEFAULT 7")
        elif choice == 2:
            cur.execute("TRUNCATE TABLE pairs")
        elif choice == 3:
            cur.execute("ALTER TABLE items MODIFY COLUMN name VARCHAR(60)")
            cur.execute(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                "AND TABLE_NAME='items' AND COLUMN_NAME LIKE 'extra%%'",
                (self.db,),
            )
            for (col,) in cur.fetchall():
                cur.execute(f"ALTER TABLE items DROP COLUMN {col}")
        else:
            cur.execute("RENAME TABLE uniq TO uniq_tmp, uniq_tmp TO uniq")

    def close(self) -> None:
        self.conn.close()


Rows = dict[str, dict[bytes, bytes]]  # row suffix -> hash fields, as the mirror stores them


def expected(
    stack: LocalStack, db: str, keys: dict[str, tuple[str, ...]] = KEYS, json: bool = False
) -> dict[str, Rows]:
    """`SELECT *` of each table in `keys` (table -> key columns), in the mirror's hash form (or, with
    `json`, as canonical JSON objects: compare with `actual_json`)."""
    conn = root(stack, db)
    lay = KeyLayout("x")
    out: dict[str, Rows] = {}
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SET time_zone = '+00:00'")
        for table, key in keys.items():
            cur.execute(f"SELECT * FROM {table}")
            rows = {}
            for row in cur.fetchall():
                if json:
                    rows[lay.row_suffix([row[c] for c in key])] = row_to_json(row)
                    continue
                fields = {}
                for k, v in row.items():
                    if v is not None:
                        fv = field_value(v)
                        fields[k.encode()] = fv if isinstance(fv, bytes) else fv.encode()
                rows[lay.row_suffix([row[c] for c in key])] = fields
            out[table] = rows
    conn.close()
    return out


def actual(
    redis_url: str, prefix: str, db: str, tables: tuple[str, ...] = tuple(KEYS), json: bool = False
) -> dict[str, Rows]:
    r = redis_sync.Redis.from_url(redis_url)
    lay = KeyLayout(prefix)
    out: dict[str, Any] = {}
    for table in tables:
        base = lay.table_base(db, table)
        # the index and the key space in one MULTI: a poll while rows are being written
        # must see them at one instant, or a row written between the two reads looks stray
        with r.pipeline(transaction=True) as pipe:
            index, keys = pipe.smembers(lay.index_key(db, table)).keys(f"{base}:*").execute()
        members = [m.decode() for m in index]
        if json:  # one string per row: the canonical JSON object
            out[table] = {m: orjson.loads(r.get(f"{base}:{m}") or b"null") for m in members}
        else:
            out[table] = {m: r.hgetall(f"{base}:{m}") for m in members}
        # every row key is in the index (meta keys end in an unescaped "__name")
        stored = {k.decode()[len(base) + 1 :] for k in keys}
        assert {k for k in stored if not k.startswith("__")} == set(members), f"stray keys in {table}"
    # the keyless table is never mirrored
    assert not r.exists(lay.index_key(db, "nokey"))
    r.close()
    return out


def actual_json(redis_url: str, prefix: str, db: str) -> dict[str, Any]:
    """The mirror in `--value-mode json`, parsed: equals `expected(stack, db, json=True)`."""
    return actual(redis_url, prefix, db, json=True)


def table_keys(redis_url: str, prefix: str, db: str, table: str) -> list[str]:
    """Every key the mirror holds for a table (rows and its meta keys)."""
    r = redis_sync.Redis.from_url(redis_url)
    try:
        base = KeyLayout(prefix).table_base(db, table)
        return sorted(k.decode() for k in r.scan_iter(match=f"{base}:*", count=1000))
    finally:
        r.close()


def stored_position(redis_url: str, prefix: str) -> BinlogPosition | None:
    """The position of the checkpoint the mirror stored under `prefix`: None before the first one,
    or while Redis is unreachable (the crash tests restart it)."""
    try:
        with redis_sync.Redis.from_url(redis_url) as r:
            raw = r.hgetall(f"{prefix}:__checkpoint")
    except redis_sync.RedisError:
        return None
    return stored.checkpoint.position if (stored := decode_checkpoint(raw)) else None


def wait_applied(redis_url: str, prefix: str, target: BinlogPosition | None, timeout: float = 30.0) -> None:
    """Until the checkpoint stored in Redis reaches `target` (None: until there is one). It blocks:
    async tests run it in `asyncio.to_thread`, so the replicator on their loop keeps applying."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = stored_position(redis_url, prefix)
        if at is not None and (target is None or not at < target):
            return
        time.sleep(0.05)
    raise AssertionError(f"mirror did not reach {target} (at {stored_position(redis_url, prefix)})")


async def settle(rep: Any, stack: LocalStack, timeout: float = 30.0) -> None:
    """Wait until the replicator has applied everything on the source and no resync runs."""
    target = master_position(stack)
    try:
        await wait_hooks(rep, target, timeout)
    except AssertionError as exc:  # name the events the replicator did not get past
        raise AssertionError(f"{exc}; the source's events after it: {binlog_tail(stack, rep)}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not await rep.mirror.pending_resyncs() and not any(t.resync for t in rep.status().tables):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"resyncs still running: {await rep.mirror.pending_resyncs()}")


async def wait_hooks(rep: Any, target: BinlogPosition, timeout: float = 30.0) -> None:
    """Wait until the replicator itself has applied `target`. Polled on the event loop: `applied`
    moves in the same step that runs the on_applied hooks, so they have all run (the checkpoint in
    Redis moves a moment earlier)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        applied = rep.status().applied
        if applied is not None and not applied.position < target:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"replicator did not reach {target} (at {rep.status().applied})")


async def stop_replicator(rep: Any, task: asyncio.Task[None], timeout: float = 15.0) -> None:
    """stop() and wait for run() to return (its own error, if any, is the test's business). One
    that does not return in time fails the test: cancelling it instead once hid a session that
    never ended, and the socket it left open failed a later, unrelated test."""
    rep.stop()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise AssertionError(f"the replicator did not stop within {timeout:g} s of stop()")
    with contextlib.suppress(Exception):
        task.result()


@contextlib.asynccontextmanager
async def replicating(settings: Settings) -> AsyncIterator[Replicator]:
    """A Replicator running on this loop, stopped (`stop_replicator`) on the way out."""
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        yield rep
    finally:
        await stop_replicator(rep, task)


async def until(what: str, check: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll `check` until it is true; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
