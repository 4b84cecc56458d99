"""Documents whose children name their parent by a unique key, or by a composite primary key
(docs/mirror.md, "Documents"): customers with their orders (`on` the customer's unique `code`),
with their shipments (keyed by `(order_id, seq)`), with their parcels (`on` both columns). On
real servers, through a random workload that changes the unique key (the children follow the
code: those of a code no customer has are held), reparents, deletes, and children before their
parents; every document equals the one built here from `SELECT`s, byte for byte."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pymysql
import pytest

from service.devtools.stack import LocalStack
from service.pipeline.replicator import Replicator
from service.verify.verifier import Verifier
from tests.integration.mirror_helpers import mirror_settings, new_database, root, settle, stop_replicator
from tests.integration.test_mirror_documents import actual

pytestmark = pytest.mark.integration

SCHEMA = (
    "CREATE TABLE customers (id INT NOT NULL PRIMARY KEY, code VARCHAR(10) NULL, name VARCHAR(20),"
    " UNIQUE KEY (code))",
    "CREATE TABLE orders (id INT NOT NULL PRIMARY KEY, customer_code VARCHAR(10), amount INT)",
    "CREATE TABLE shipments (order_id INT NOT NULL, seq INT NOT NULL, carrier VARCHAR(10),"
    " PRIMARY KEY (order_id, seq))",
    "CREATE TABLE parcels (id INT NOT NULL PRIMARY KEY, order_id INT, seq INT, weight INT)",
)
CODES = ["c1", "c2", "a:b", "x\\y", "__z", None]  # ':' '\' and a leading '__' escaped in key text


def document(db: str, app: str, fmt: str) -> dict[str, Any]:
    return {
        "customers": {
            "root": f"{db}.customers",
            "key": f"{app}:customer:{{id}}",
            "format": fmt,
            "child": [
                {
                    "table": f"{db}.orders",
                    "on": {"customer_code": "code"},  # a unique key of customers
                    "field": "orders",
                    "child": [
                        {
                            "table": f"{db}.shipments",
                            "on": {"order_id": "id"},
                            "field": "shipments",
                            "shape": "array",
                            "child": [
                                {
                                    "table": f"{db}.parcels",
                                    "on": {"seq": "seq", "order_id": "order_id"},  # a composite key
                                    "field": "parcels",
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    }


def expected(stack: LocalStack, db: str, app: str, fmt: str) -> dict[str, Any]:
    conn = root(stack, db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        rows = {}
        for t, order in [
            ("customers", "id"),
            ("orders", "id"),
            ("shipments", "order_id, seq"),
            ("parcels", "id"),
        ]:
            cur.execute(f"SELECT * FROM {t} ORDER BY {order}")
            rows[t] = list(cur.fetchall())
    conn.close()

    def shipment(s: dict[str, Any]) -> dict[str, Any]:
        mine = [p for p in rows["parcels"] if (p["order_id"], p["seq"]) == (s["order_id"], s["seq"])]
        return {**s, "parcels": {str(p["id"]): p for p in mine}}

    def order(o: dict[str, Any]) -> dict[str, Any]:
        return {**o, "shipments": [shipment(s) for s in rows["shipments"] if s["order_id"] == o["id"]]}

    out: dict[str, Any] = {}
    for c in rows["customers"]:
        mine = [o for o in rows["orders"] if c["code"] is not None and o["customer_code"] == c["code"]]
        key = f"{app}:customer:{c['id']}"
        if fmt == "json":
            out[key] = orjson.dumps({**c, "orders": {str(o["id"]): order(o) for o in mine}})
        else:
            fields = {k.encode(): str(v).encode() for k, v in c.items() if v is not None}
            fields.update((f"orders:{o['id']}".encode(), orjson.dumps(order(o))) for o in mine)
            out[key] = fields
    return out


def held(stack: LocalStack, db: str) -> tuple[int, int]:
    """Orders whose code no customer has, and parcels whose shipment is not there."""
    conn = root(stack, db)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT (SELECT COUNT(*) FROM orders o WHERE o.customer_code IS NOT NULL AND NOT EXISTS"
            " (SELECT 1 FROM customers c WHERE BINARY c.code = BINARY o.customer_code)),"
            " (SELECT COUNT(*) FROM parcels p WHERE p.order_id IS NOT NULL AND p.seq IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = p.order_id AND s.seq = p.seq))"
        )
        row = cur.fetchone()
    conn.close()
    assert row is not None
    return int(row[0]), int(row[1])


def step(cur: Any, rng: random.Random, n: dict[str, int]) -> None:
    def some(t: str) -> int:
        return rng.randrange(1, n[t] + 2)

    def fresh(t: str) -> int:
        n[t] += 1
        return n[t]

    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.12:
            cur.execute(
                "INSERT IGNORE INTO customers VALUES (%s, %s, %s)",
                (fresh("customers"), rng.choice(CODES), rng.choice(["ann", "bo"])),
            )
        elif op < 0.22:  # the unique key changes: its orders are held, another code's attached
            cur.execute(
                "UPDATE IGNORE customers SET code = %s WHERE id = %s", (rng.choice(CODES), some("customers"))
            )
        elif op < 0.27:
            cur.execute("UPDATE customers SET name = CONCAT(name, '+') WHERE id = %s", (some("customers"),))
        elif op < 0.32:
            cur.execute("DELETE FROM customers WHERE id = %s", (some("customers"),))
        elif op < 0.45:
            cur.execute(
                "INSERT INTO orders VALUES (%s, %s, %s)",
                (fresh("orders"), rng.choice([*CODES, "nobody"]), rng.randint(1, 99)),
            )
        elif op < 0.52:  # reparent
            cur.execute(
                "UPDATE orders SET customer_code = %s WHERE id = %s",
                (rng.choice([*CODES, "nobody"]), some("orders")),
            )
        elif op < 0.56:
            cur.execute("DELETE FROM orders WHERE id = %s", (some("orders"),))
        elif op < 0.68:
            cur.execute(
                "INSERT IGNORE INTO shipments VALUES (%s, %s, %s)",
                (some("orders"), rng.randint(1, 3), rng.choice(["ups", None])),
            )
        elif op < 0.73:  # a composite key changes: its parcels are held, another's attached
            cur.execute(
                "UPDATE IGNORE shipments SET seq = %s WHERE order_id = %s ORDER BY seq LIMIT 1",
                (rng.randint(1, 3), some("orders")),
            )
        elif op < 0.77:
            cur.execute("DELETE FROM shipments WHERE order_id = %s LIMIT 1", (some("orders"),))
        elif op < 0.9:
            cur.execute(
                "INSERT INTO parcels VALUES (%s, %s, %s, %s)",
                (fresh("parcels"), some("orders"), rng.randint(1, 3), rng.randint(1, 9)),
            )
        elif op < 0.96:
            cur.execute(
                "UPDATE parcels SET seq = %s, weight = weight + 1 WHERE id = %s",
                (rng.randint(1, 3), some("parcels")),
            )
        else:
            cur.execute("DELETE FROM parcels WHERE id = %s", (some("parcels"),))


@pytest.mark.parametrize("fmt", ["json", "hash"])
async def test_children_named_by_a_unique_key_or_a_composite_key(stack: LocalStack, fmt: str) -> None:
    info = stack.load()
    assert info is not None
    db, prefix = new_database(stack, *SCHEMA)
    app = f"app{prefix}"
    rng, n = random.Random(5 if fmt == "json" else 6), {"customers": 0, "orders": 0, "parcels": 0}
    conn = root(stack, db)
    conn.autocommit(False)

    def work(steps: int) -> None:
        for _ in range(steps):
            with conn.cursor() as cur:
                step(cur, rng, n)
            conn.commit()

    work(20)  # rows before the first start: the first copy builds their documents
    settings = mirror_settings(stack, db, prefix, document=document(db, app, fmt), chunk_rows=3)
    rep = Replicator(settings)
    task = asyncio.create_task(rep.run())
    try:
        await settle(rep, stack)
        assert actual(info.redis_url, app, fmt) == expected(stack, db, app, fmt) != {}
        for i in range(150):
            work(1)
            if i % 10 == 0:
                await asyncio.sleep(0.05)
        await settle(rep, stack)
        want = expected(stack, db, app, fmt)
        assert actual(info.redis_url, app, fmt) == want
        orders, parcels = held(stack, db)
        assert orders > 0 and parcels > 0  # the workload held children of both kinds
        shown = {t.table: t for t in (await rep.counted_status()).tables}
        assert [d.held for d in shown["orders"].documents] == [orders]
        assert [d.held for d in shown["parcels"].documents] == [parcels]
    finally:
        conn.close()
        await stop_replicator(rep, task)
    # verify's twin of the rendering builds the same documents from the source
    assert (await Verifier(settings).run()).equal
