"""Documents (docs/mirror.md, "Documents") on real servers: orders with their lines with their
options, kept as one key per order through inserts, updates, reparenting, children before their
parents, parent deletes with and without FK cascades, a primary key that changes, and SIGKILLs.
The expected documents are built here from `SELECT`s with the documented rules
(docs/row-format.md), not with the sink's code, and compared byte for byte."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import random
import signal
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.errors import ConfigError
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.sink.clear import clear_prefix
from service.verify.verifier import Verifier
from tests.integration.mirror_helpers import (
    master_position,
    mirror_settings,
    new_database,
    root,
    settle,
    stop_replicator,
    wait_applied,
)
from tests.integration.test_mirror_crash import _start as start_run
from tests.integration.test_mirror_crash import _stop as stop_run
from tests.integration.test_mirror_crash import _wait_advance as wait_advance

pytestmark = pytest.mark.integration

SCHEMA = (
    "CREATE TABLE orders (id INT NOT NULL PRIMARY KEY, customer VARCHAR(40) NOT NULL,"
    " total DECIMAL(10,2), internal_note VARCHAR(100), placed TIMESTAMP(3) NULL, big BIGINT UNSIGNED,"
    " weight DOUBLE)",
    # no foreign key: an order deleted leaves its lines held; a line may come before its order
    "CREATE TABLE order_lines (id INT NOT NULL PRIMARY KEY, order_id INT, sku VARCHAR(20),"
    " qty INT NOT NULL, cost_price DECIMAL(8,2), tag VARBINARY(6))",
    # a foreign key with cascades: a line deleted takes its options, a line's id change moves them
    "CREATE TABLE line_options (id INT NOT NULL PRIMARY KEY, line_id INT, name VARCHAR(20),"
    " price DOUBLE, FOREIGN KEY (line_id) REFERENCES order_lines (id) ON DELETE CASCADE ON UPDATE CASCADE)",
)


def document(db: str, app: str, fmt: str) -> dict[str, Any]:
    return {
        "orders": {
            "root": f"{db}.orders",
            "key": f"{app}:order:{{id}}",
            "exclude": ["internal_note"],
            "format": fmt,
            "child": [
                {
                    "table": f"{db}.order_lines",
                    "on": {"order_id": "id"},
                    "field": "lines",
                    "exclude": ["cost_price"],
                    "child": [
                        {
                            "table": f"{db}.line_options",
                            "on": {"line_id": "id"},
                            "field": "options",
                            "shape": "array",
                            "rename": {"price": "amount"},
                        }
                    ],
                }
            ],
        }
    }


def _json_value(v: Any, timestamp: bool = False) -> Any:
    """docs/row-format.md's canonical JSON of a value as pymysql returns it (session in UTC)."""
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, dt.datetime):
        frac = f".{v.microsecond:06d}" if v.microsecond else ""
        return v.strftime("%Y-%m-%dT%H:%M:%S") + frac + ("Z" if timestamp else "")
    return v


def _hash_text(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, dt.datetime):
        return (v.strftime("%Y-%m-%d %H:%M:%S") + (f".{v.microsecond:06d}" if v.microsecond else "")).encode()
    return (repr(v) if isinstance(v, float) else str(v)).encode()


