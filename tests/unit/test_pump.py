"""`EventPump`, the reader loop's synchronous half, on real binlogs: the same transactions as the
decoder + assembler fed event by event, in the queue or handed back in order, whether a run ends
at every event (a deadline already passed) or at the batch's end, with TRANSACTION_PAYLOAD's inner
events in between; with a full queue, a skip position and held DDL."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from service.binlog import BinlogDecoder, read_binlog_file
from service.binlog.events import TableMapEvent
from service.binlog.schema import TableSchema
from service.checkpoint import BinlogPosition, CheckpointTracker, EventMark, parse_gtid_set
from service.errors import HistoryMismatch
from service.queues import RowQueue
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


def _pump(
    path: Path, queue: RowQueue[object], **kw: object
) -> tuple[EventPump, dict[tuple[str, str], TableSchema]]:
    maps: dict[tuple[str, str], TableSchema] = {}
    pump = EventPump(
        BinlogDecoder(file=path.name),
        TransactionAssembler(CheckpointTracker(BinlogPosition(path.name, 4))),
        maps,
        queue,
        **kw,  # type: ignore[arg-type]
    )
    raws = [bytes(raw) for raw in read_binlog_file(path)]
    assert pump.load(raws) == (sum(map(len, raws)), 0)  # (bytes, heartbeats)
    return pump, maps


def _drain(queue: RowQueue[object]) -> list[Transaction]:
    out = []
    while not queue.empty():
        txn = queue.get_nowait()
        assert isinstance(txn, Transaction)
        out.append(txn)
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("deadline", [-math.inf, math.inf], ids=["every-event", "whole-batch"])
def test_pump_queues_the_assemblers_transactions(path: Path, deadline: float) -> None:
    expected, n_events, expected_maps = _reference(path)
    queue: RowQueue[object] = RowQueue(10**6, 10**9)
    pump, maps = _pump(path, queue)
    seen = runs = delivered = most_per_run = 0
    while pump.pending:
        assert pump.run(deadline) is None  # the queue always has room
        runs += 1
        seen += pump.seen
        delivered += pump.delivered
        most_per_run = max(most_per_run, pump.seen)
    txns = _drain(queue)
    assert _summary(txns) == _summary(expected)
    assert delivered == len(expected)
    assert pump.last == (expected[-1] if expected else None)
    assert seen == n_events
    assert maps.keys() == expected_maps.keys()
    if deadline < 0:  # a past deadline ends a run at each transaction's end and every 8 events
        assert most_per_run <= 8 and runs >= len(expected)
    else:
        assert runs == 1


@pytest.mark.parametrize("path", FILES[:3] + FILES[-2:], ids=lambda p: p.name)
def test_a_full_queue_hands_the_transaction_back(path: Path) -> None:
    """The consumer takes one transaction at a time: each one that finds the queue occupied comes
    back from run() for the caller to deliver (it awaits room), and none is lost or reordered."""
    expected, _, _ = _reference(path)
    queue: RowQueue[object] = RowQueue(1, 10**9)
    pump, _ = _pump(path, queue)
    consumed: list[Transaction] = []
    handed_back = 0
    while pump.pending:
        txn = pump.run(math.inf)
        consumed += _drain(queue)
        if txn is not None:
            handed_back += 1
            queue.put_nowait(txn, len(txn.changes))
    consumed += _drain(queue)
    assert _summary(consumed) == _summary(expected)
    assert handed_back == max(0, len(expected) - 1)  # all but the first found the queue full


def test_transactions_up_to_skip_until_are_dropped() -> None:
    path = FILES[0]
    expected, _, _ = _reference(path)
    assert len(expected) > 3
    queue: RowQueue[object] = RowQueue(10**6, 10**9)
    pump, _ = _pump(path, queue, skip_until=expected[2].end.position)
    while pump.pending:
        assert pump.run(math.inf) is None
    assert _summary(_drain(queue)) == _summary(expected[3:])
    assert pump.skip_until is None


def test_held_ddl_comes_back_in_order() -> None:
    path = next(p for p in FILES if any(t.ddl for t in _reference(p)[0]))
    expected, _, _ = _reference(path)
    queue: RowQueue[object] = RowQueue(10**6, 10**9)
    pump, _ = _pump(path, queue, hold_ddl=True)
    got: list[Transaction] = []
    while pump.pending:
        txn = pump.run(math.inf)
        got += _drain(queue)
        if txn is not None:
            assert txn.ddl
            got.append(txn)
    assert _summary(got) == _summary(expected)


def _from(path: Path, offset: int) -> list[bytes]:
    """What a dump from `offset` sends, less the fake ROTATE: the file's FORMAT_DESCRIPTION, then
    the events from `offset` on (each raw event's offset is its log_pos less its size)."""
    raws = [bytes(raw) for raw in read_binlog_file(path)]
    at = [int.from_bytes(r[13:17], "little") - int.from_bytes(r[9:13], "little") for r in raws]
    return [raws[0]] + [r for r, o in zip(raws, at, strict=True) if o >= offset]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_history_check_passes_on_the_same_event_and_stops_on_another(path: Path) -> None:
    """Each transaction's end carries the mark of the event ending at it; a pump started at that
    event with `expect` delivers exactly the transactions after it, and stops with
    HistoryMismatch when the mark differs."""
    expected, _, _ = _reference(path)
    marked = [i for i, t in enumerate(expected) if t.end.mark is not None]
    assert marked, "every file has committed transactions"
    i = marked[len(marked) // 2]
    end = expected[i].end
    mark = end.mark
    assert mark is not None and mark.offset < end.position.pos

    def pump(expect: EventMark) -> tuple[EventPump, RowQueue[object]]:
        queue: RowQueue[object] = RowQueue(10**6, 10**9)
        gtids = parse_gtid_set(end.gtid_set) if end.gtid_set else None  # as the source resumes
        tracker = CheckpointTracker(BinlogPosition(path.name, mark.offset), gtids)
        p = EventPump(
            BinlogDecoder(file=path.name),
            TransactionAssembler(tracker),
            {},
            queue,
            skip_until=end.position,
            expect=expect,
        )
        p.load(_from(path, mark.offset))
        return p, queue

    good, queue = pump(mark)
    while good.pending:
        good.run(math.inf)
    assert good.expect is None
    # (a fixture renamed from its server's name may rotate to a file that orders before it: the
    # skip drops what ends at or before the checkpoint, as on a real resume)
    after = [t for t in expected[i + 1 :] if not t.end.position <= end.position]
    assert _summary(_drain(queue)) == _summary(after)

    other = EventMark(mark.offset, mark.type_code, mark.server_id, mark.timestamp + 1, mark.detail)
    bad, queue = pump(other)
    with pytest.raises(HistoryMismatch, match=f"the event at offset {mark.offset} is not the one applied"):
        while bad.pending:
            bad.run(math.inf)
    assert queue.empty()
