"""service/sqltext.py against a real MariaDB: every literal form finds and round-trips the value
it stands for, whatever the bytes (non-UTF-8 binary, quotes, backslashes, NUL) and whatever the
session's sql_mode (NO_BACKSLASH_ESCAPES) or the column's charset."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest

from service.devtools.stack import LocalStack
from service.sqltext import bind, literal
from tests.integration.mirror_helpers import new_database, root

pytestmark = pytest.mark.integration

COLUMNS = {
    "b": "BINARY(16)",
    "vb": "VARBINARY(40)",
    "bl": "BLOB",
    "s": "VARCHAR(40) CHARACTER SET utf8mb4",
    "l1": "VARCHAR(40) CHARACTER SET latin1",
    "d": "DECIMAL(20,6)",
    "i": "BIGINT UNSIGNED",
    "dt6": "DATETIME(6)",
    "dd": "DATE",
    "t6": "TIME(6)",
    "f": "DOUBLE",
}


def _values(rng: random.Random, n: int) -> list[dict[str, Any]]:
    tricky = ["'", "\\", "\\'", "%s", "%%", "\x00", "é", "😀", "a\nb", ""]
    rows = []
    for i in range(n):
        rows.append(
            {
                "b": rng.randbytes(16),
                "vb": rng.randbytes(rng.randint(0, 40)),
                "bl": bytes([0xA3, 0x27, 0x5C, 0x00]) + rng.randbytes(rng.randint(0, 20)),
                "s": rng.choice(tricky) + str(i) + rng.choice(tricky),
                "l1": rng.choice(["é", "'", "\\", "x"]) + str(i),
                "d": Decimal(rng.randint(-(10**12), 10**12)) / 1_000_000,
                "i": rng.choice([0, 2**64 - 1, rng.randint(0, 2**63)]),
                "dt6": dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 10**15)),
                "dd": dt.date(1000, 1, 1) + dt.timedelta(days=rng.randint(0, 3_000_000)),
                "t6": dt.timedelta(microseconds=rng.randint(-838 * 3600 * 10**6, 838 * 3600 * 10**6)),
                "f": rng.choice([0.1, -1e300, 5e-324, 123.456]),
            }
        )
    return rows


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_every_literal_round_trips_and_finds_its_row(stack: LocalStack, sql_mode: str) -> None:
    db, _ = new_database(stack)
    cols = ", ".join(f"{c} {t}" for c, t in COLUMNS.items())
    rows = _values(random.Random(37), 200)
    conn = root(stack, db)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION sql_mode = '{sql_mode}'")
            cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, {cols})")
            names = ", ".join(COLUMNS)
            for n, row in enumerate(rows):
                values = [n, *row.values()]
                cur.execute(
                    bind(f"INSERT INTO t (id, {names}) VALUES ({', '.join(['%s'] * len(values))})", values)
                )
            for n, row in enumerate(rows):
                for c, v in row.items():
                    cur.execute(bind(f"SELECT id FROM t WHERE {c} = %s AND id = %s", (v, n)))
                    assert cur.fetchall() == ((n,),), (c, literal(v))
                cur.execute(f"SELECT {names} FROM t WHERE id = {n}")
                got = dict(zip(COLUMNS, cur.fetchone() or (), strict=True))
                assert got == row
            # keyset pagination on a binary key, as the copies do: every row once, in order
            cur.execute("SELECT b FROM t ORDER BY b LIMIT 1")
            last, seen = cur.fetchone(), 1
            while True:
                cur.execute(bind("SELECT b FROM t WHERE (b) > (%s) ORDER BY b LIMIT 7", last))
                part = cur.fetchall()
                if not part:
                    break
                seen += len(part)
                last = part[-1]
            assert seen == len(rows)
    finally:
        conn.close()