def expected(stack: LocalStack, db: str, app: str, fmt: str) -> dict[str, Any]:
    """Every document the source's rows make: key -> GET's bytes (json) or HGETALL's (hash)."""
    conn = root(stack, db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT * FROM orders ORDER BY id")
        orders = [{k: v for k, v in o.items() if k != "internal_note"} for o in cur.fetchall()]
        cur.execute("SELECT * FROM order_lines ORDER BY id")
        lines = [{k: v for k, v in ln.items() if k != "cost_price"} for ln in cur.fetchall()]
        cur.execute("SHOW TABLES LIKE 'line_options'")
        options = []
        if cur.fetchall():
            cur.execute("SELECT * FROM line_options ORDER BY id")
            options = [{"amount" if k == "price" else k: v for k, v in o.items()} for o in cur.fetchall()]
    conn.close()

    def line_doc(line: dict[str, Any]) -> dict[str, Any]:
        doc = {k: _json_value(v) for k, v in line.items()}
        doc["options"] = [o for o in options if o["line_id"] == line["id"]]
        return doc

    out: dict[str, Any] = {}
    for order in orders:
        mine = [ln for ln in lines if ln["order_id"] == order["id"]]
        key = f"{app}:order:{order['id']}"
        if fmt == "json":
            doc = {k: _json_value(v, timestamp=k == "placed") for k, v in order.items()}
            doc["lines"] = {str(ln["id"]): line_doc(ln) for ln in mine}
            out[key] = orjson.dumps(doc)
        else:
            fields = {k.encode(): _hash_text(v) for k, v in order.items() if v is not None}
            fields.update((f"lines:{ln['id']}".encode(), orjson.dumps(line_doc(ln))) for ln in mine)
            out[key] = fields
    return out


def actual(redis_url: str, app: str, fmt: str) -> dict[str, Any]:
    r = redis_sync.Redis.from_url(redis_url)
    try:
        keys = sorted(k.decode() for k in r.scan_iter(match=f"{app}:*", count=1000))
        return {k: r.get(k) if fmt == "json" else r.hgetall(k) for k in keys}
    finally:
        r.close()


def held(stack: LocalStack, db: str) -> int:
    """Lines whose order is not there (no cascade reaches them): held by the mirror."""
    conn = root(stack, db)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM order_lines l WHERE l.order_id IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = l.order_id)"
        )
        row = cur.fetchone()
    conn.close()
    assert row is not None
    return int(row[0])


class Workload:
    """Random transactions over the three tables, children before parents included."""

    def __init__(self, stack: LocalStack, db: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.conn = root(stack, db)
        self.conn.autocommit(False)
        self.next = {"orders": 1, "order_lines": 1, "line_options": 1}

    def _id(self, table: str, fresh: bool = False) -> int:
        if fresh or self.next[table] == 1:
            n = self.next[table]
            self.next[table] += 1
            return n
        return self.rng.randrange(1, self.next[table] + 2)  # may name no row (yet)

    def step(self) -> None:
        rng, cur = self.rng, self.conn.cursor()
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.15:
                cur.execute(
                    "INSERT INTO orders (id, customer, total, internal_note, placed, big, weight)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (
                        self._id("orders", fresh=True),
                        rng.choice(["ann", 'b"o\\b', "zoë\n", "x:y"]),
                        Decimal(rng.randint(0, 10**6)) / 100,
                        "secret",
                        rng.choice([None, "2026-01-02 03:04:05.120", "1999-12-31 23:59:59"]),
                        rng.choice([0, 2**63 + 7, 18446744073709551615]),
                        rng.choice([None, 0.1, 1e-5, 2.5e-7, 1e22, -3.75]),
                    ),
                )
            elif op < 0.35:
                fk_off = rng.random() < 0.5  # a line before its order (no FK: always allowed)
                cur.execute(
                    "INSERT INTO order_lines (id, order_id, sku, qty, cost_price, tag)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    (
                        self._id("order_lines", fresh=True),
                        self._id("orders") if fk_off or rng.random() < 0.9 else None,
                        rng.choice(["sku-1", "é", None]),
                        rng.randint(1, 9),
                        Decimal("1.50"),
                        rng.choice([None, b"\x00\xff", b"abc"]),
                    ),
                )
            elif op < 0.5:
                line = self._id("order_lines")
                if rng.random() < 0.3:  # an option before its line
                    cur.execute("SET FOREIGN_KEY_CHECKS = 0")
                cur.execute(
                    "INSERT IGNORE INTO line_options SELECT %s, %s, %s, %s FROM DUAL"
                    " WHERE @@foreign_key_checks = 0 OR EXISTS (SELECT 1 FROM order_lines WHERE id = %s)",
                    (self._id("line_options", fresh=True), line, rng.choice(["red", "xl"]), 0.25, line),
                )
                cur.execute("SET FOREIGN_KEY_CHECKS = 1")
            elif op < 0.62:  # reparent a line, or change it
                if rng.random() < 0.5:
                    cur.execute(
                        "UPDATE order_lines SET order_id = %s WHERE id = %s",
                        (self._id("orders"), self._id("order_lines")),
                    )
                else:
                    cur.execute(
                        "UPDATE order_lines SET qty = qty + 1, sku = 'upd' WHERE id = %s",
                        (self._id("order_lines"),),
                    )
            elif op < 0.7:
                cur.execute(
                    "UPDATE line_options SET line_id = (SELECT MAX(id) FROM order_lines), price = price * 2"
                    " WHERE id = %s",
                    (self._id("line_options"),),
                )
            elif op < 0.8:
                cur.execute(
                    "UPDATE orders SET customer = %s, total = total + 1 WHERE id = %s",
                    (rng.choice(["carl", "dee"]), self._id("orders")),
                )
            elif op < 0.87:  # its lines are held (no cascade)
                cur.execute("DELETE FROM orders WHERE id = %s", (self._id("orders"),))
            elif op < 0.93:  # the cascade takes its options
                cur.execute("DELETE FROM order_lines WHERE id = %s", (self._id("order_lines"),))
            elif op < 0.97:  # the document moves; its lines (order_id unchanged) are held
                cur.execute(
                    "UPDATE IGNORE orders SET id = %s WHERE id = %s",
                    (self._id("orders", fresh=True), self._id("orders")),
                )
            else:  # a line's id changes: ON UPDATE CASCADE moves its options along
                cur.execute(
                    "UPDATE IGNORE order_lines SET id = %s WHERE id = %s",
                    (self._id("order_lines", fresh=True), self._id("order_lines")),
                )
        self.conn.commit()
        cur.close()

    def close(self) -> None:
        self.conn.close()


