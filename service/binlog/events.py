"""Decoded events: records (slotted dataclasses, frozen for type checkers; see record.py).
`Event` is the common base."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import field

from service.binlog.constants import EventType
from service.binlog.fde import StreamFormat
from service.binlog.record import record
from service.binlog.rowchange import Op, RowChange
from service.binlog.schema import TableSchema

__all__ = [
    "AnnotateRowsEvent",
    "AppendBlockEvent",
    "BeginLoadQueryEvent",
    "BinlogCheckpointEvent",
    "DeleteFileEvent",
    "Event",
    "EventHeader",
    "ExecuteLoadQueryEvent",
    "FormatDescriptionEvent",
    "GtidEvent",
    "GtidListEvent",
    "HeartbeatEvent",
    "IncidentEvent",
    "IntvarEvent",
    "OpaqueEvent",
    "PreviousGtidsEvent",
    "QueryEvent",
    "RandEvent",
    "RotateEvent",
    "RowsEvent",
    "RowsQueryEvent",
    "StopEvent",
    "TableMapEvent",
    "TransactionPayloadEvent",
    "UserVarEvent",
    "XaPrepareEvent",
    "XidEvent",
]


@record()
class EventHeader:
    timestamp: int
    type_code: int
    server_id: int
    event_size: int  # whole event, including a checksum trailer
    log_pos: int  # offset just after the event; 0 for artificial/in-payload events
    flags: int
    offset: int  # start offset in the file (log_pos - event_size, or tracked by the decoder)

    @property
    def event_type(self) -> EventType | None:
        try:
            return EventType(self.type_code)
        except ValueError:
            return None

    @property
    def end(self) -> int:
        return self.offset + self.event_size

    @property
    def type_name(self) -> str:
        et = self.event_type
        return et.name if et is not None else f"UNKNOWN_{self.type_code}"


@record()
class Event:
    header: EventHeader


@record()
class FormatDescriptionEvent(Event):
    binlog_version: int
    server_version: str
    create_timestamp: int
    format: StreamFormat


@record()
class QueryEvent(Event):
    thread_id: int
    exec_time: int
    schema: str
    error_code: int
    sql: str  # decoded with the client charset from status vars; invalid bytes replaced
    sql_bytes: bytes  # exact statement text
    status: dict[str, object] = field(default_factory=dict)  # decoded status variables by name
    compressed: bool = False  # MariaDB QUERY_COMPRESSED_EVENT


@record()
class ExecuteLoadQueryEvent(QueryEvent):
    file_id: int = 0
    start_pos: int = 0
    end_pos: int = 0
    dup_handling: int = 0


@record()
class RotateEvent(Event):
    next_file: str
    position: int
    fake: bool  # sent by the server at stream start: timestamp 0 / log_pos 0 / artificial


@record()
class StopEvent(Event):
    pass


@record()
class IntvarEvent(Event):
    kind: int  # 1 LAST_INSERT_ID, 2 INSERT_ID
    value: int


@record()
class RandEvent(Event):
    seed1: int
    seed2: int


@record()
class UserVarEvent(Event):
    name: str
    value: bytes | None  # raw value bytes as MySQL stores them; None for NULL
    value_type: int  # Item_result: 0 STRING, 1 REAL, 2 INT, 4 DECIMAL
    charset: int
    unsigned: bool


@record()
class XidEvent(Event):
    xid: int


@record()
class BeginLoadQueryEvent(Event):
    file_id: int
    data: bytes


@record()
class AppendBlockEvent(Event):
    file_id: int
    data: bytes


@record()
class DeleteFileEvent(Event):
    file_id: int


@record()
class TableMapEvent(Event):
    table: TableSchema


@record()
class RowsEvent(Event):
    table: TableSchema
    changes: list[RowChange]
    op: Op
    flags: int
    version: int  # 0 (pre-GA), 1, 2
    extra_info: bytes = b""  # v2 extra row info as written (decoded into the three fields below)
    skipped: bool = False  # True when DecodeOptions.skip_rows() said so: changes is []
    partial: bool = False  # PARTIAL_UPDATE_ROWS_EVENT
    compressed: bool = False  # MariaDB *_ROWS_COMPRESSED_EVENT
    # From extra_info (MySQL 8: partitioned tables, NDB). partition_id: the partition the rows
    # are in; source_partition_id: an UPDATE's rows' partition before it (None when unchanged
    # or not written); ndb_info: NDB's own block (length, format, data), kept as bytes.
    partition_id: int | None = None
    source_partition_id: int | None = None
    ndb_info: bytes | None = None


@record()
class IncidentEvent(Event):
    incident: int
    message: str


@record()
class HeartbeatEvent(Event):
    log_file: str
    log_pos: int  # HEARTBEAT_V2 carries it; v1 uses header.log_pos


@record()
class RowsQueryEvent(Event):
    query: str


@record()
class AnnotateRowsEvent(Event):
    query: str


@record()
class GtidEvent(Event):
    gtid: str | None  # "uuid:n", "uuid:tag:n", MariaDB "domain-server-seq"; None if anonymous
    flags: int = 0
    sid: str = ""  # MySQL source uuid
    gno: int = 0  # MySQL transaction number
    tag: str | None = None  # MySQL 8.4 GTID tag
    anonymous: bool = False
    last_committed: int = 0
    sequence_number: int = 0
    immediate_commit_ts: int | None = None  # microseconds since the epoch
    original_commit_ts: int | None = None
    transaction_length: int | None = None
    immediate_server_version: int | None = None
    original_server_version: int | None = None
    commit_group_ticket: int | None = None
    domain_id: int | None = None  # MariaDB
    seq_no: int | None = None  # MariaDB
    commit_id: int | None = None  # MariaDB group commit id
    standalone: bool = False  # MariaDB FL_STANDALONE: no COMMIT/XID follows (DDL)
    xid: bytes | None = None  # MariaDB XA: formatID(4) + gtrid + bqual


@record()
class PreviousGtidsEvent(Event):
    gtid_set: str  # "uuid:1-5:7-9,uuid:tag:1-3"


@record()
class GtidListEvent(Event):  # MariaDB
    gtids: tuple[str, ...]
    flags: int = 0


@record()
class BinlogCheckpointEvent(Event):  # MariaDB
    file: str


@record()
class XaPrepareEvent(Event):
    one_phase: bool
    format_id: int
    gtrid: bytes
    bqual: bytes


@record()
class OpaqueEvent(Event):
    """Events carried but not interpreted: IGNORABLE, TRANSACTION_CONTEXT, VIEW_CHANGE,
    unknown types flagged LOG_EVENT_IGNORABLE_F, and LOAD-era events."""

    body: bytes


@record(eq=False)
class TransactionPayloadEvent(Event):
    """TRANSACTION_PAYLOAD_EVENT. `events` lazily decompresses and decodes the inner
    events through the same decoder (table maps, GTID, stats): iterate it fully before
    feeding the next event (the decoder drains it otherwise)."""

    compression: int  # 0 ZSTD, 255 NONE
    payload_size: int
    uncompressed_size: int
    events: Iterator[Event]
