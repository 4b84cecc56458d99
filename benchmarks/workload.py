"""Write the benchmark workloads into the local stack's binlog, one binlog file per workload.

Workloads (the issue's shapes, scaled by --rows):
  inserts   ROWS rows inserted in 1,000-row transactions
  updates   ROWS rows updated in 1,000-row transactions (full row images: before + after)
  small     ROWS/10 single-row insert transactions

Table: INT PK, BIGINT, VARCHAR(64), DECIMAL(12,2), DATETIME(6), TIMESTAMP, DOUBLE,
~200-byte TEXT, ENUM, nullable TINYINT.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pymysql

from service.devtools.stack import LocalStack

WORK = Path(__file__).resolve().parent / ".work"
SCHEMA = "bench"
TABLE_DDL = """
CREATE TABLE {schema}.{name} (
  id INT PRIMARY KEY,
  big BIGINT NOT NULL,
  name VARCHAR(64) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  happened DATETIME(6) NOT NULL,
  stamp TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  ratio DOUBLE NOT NULL,
  body TEXT NOT NULL,
  state ENUM('new','paid','shipped','void') NOT NULL,
  flag TINYINT NULL
) ENGINE=InnoDB
"""
# One 1,000-row INSERT ... SELECT from MariaDB's SEQUENCE engine: fast to generate, mixed values.
INSERT_CHUNK = """
INSERT INTO {schema}.{name}
SELECT seq, seq * 7919, CONCAT('name-', seq, '-', MD5(seq)), (seq % 100000) / 100,
       '2024-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL (seq % 1000000) MICROSECOND,
       '2024-06-01 00:00:00' + INTERVAL (seq % 86400) SECOND, seq / 3,
       REPEAT(SUBSTR(MD5(seq), 1, 20), 10), ELT(1 + seq % 4, 'new','paid','shipped','void'),
       IF(seq % 5 = 0, NULL, seq % 128)
FROM seq_{lo}_to_{hi}
"""


@dataclass
class Workload:
    name: str
    file: str
    start: int
    end: int
    rows: int
    transactions: int
    bytes: int


def _binlog_position(cur: Any) -> tuple[str, int]:
    cur.execute("SHOW MASTER STATUS")
    file, pos = cur.fetchone()[:2]
    return str(file), int(pos)


def _record(cur: Any, name: str, rows: int, transactions: int, write: Any) -> Workload:
    cur.execute("FLUSH BINARY LOGS")
    file, start = _binlog_position(cur)
    write()
    end_file, end = _binlog_position(cur)
    assert end_file == file, "workload spilled over a binlog rotation; raise max_binlog_size"
    cur.execute("FLUSH BINARY LOGS")
    return Workload(name, file, start, end, rows, transactions, end - start)


def generate(stack: LocalStack, rows: int) -> list[Workload]:
    conn = stack.root_connection()
    conn.autocommit(True)
    cur = conn.cursor()
    cur.execute("SET GLOBAL max_binlog_size = 1073741824")
    cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    cur.execute(f"CREATE DATABASE {SCHEMA}")
    cur.execute(f"USE {SCHEMA}")  # the SEQUENCE engine tables (seq_1_to_N) need a current database
    for name in ("t_insert", "t_small"):
        cur.execute(TABLE_DDL.format(schema=SCHEMA, name=name))
    chunk = 1000

    def inserts() -> None:
        for lo in range(1, rows + 1, chunk):
            cur.execute("BEGIN")
            cur.execute(
                INSERT_CHUNK.format(schema=SCHEMA, name="t_insert", lo=lo, hi=min(lo + chunk - 1, rows))
            )
            cur.execute("COMMIT")

    def updates() -> None:
        for lo in range(1, rows + 1, chunk):
            cur.execute("BEGIN")
            cur.execute(
                "UPDATE bench.t_insert SET big = big + 1, amount = amount + 0.01,"
                " flag = IF(flag IS NULL, 1, NULL)"
                f" WHERE id BETWEEN {lo} AND {lo + chunk - 1}"
            )
            cur.execute("COMMIT")

    small_rows = max(rows // 10, 1)

    def small() -> None:
        for lo in range(1, small_rows + 1):  # autocommit: one transaction per row
            cur.execute(INSERT_CHUNK.format(schema=SCHEMA, name="t_small", lo=lo, hi=lo))

    started = time.monotonic()
    out = [
        _record(cur, "inserts", rows, -(-rows // chunk), inserts),
        _record(cur, "updates", rows, -(-rows // chunk), updates),
        _record(cur, "small", small_rows, small_rows, small),
    ]
    conn.close()
    print(f"generated {rows:,} rows x 3 workloads in {time.monotonic() - started:.0f}s")
    return out


def load_or_generate(stack: LocalStack, rows: int, regenerate: bool = False) -> list[Workload]:
    manifest = WORK / f"workloads-{rows}.json"
    if manifest.exists() and not regenerate:
        data = json.loads(manifest.read_text())
        binlog_dir = stack.mysql_dir / "binlog"
        if all((binlog_dir / w["file"]).exists() for w in data):
            return [Workload(**w) for w in data]
    workloads = generate(stack, rows)
    manifest.write_text(json.dumps([asdict(w) for w in workloads], indent=2))
    return workloads


__all__ = ["WORK", "Workload", "load_or_generate", "pymysql"]
