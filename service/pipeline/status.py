"""The replicator's status snapshot: a frozen value read by `/readyz`, `/status` and metrics.

`Replicator.status()` builds a fresh `ReplicatorStatus` on every call; nothing in it is shared
with the running pipeline, so readers may keep it, compare it or serialise it at leisure.

State machine (`State`):

    starting ──> streaming <──> reconnecting
        │            │  ^
        │            v  │
        │         resyncing          (a DDL rewrote a table: re-reading it from the source)
        v            v
      failed       stopped           (failed: a non-retriable error; stopped: clean shutdown)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from service.checkpoint import BinlogPosition, Checkpoint
from service.table_info import ColumnStatus  # re-exported: the status shows each table's columns

__all__ = [
    "ColumnStatus",
    "ErrorStatus",
    "ReplicatorStatus",
    "ResyncStatus",
    "SourceStatus",
    "State",
    "TableStatus",
]


class State(StrEnum):
    STARTING = "starting"  # loading the checkpoint, connecting, taking the writer lease
    STREAMING = "streaming"  # reading the binlog and applying transactions
    RECONNECTING = "reconnecting"  # a retriable source/sink error; backing off, then resuming
    RESYNCING = "resyncing"  # streaming, and re-reading at least one table after a DDL
    STOPPED = "stopped"  # clean shutdown (SIGTERM/SIGINT/stop())
    FAILED = "failed"  # a non-retriable error (decode error, position purged, lease lost, config)


@dataclass(frozen=True, slots=True)
class ResyncStatus:
    started_ts: float  # wall clock (time.time()) when the resync began
    rows_done: int
    rows_total: int | None  # estimate from information_schema; None if unknown
    reason: str  # the DDL that triggered it (truncated)
    rows_reread: int = 0  # rows partial images changed meanwhile, read again by key at the end


@dataclass(frozen=True, slots=True)
class ShapeStatus:
    """A shaped table's `[table]` section as it applies (service/shaping.py)."""

    section: str  # the section's pattern
    fields: tuple[tuple[str, str], ...]  # (source column, field name) of the kept columns
    excluded: tuple[str, ...]  # the columns never stored nor published
    fingerprint: str  # recorded with the rows (`__shapes`)
    key: str | None = None  # its row key template (None: the mirror's own key)
    indexes: tuple[tuple[str, str, str | None], ...] = ()  # (kind, key template, score column)
    ttl: str | None = None  # its expiry: "at {column}" (", timezone {tz}") or "{n} s"
    # read from Redis on request (service/pipeline/entrycounts.py); None: not read
    copies: int | None = None  # rows at the key template
    entries: tuple[int, ...] | None = None  # entries of each index, in `indexes` order
    hidden: tuple[str, ...] = ()  # left out, but kept in the mirror's own rows for the entries


@dataclass(frozen=True, slots=True)
class DocumentRoleStatus:
    """A table's place in a `[document.NAME]` (service/documents.py)."""

    document: str
    field: str | None  # where its rows go in their parent's; None: the root
    # read from Redis on request (entrycounts.py); None: not read
    held: int | None = None  # a child's rows whose parent row is not there (held until it comes)
    refused: int | None = None  # a root's documents over max_document_bytes (not written)


@dataclass(frozen=True, slots=True)
class TableStatus:
    schema: str
    table: str
    table_id: int | None = None  # last TABLE_MAP id seen for it; None before the first rows event
    columns: tuple[ColumnStatus, ...] = ()
    primary_key: tuple[str, ...] = ()  # columns of the key used in Redis (PK or unique NOT NULL)
    key_source: str = "primary"  # primary | unique | none (rows are skipped)
    mirrored: bool = True  # False: matched by the filter but skipped (no usable key)
    inserts: int = 0  # rows applied per op since this process started
    updates: int = 0
    deletes: int = 0
    skipped_rows: int = 0  # rows not mirrored (table without a usable key)
    last_change_ts: int | None = None  # source timestamp of the last applied change
    resync: ResyncStatus | None = None  # set while the table is being re-read
    # after a resync: until the stream applies past this position, updates carry whole rows
    settle_until: BinlogPosition | None = None
    # the background verifier: rows found different by kind, rows repaired, when last verified
    drift: tuple[tuple[str, int], ...] = ()
    repaired: int = 0
    verified_ts: float | None = None
    shape: ShapeStatus | None = None  # None: unshaped (every column, under its own name)
    documents: tuple[DocumentRoleStatus, ...] = ()  # its places in documents


