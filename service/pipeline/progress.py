"""`Progress`: the replicator's live counters and state, written by its parts, read by `status()`.

One plain mutable record shared by the lease keeper, the applier, the resyncs and the status
assembly (service/pipeline/report.py); nothing in it awaits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from service.checkpoint import Checkpoint
from service.errors import DecodeError, ReplicatorError, SinkError
from service.pipeline.failures import FailureLog
from service.pipeline.status import ErrorStatus, ResyncStatus, State
from service.transactions import Transaction
from service.transport.connection import BinlogRoom

__all__ = ["Progress", "TableCounters"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TableCounters:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    last_change_ts: int | None = None
    resync: ResyncStatus | None = None
    # the background verifier (service/pipeline/verifier.py): rows found different, by kind
    # (changed | missing | extra), rows it repaired, when it last finished the table
    drift: dict[str, int] = field(default_factory=dict)
    repaired: int = 0
    verified_ts: float | None = None


@dataclass(slots=True)
class Progress:
    state: State = State.STARTING
    since: float = field(default_factory=time.time)  # when `state` was entered
    leader: bool = False  # this instance holds the writer lease
    standby: bool = False  # another instance holds it (seen in Redis); cleared when taken
    lease_acquisitions: int = 0
    redis_ok: bool = False
    applied: Checkpoint | None = None  # the checkpoint stored with the last applied transaction
    applied_ts: int | None = None  # its source timestamp
    txns_applied: int = 0
    rows_applied: int = 0
    in_flight: tuple[int, int] = (0, 0)  # (transactions, rows) sent to Redis, replies not read
    errors: ErrorStatus = field(default_factory=ErrorStatus)
    decode_errors: int = 0
    restarts: int = 0  # sessions restarted after a retriable error
    tables: dict[tuple[str, str], TableCounters] = field(default_factory=dict)
    mirrored: set[tuple[str, str]] = field(default_factory=set)  # tables registered in the mirror
    binlog_room: BinlogRoom | None = None  # from the applied checkpoint (the stats loop)
    received: Transaction | None = None  # the last one an earlier session's source read

    def set_state(self, state: State) -> None:
        state = FailureLog.held(self.state, state)
        if state != self.state:
            log.log(FailureLog.level(self.state, state), "state: %s -> %s", self.state, state)
            self.state, self.since = state, time.time()

    def error(self, exc: BaseException) -> None:
        retriable = isinstance(exc, ReplicatorError) and exc.retriable
        kinds = dict(self.errors.by_kind)
        kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
        self.errors = ErrorStatus(
            self.errors.count + 1, repr(exc), time.time(), retriable, tuple(sorted(kinds.items()))
        )
        if isinstance(exc, SinkError):
            self.redis_ok = False
        if isinstance(exc, DecodeError):
            self.decode_errors += 1
