"""A trickle of demo writes so events flow in `binlog-mirror run` without servers configured."""

from __future__ import annotations

import asyncio
import logging
import random
from decimal import Decimal

import aiomysql

from service.settings import MySQLUrl
from service.sqltext import bind

__all__ = ["DEMO_SCHEMA", "create_demo_schema", "demo_writes"]

log = logging.getLogger(__name__)

DEMO_SCHEMA = "demo"
_DDL = [
    f"CREATE DATABASE IF NOT EXISTS {DEMO_SCHEMA}",
    f"CREATE TABLE IF NOT EXISTS {DEMO_SCHEMA}.customers (id INT PRIMARY KEY AUTO_INCREMENT, "
    "name VARCHAR(64) NOT NULL, email VARCHAR(128), balance DECIMAL(12,2) NOT NULL DEFAULT 0, "
    "updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))",
    f"CREATE TABLE IF NOT EXISTS {DEMO_SCHEMA}.orders (id BIGINT PRIMARY KEY AUTO_INCREMENT, "
    "customer_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL, status ENUM('new','paid','shipped') NOT NULL)",
]
_NAMES = ["ada", "grace", "linus", "barbara", "ken", "margaret", "dennis", "frances"]


async def _connect(url: MySQLUrl) -> aiomysql.Connection:
    return await aiomysql.connect(
        host=url.host, port=url.port, user=url.user, password=url.password.get_secret_value(), autocommit=True
    )


async def create_demo_schema(url: MySQLUrl) -> None:
    conn = await _connect(url)
    try:
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION sql_notes = 0")  # no "already exists" note on a rerun
            for sql in _DDL:
                await cur.execute(sql)
    finally:
        conn.close()


def _cents(lo: int, hi: int) -> Decimal:
    # A Decimal, not a float: a float is a DOUBLE literal, which a
    # DECIMAL(12,2) column stores with a "Data truncated" warning.
    return Decimal(random.randint(lo, hi)).scaleb(-2)


async def demo_writes(url: MySQLUrl, per_second: float = 3.0) -> None:
    """Insert, update and delete a few rows a second until cancelled."""
    conn = await _connect(url)
    try:
        while True:
            async with conn.cursor() as cur:
                roll = random.random()
                if roll < 0.45:
                    name = random.choice(_NAMES)
                    await cur.execute(
                        bind(
                            f"INSERT INTO {DEMO_SCHEMA}.customers (name, email, balance) VALUES (%s, %s, %s)",
                            (name, f"{name}@example.com", _cents(0, 10000)),
                        )
                    )
                    await cur.execute(
                        bind(
                            f"INSERT INTO {DEMO_SCHEMA}.orders (customer_id, amount, status) "
                            "VALUES (%s, %s, 'new')",
                            (cur.lastrowid, _cents(100, 99999)),
                        )
                    )
                elif roll < 0.8:
                    await cur.execute(
                        bind(
                            f"UPDATE {DEMO_SCHEMA}.customers SET balance = balance + %s "
                            "ORDER BY RAND() LIMIT 1",
                            (_cents(-500, 500),),
                        )
                    )
                    await cur.execute(
                        f"UPDATE {DEMO_SCHEMA}.orders SET status = IF(status='new','paid','shipped') "
                        "ORDER BY RAND() LIMIT 1"
                    )
                else:
                    await cur.execute(f"DELETE FROM {DEMO_SCHEMA}.orders ORDER BY RAND() LIMIT 1")
            await asyncio.sleep(1.0 / per_second)
    finally:
        conn.close()