@dataclass(frozen=True, slots=True)
class SourceStatus:
    flavour: str | None = None  # "mariadb" | "mysql"; None until connected once
    version: str | None = None  # server version string
    server_id: int | None = None  # the source's server_id
    connected: bool = False
    url: str | None = None  # redacted (no password)
    server_uuid: str | None = None  # MySQL's @@server_uuid; None on MariaDB
    gtid_domain_id: int | None = None  # MariaDB's @@gtid_domain_id; None on MySQL


@dataclass(frozen=True, slots=True)
class ErrorStatus:
    count: int = 0  # errors since start (retried ones included)
    last: str | None = None  # repr of the last error
    last_ts: float | None = None  # wall clock of the last error
    retriable: bool | None = None
    by_kind: tuple[tuple[str, int], ...] = ()  # (error class name, count) since start, sorted


@dataclass(frozen=True, slots=True)
class ReplicatorStatus:
    state: State
    since: float  # wall clock when `state` was entered
    source: SourceStatus = field(default_factory=SourceStatus)
    received_position: BinlogPosition | None = None  # end of the last transaction read from the source
    received_gtid: str | None = None  # GTID of that transaction
    received_gtid_set: str | None = None  # executed GTID set after it ("" outside GTID mode)
    applied: Checkpoint | None = None  # the checkpoint stored in Redis with the last applied transaction
    last_event_ts: int | None = None  # source timestamp of the newest event seen (heartbeats included)
    lag_seconds: float | None = None  # now - timestamp of the last applied transaction; 0 when caught up
    # binlog bytes from the applied checkpoint to the source's end of binlog, summed over files
    bytes_behind: int | None = None
    # seconds until the source may purge the binlog file the mirror reads next (a lower bound; 0:
    # purged; None: no expiry or unknown): BinlogRoom.retention_left
    retention_seconds_left: float | None = None
    transactions_waiting: int = 0  # read but not yet applied (queue + in flight)
    rows_waiting: int = 0
    transactions_applied: int = 0  # since this process started
    rows_applied: int = 0
    redis_reachable: bool = False
    leader: bool = False  # this instance holds the writer lease
    # waiting for the lease that another instance holds, Redis reachable: it takes over when it expires
    standby: bool = False
    lease_acquisitions: int = 0  # times this instance took the writer lease, since start
    instance_id: str = ""  # this instance's lease token
    errors: ErrorStatus = field(default_factory=ErrorStatus)
    tables: tuple[TableStatus, ...] = ()  # sorted by (schema, table)
    reconnects: int = 0  # source reconnects + session restarts after a retriable error, since start
    decode_errors: int = 0  # DecodeErrors seen since start (each stops the replicator)
    events_by_type: tuple[tuple[str, int], ...] = ()  # (EventType name, events decoded), sorted
    skipped_ignorable_events: int = 0  # unknown events skipped thanks to LOG_EVENT_IGNORABLE_F
    invalid_text_values: int = 0  # text values whose bytes were invalid in their charset
    plain_apply_calls: int = 0  # apply calls sent in the plain form (docs/mirror.md), since start
    plain_apply_redone: int = 0  # of those, calls not applied and sent again as the apply script
    bytes_received: int = 0  # binlog event bytes read from the source (heartbeats included), all sessions
    heartbeats: int = 0  # heartbeats received from the source (sent when it has been idle), all sessions
    last_packet_at: float | None = None  # wall clock of the last event or heartbeat received
    unmatched_tables: tuple[str, ...] = ()  # --tables patterns that match no table of the source
    paused: bool = False  # applying paused by the operator (POST /control/pause, `ctl pause`)
    # resumes that followed another server by GTID (a promoted replica), since start, and the last
    failovers: int = 0
    last_failover_at: float | None = None  # wall clock
    last_failover: str | None = None  # "server_id=1 domain=0 -> server_id=2 domain=0 at 0-1-125"
