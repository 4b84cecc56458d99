"""`EventPump`, the reader loop's synchronous half, on real binlogs: the same transactions as the
decoder + assembler fed event by event, whether a run ends at every event (a deadline already
passed) or at transaction ends only, with TRANSACTION_PAYLOAD's inner events in between."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from service.binlog import BinlogDecoder, read_binlog_file
from service.binlog.events import TableMapEvent
from service.binlog.schema import TableSchema
from service.checkpoint import BinlogPosition, CheckpointTracker
from service.transactions import Transaction, TransactionAssembler
from service.transport.pump import EventPump

BINLOGS = Path(__file__).parents[1] / "fixtures" / "binlog"
FILES = sorted((BINLOGS / "mariadb-10.11").glob("0*.0*")) + [
    BINLOGS / "vectors/mysql-8/transaction_compression.000001",  # GTID, TRANSACTION_PAYLOAD(...)
    BINLOGS / "vectors/mysql-8/json.binlog.000001",
]


def _summary(txns: list[Transaction]) -> list[tuple[object, ...]]:
    return [
        (
            t.end,
            t.gtid,
            t.ts,
            t.ddl,
            t.partial,
            [(c.op, c.schema, c.table, c.before, c.after, c.position, c.gtid) for c in t.changes],
        )
        for t in txns
    ]


def _reference(path: Path) -> tuple[list[Transaction], int, dict[tuple[str, str], TableSchema]]:
    """Transactions, events and last table maps by feeding the assembler event by event."""
    decoder = BinlogDecoder(file=path.name)
    asm = TransactionAssembler(CheckpointTracker(BinlogPosition(path.name, 4)))
    txns, n, maps = [], 0, {}
    for raw in read_binlog_file(path):
        for event in decoder.decode_events(raw):
            n += 1
            if isinstance(event, TableMapEvent):
                maps[event.table.schema, event.table.table] = event.table
            if (txn := asm.feed(event)) is not None:
                txns.append(txn)
    return txns, n, maps


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("deadline", [-math.inf, math.inf], ids=["every-event", "whole-batch"])
def test_pump_gives_the_assemblers_transactions(path: Path, deadline: float) -> None:
    expected, n_events, expected_maps = _reference(path)
    maps: dict[tuple[str, str], TableSchema] = {}
    pump = EventPump(
        BinlogDecoder(file=path.name),
        TransactionAssembler(CheckpointTracker(BinlogPosition(path.name, 4))),
        maps,
    )
    raws = [bytes(raw) for raw in read_binlog_file(path)]
    assert pump.load(raws) == (sum(map(len, raws)), 0)  # (bytes, heartbeats)
    txns, seen, runs = [], 0, 0
    while pump.pending:
        txn = pump.run(deadline)
        runs += 1
        seen += pump.seen
        if txn is not None:
            txns.append(txn)
    assert _summary(txns) == _summary(expected)
    assert seen == n_events
    assert maps.keys() == expected_maps.keys()
    if deadline < 0:
        assert runs == n_events  # one event per run: a payload's inner events too
    else:
        assert len(txns) <= runs <= len(txns) + 1  # a run per transaction (+ the batch's tail)
