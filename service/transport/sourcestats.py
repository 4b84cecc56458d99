"""The binlog reader's counters (`BinlogSource.stats`), read live by the replicator's status."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from service.binlog.constants import EventType
from service.binlog.schema import TableSchema
from service.binlog.stats import DecoderStats
from service.checkpoint import BinlogPosition, Checkpoint

__all__ = ["SourceStats", "type_names"]


@dataclass(slots=True)
class SourceStats:
    """Counters of the reader; a plain mutable record, read by the API (copy it to keep it)."""

    events: int = 0  # events decoded (heartbeats excluded)
    bytes: int = 0  # event bytes received (heartbeats included)
    heartbeats: int = 0
    transactions: int = 0  # transactions put in the queue
    reconnects: int = 0
    connected: bool = False
    last_event_ts: int = 0  # source timestamp of the last non-heartbeat event (seconds)
    last_event_at: float = 0.0  # time.time() when the last packet (event or heartbeat) arrived
    last_error: str = ""
    read_position: BinlogPosition | None = None  # after the last event read (maybe mid-transaction)
    delivered: Checkpoint | None = None  # end of the last transaction put in the queue
    # decoder counters, summed over every connection's decoder (see BinlogSource.decoder_totals)
    events_by_type: Counter[str] = field(default_factory=Counter)  # EventType name -> events
    skipped_ignorable: int = 0  # unknown events skipped thanks to LOG_EVENT_IGNORABLE_F
    invalid_text_values: int = 0  # text values whose bytes were invalid in their charset
    # the latest TABLE_MAP read per (schema, table): its table id, column metadata and names
    table_maps: dict[tuple[str, str], TableSchema] = field(default_factory=dict)
    # where the decoder takes column names from: "binlog" (binlog_row_metadata=FULL, as read at
    # start) or "information_schema" (any other value: looked up by `ColumnNames`)
    column_names: str = "binlog"
    # resumes that followed another server by GTID (docs/operations.md, "Source failover")
    failovers: int = 0
    last_failover_at: float = 0.0  # time.time() of the last one
    last_failover: str = ""  # "server_id=1 domain=0 -> server_id=2 domain=0 at 0-1-125"

    def fold(self, dstats: DecoderStats) -> None:
        """Add a finished connection's decoder counters to the totals."""
        self.events_by_type.update(type_names(dstats))
        self.skipped_ignorable += dstats.skipped_ignorable
        self.invalid_text_values += dstats.invalid_text_values

    def failed_over(self, note: str) -> None:
        self.failovers, self.last_failover_at, self.last_failover = self.failovers + 1, time.time(), note


def type_names(dstats: DecoderStats) -> Counter[str]:
    out: Counter[str] = Counter()
    for code, n in dstats.events_by_type.items():
        try:
            out[EventType(code).name] += n
        except ValueError:
            out[f"UNKNOWN_{code}"] += n
    return out