def _settings(stack: LocalStack, db: str, prefix: str, app: str, fmt: str, **extra: Any) -> Any:
    return mirror_settings(stack, db, prefix, document=document(db, app, fmt), chunk_rows=3, **extra)


@pytest.mark.parametrize("fmt", ["json", "hash"])
async def test_documents_follow_a_random_workload(stack: LocalStack, fmt: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    app = f"app{prefix}"
    wl = Workload(stack, db, seed=7 if fmt == "json" else 8)
    for _ in range(15):  # rows before the first start: the bootstrap copy builds their documents
        wl.step()
    rep = Replicator(_settings(stack, db, prefix, app, fmt, changelog_maxlen=100000))
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)  # the first copy done: the workload goes through the stream
        for i in range(120):
            wl.step()
            if i % 10 == 0:
                await asyncio.sleep(0.05)  # (the mirror applies while the workload goes on)
        with wl.conn.cursor() as cur:  # every root row changes (hash: its fields alone are written)
            cur.execute("UPDATE orders SET customer = CONCAT(customer, '+'), weight = 1.5")
            cur.execute("UPDATE order_lines SET qty = qty + 1 WHERE id % 2 = 0")
        wl.conn.commit()
        await asyncio.to_thread(wait_applied, info.redis_url, prefix, master_position(stack))
        await settle(rep, stack)
        want = expected(stack, db, app, fmt)
        assert actual(info.redis_url, app, fmt) == want
        assert len(want) > 3 and held(stack, db) > 0  # the workload made documents and held lines
        tables = {t.table: t for t in (await rep.counted_status()).tables}
        assert [(d.document, d.field, d.held) for d in tables["order_lines"].documents] == [
            ("orders", "lines", held(stack, db))
        ]
        assert [(d.field, d.refused) for d in tables["orders"].documents] == [(None, 0)]
        r = redis_sync.Redis.from_url(info.redis_url)
        assert not r.keys(f"{prefix}:*__docrefused*")
        r.close()
    finally:
        await stop_replicator(rep, task)
        wl.close()
    # verify builds each document again from the source; --repair writes what differs
    settings = _settings(stack, db, prefix, app, fmt)
    assert (await Verifier(settings).run()).equal
    r = redis_sync.Redis.from_url(info.redis_url)
    first, second = sorted(want)[:2]
    r.delete(first)
    if fmt == "json":
        r.set(second, b'{"id":0}')
    else:
        r.hset(second, "customer", "forged")
    report = await Verifier(settings).run()
    assert sorted((d.kind, d.key) for d in report.differences) == [
        ("document differs", second),
        ("document missing", first),
    ]
    assert (await Verifier(settings).run(repair=True)).repaired == 2
    assert actual(info.redis_url, app, fmt) == want
    r.close()


