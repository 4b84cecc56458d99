"""The replication stream against a real mariadbd: start points, rotations, resume, CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import orjson
import pytest
from stream_helpers import (
    changes_of,
    collect,
    expected_changes,
    make_tables,
    run_sql,
    settings_for,
    unique_db,
    workload,
)

from service.checkpoint import BinlogPosition, Checkpoint, MariadbGtidPos, parse_gtid_set
from service.devtools.stack import LocalStack
from service.transactions import TableFilter
from service.transport.source import BinlogSource

pytestmark = pytest.mark.integration


def only(db: str) -> TableFilter:
    return TableFilter((f"{db}.*",))


async def test_from_start_across_rotations_then_resume_mid_run(stack: LocalStack) -> None:
    db = unique_db("st_rot")
    run_sql(stack, make_tables(db) + workload(db, 0, 12, rotate_every=4))
    expected = expected_changes(db, 0, 12)

    source = BinlogSource(settings_for(stack), "start", table_filter=only(db))
    async with source:
        txns = await collect(source, db, len(expected))
    assert changes_of(txns, db) == expected
    ends = [t.end.position for t in txns]
    assert ends == sorted(ends) and len({p.file for p in ends}) >= 3  # several files
    assert all(t.gtid for t in txns if t.changes)
    ddl = [d for t in txns for d in t.ddl]
    assert [(d.kind, d.tables) for d in ddl][-2:] == [
        ("create", ((db, "items"),)),
        ("create", ((db, "notes"),)),
    ]

    # resume from a checkpoint taken mid-run: exactly the rest, nothing twice
    mid = next(i for i, t in enumerate(txns) if sum(len(x.changes) for x in txns[: i + 1]) >= 10)
    checkpoint = txns[mid].end
    rest = changes_of(txns[mid + 1 :], db)
    async with BinlogSource(settings_for(stack), checkpoint, table_filter=only(db)) as resumed:
        again = await collect(resumed, db, len(rest))
    assert changes_of(again, db) == rest
    assert again[0].end.position > checkpoint.position


async def test_from_now_file_pos_and_gtid(stack: LocalStack) -> None:
    db = unique_db("st_now")
    run_sql(stack, make_tables(db) + workload(db, 0, 3))
    source = BinlogSource(settings_for(stack), "now", table_filter=only(db))
    async with source:
        now = source.start_checkpoint
        assert now is not None and now.gtid_set
        run_sql(stack, workload(db, 3, 6))
        txns = await collect(source, db, len(expected_changes(db, 3, 6)))
    assert changes_of(txns, db) == expected_changes(db, 3, 6)
    # the GTID set grows with every transaction
    last = parse_gtid_set(txns[-1].end.gtid_set)
    assert isinstance(last, MariadbGtidPos) and parse_gtid_set(now.gtid_set) <= last

    # FILE:POS pointing *inside* the third transaction: it comes out whole, then the rest
    third = txns[2]
    inside = BinlogPosition(third.end.position.file, third.end.position.pos - 40)
    async with BinlogSource(settings_for(stack), inside, table_filter=only(db)) as src:
        from_pos = await collect(src, db, len(changes_of(txns[2:], db)))
    assert changes_of(from_pos, db) == changes_of(txns[2:], db)

    # a GTID set: everything after it
    gtid_start = parse_gtid_set(txns[1].end.gtid_set)
    async with BinlogSource(settings_for(stack), gtid_start, table_filter=only(db)) as src:
        from_gtid = await collect(src, db, len(changes_of(txns[2:], db)))
    assert changes_of(from_gtid, db) == changes_of(txns[2:], db)
    assert [t.gtid for t in from_gtid if t.changes] == [t.gtid for t in txns[2:] if t.changes]


async def test_rollback_and_filter(stack: LocalStack) -> None:
    db = unique_db("st_rb")
    run_sql(stack, make_tables(db))
    source = BinlogSource(settings_for(stack), "now", table_filter=TableFilter((f"{db}.items",)))
    async with source:
        run_sql(
            stack,
            [
                "BEGIN",
                f"INSERT INTO {db}.items VALUES (1, 'gone', 1)",
                "ROLLBACK",
                f"INSERT INTO {db}.notes VALUES (1, 'filtered out')",
                f"INSERT INTO {db}.items VALUES (2, 'kept', 2)",
            ],
        )
        txns = await collect(source, db, 1)
    assert changes_of(txns, db) == [("insert", "items", None, {"id": 2, "name": "kept", "qty": 2})]


async def test_checkpoint_in_purged_file_is_position_lost(stack: LocalStack) -> None:
    from service.errors import PositionLost

    gone = Checkpoint(BinlogPosition("mysql-bin.999999", 4))
    source = BinlogSource(settings_for(stack), gone)
    async with source:
        with pytest.raises(PositionLost, match="source cannot serve this position"):
            await asyncio.wait_for(anext(aiter(source)), 10)


def test_cli_until_caught_up(stack: LocalStack) -> None:
    db = unique_db("st_cli")
    run_sql(stack, make_tables(db) + workload(db, 0, 3))
    info = stack.load()
    assert info is not None
    result = subprocess.run(
        [sys.executable, "-m", "service", "stream", "--mysql", info.mysql_url, "--from", "start"]
        + ["--tables", f"{db}.*", "--until-caught-up", "--server-id", "6111"],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [(x["op"], x["table"]) for x in lines] == [(op, t) for op, t, _, _ in expected_changes(db, 0, 3)]
    assert lines[0]["after"] == {"id": 0, "name": "n0", "qty": 0}


def test_cli_bad_url_is_one_red_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service", "stream", "--mysql", "http://nope"], capture_output=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.decode().count("\n") == 1 and "error:" in result.stderr.decode()
