"""Build row changes, transactions and status snapshots in Python for the API tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from service.binlog.rowchange import EventSpan, Op, RowChange
from service.checkpoint import BinlogPosition, Checkpoint
from service.pipeline.status import ReplicatorStatus, SourceStatus, State, TableStatus
from service.transactions import Transaction

TOKEN = "s3cret-token"
_pos = 4


def change(op: Op | str = Op.INSERT, schema: str = "shop", table: str = "orders", **values: Any) -> RowChange:
    global _pos
    op = Op(op)
    row = values or {"id": 1}
    _pos += 100
    return RowChange(
        op=op,
        schema=schema,
        table=table,
        before=None if op is Op.INSERT else dict(row),
        after=None if op is Op.DELETE else dict(row),
        position=EventSpan("bin.000001", _pos, _pos + 100),
        ts=int(time.time()),
        server_id=1,
    )


def txn(*changes: RowChange, ts: int | None = None) -> Transaction:
    end = changes[-1].position.end if changes else _pos
    return Transaction(
        changes=tuple(changes),
        ddl=(),
        gtid=None,
        ts=int(time.time()) if ts is None else ts,
        end=Checkpoint(BinlogPosition("bin.000001", end)),
    )


def streaming_status(**overrides: Any) -> ReplicatorStatus:
    base = ReplicatorStatus(
        state=State.STREAMING,
        since=time.time(),
        source=SourceStatus(
            flavour="mariadb",
            version="11.4.2-MariaDB",
            server_id=1,
            connected=True,
            url="mysql://mirror:***@h:3306",
            gtid_domain_id=0,
        ),
        received_position=BinlogPosition("bin.000001", 1234),
        applied=Checkpoint(BinlogPosition("bin.000001", 1234), gtid_set="0-1-7", ts=int(time.time())),
        last_event_ts=int(time.time()),
        lag_seconds=0.0,
        bytes_behind=0,
        redis_reachable=True,
        leader=True,
        tables=(TableStatus(schema="shop", table="orders"), TableStatus(schema="a", table="b")),
    )
    return replace(base, **overrides)


class StatusDouble:
    """A typed stand-in for the Replicator: a settable snapshot plus the applied-hook registry."""

    def __init__(self, snapshot: ReplicatorStatus | None = None) -> None:
        self.snapshot = snapshot or streaming_status()
        self.on_applied: list[Callable[[Transaction, int], None]] = []
        self.next_seq = 1

    def status(self) -> ReplicatorStatus:
        return self.snapshot

    def apply(self, t: Transaction) -> int:
        """What the Replicator does after a commit: call every hook with the first seq."""
        first = self.next_seq
        self.next_seq += len(t.changes)
        for hook in self.on_applied:
            hook(t, first)
        return first