def test_documents_survive_sigkills(stack: LocalStack, tmp_path: Path) -> None:
    """A mirror process killed (SIGKILL) at random moments while the workload runs; each new one
    resumes from the checkpoint: the documents end equal to the source's."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    app = f"app{prefix}"
    config = tmp_path / "docs.toml"
    config.write_text(_toml(document(db, app, "json")))
    wl = Workload(stack, db, seed=11)
    log = tmp_path / "mirror.log"
    rng = random.Random(3)
    proc = start_run(stack, db, prefix, log, "--config", str(config))
    try:
        for _ in range(4):
            wait_advance(info.redis_url, prefix, None)
            for _ in range(rng.randint(10, 30)):
                wl.step()
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc = start_run(stack, db, prefix, log, "--config", str(config))
        target = master_position(stack)
        wait_applied(info.redis_url, prefix, target, timeout=60)
        deadline = time.monotonic() + 60
        want = expected(stack, db, app, "json")
        while actual(info.redis_url, app, "json") != want and time.monotonic() < deadline:
            time.sleep(0.2)  # (a resync of the first start may still run)
        assert actual(info.redis_url, app, "json") == want, log.read_text()[-3000:]
    finally:
        stop_run(proc)
        wl.close()


def _toml(docs: dict[str, Any]) -> str:
    """The config file's [document.NAME] sections (JSON strings are TOML basic strings)."""
    q = json.dumps
    out: list[str] = []

    def section(path: str, s: dict[str, Any], array: bool) -> None:
        out.append(f"[[{path}]]" if array else f"[{path}]")
        for k, v in s.items():
            if k == "child":
                continue
            if isinstance(v, dict):
                out.append(f"{k} = {{ " + ", ".join(f"{a} = {q(b)}" for a, b in v.items()) + " }")
            else:
                out.append(f"{k} = {q(v)}")
        for c in s.get("child", []):
            section(f"{path}.child", c, True)

    for name, d in docs.items():
        section(f"document.{name}", d, False)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"child": [{"table": "{db}.order_lines", "on": {"order_id": "customer"}, "field": "lines"}]},
            "is neither the primary key of",
        ),
        ({"key": "app:order:{customer}"}, "lacks key column {id}"),
        ({"key": "app:order:{placed}:{id}"}, "nullable"),
        (
            {"child": [{"table": "{db}.order_lines", "on": {"order_id": "id"}, "field": "customer"}]},
            "also a field",
        ),
        ({"root": "{db}.missing"}, "not mirrored"),
        ({"key": "{pfx}:order:{id}"}, "the mirror's own key prefix"),
    ],
)
async def test_documents_that_cannot_apply_are_refused_at_start(
    stack: LocalStack, change: dict[str, Any], message: str
) -> None:
    db, prefix = new_database(stack, *SCHEMA)
    doc = document(db, "app", "json")["orders"]
    doc.update(json.loads(json.dumps(change).replace("{db}", db).replace("{pfx}", prefix)))
    rep = Replicator(mirror_settings(stack, db, prefix, document={"orders": doc}))
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        await asyncio.wait_for(rep.run(), 60)


async def test_a_document_over_max_document_bytes_is_refused_not_truncated(
    stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    """Over the limit the key goes (never a truncated or stale document), the refusal is counted
    and logged by key; back under it, the document is written again."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    app = f"app{prefix}"
    docs = document(db, app, "json")
    docs["orders"]["max_document_bytes"] = 1024
    rep = Replicator(mirror_settings(stack, db, prefix, document=docs))
    task = asyncio.create_task(rep.run())
    conn = root(stack, db)
    try:
        await settle(rep, stack)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO orders (id, customer, total) VALUES (1, 'big', 1), (2, 'small', 2)")
            cur.executemany(
                "INSERT INTO order_lines (id, order_id, sku, qty) VALUES (%s, 1, 'a-long-sku-name', 1)",
                [(n,) for n in range(1, 30)],
            )
        conn.commit()
        await settle(rep, stack)
        assert actual(info.redis_url, app, "json") == {
            f"{app}:order:2": expected(stack, db, app, "json")[f"{app}:order:2"]
        }
        await rep.documents.check(rep.mirror, rep.catalog.shapes)
        assert f"{app}:order:1" in caplog.text and "max_document_bytes" in caplog.text
        tables = {t.table: t for t in (await rep.counted_status()).tables}
        assert [d.refused for d in tables["orders"].documents] == [1]
        with conn.cursor() as cur:
            cur.execute("DELETE FROM order_lines WHERE id > 3")
        conn.commit()
        await settle(rep, stack)
        assert actual(info.redis_url, app, "json") == expected(stack, db, app, "json")
        tables = {t.table: t for t in (await rep.counted_status()).tables}
        assert [d.refused for d in tables["orders"].documents] == [0]
    finally:
        conn.close()
        await stop_replicator(rep, task)


async def test_table_operations_a_changed_section_and_ctl_clear_rebuild_or_remove_documents(
    stack: LocalStack,
) -> None:
    """ALTER (a resync), TRUNCATE and DROP of a child or the root; a restart whose section changed
    (the format and the key template: the tables are copied again into the new documents, the old
    keys go); `ctl clear` takes every document key."""
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    app = f"app{prefix}"
    wl = Workload(stack, db, seed=21)
    for _ in range(40):
        wl.step()
    conn = root(stack, db)

    async def same(rep: Replicator, fmt: str, name: str) -> None:
        while rep.status().state is State.STARTING:  # (its bootstrap marks the copies to make)
            await asyncio.sleep(0.02)
        await settle(rep, stack)
        assert actual(info.redis_url, name, fmt) == expected(stack, db, name, fmt)

    rep = Replicator(mirror_settings(stack, db, prefix, document=document(db, app, "json")))
    task = asyncio.create_task(rep.run())
    try:
        await same(rep, "json", app)
        for sql in (
            "ALTER TABLE order_lines ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'n'",  # a resync
            "TRUNCATE TABLE line_options",
            "ALTER TABLE orders ADD COLUMN region CHAR(2) NULL DEFAULT 'eu' AFTER customer",
        ):
            with conn.cursor() as cur:
                cur.execute(sql)
            conn.commit()
            for _ in range(10):
                wl.step()
            await same(rep, "json", app)
    finally:
        await stop_replicator(rep, task)
    # a changed section: hash documents at another key template
    rep = Replicator(mirror_settings(stack, db, prefix, document=document(db, f"{app}x", "hash")))
    task = asyncio.create_task(rep.run())
    try:
        await same(rep, "hash", f"{app}x")
        assert actual(info.redis_url, app, "json") == {}  # the old documents are gone
        with conn.cursor() as cur:
            cur.execute("DROP TABLE line_options")
        conn.commit()
        await same(rep, "hash", f"{app}x")
        with conn.cursor() as cur:
            cur.execute("TRUNCATE TABLE orders")
        conn.commit()
        await settle(rep, stack)
        assert actual(info.redis_url, f"{app}x", "hash") == {}
        tables = {t.table: t for t in (await rep.counted_status()).tables}
        assert [d.held for d in tables["order_lines"].documents] == [held(stack, db)]
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO orders (id, customer) SELECT DISTINCT order_id, 'back' FROM order_lines"
                " WHERE order_id IS NOT NULL"
            )
        conn.commit()
        await same(rep, "hash", f"{app}x")  # the held lines are attached again
    finally:
        await stop_replicator(rep, task)
        wl.close()
        conn.close()
    assert actual(info.redis_url, f"{app}x", "hash")
    await clear_prefix(info.redis_url, prefix)
    assert actual(info.redis_url, f"{app}x", "hash") == {}
