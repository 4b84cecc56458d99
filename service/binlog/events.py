"""Decoded events: slotted dataclasses, immutable by convention. `Event` is the common base.

Compiled with the rest of the core (python -m service.devtools.build_decoder), these are native
classes. The ones the decoder builds for every event or row take an explicit `__init__`
(`init=False`): mypyc compiles it to a direct C constructor (EventHeader 0.31 -> 0.09 µs),
while a dataclass-generated one stays interpreted and costs more than before. Not frozen:
mypyc only recognises a plain `dataclass`; nothing assigns to them (they are built once and
replaced with replace()).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from service.binlog.constants import EventType
from service.binlog.fde import StreamFormat
from service.binlog.rowchange import Op, RowChange, RowColumns
from service.binlog.schema import TableSchema

__all__ = [
    "AnnotateRowsEvent",
    "AppendBlockEvent",
    "BeginLoadQueryEvent",
    "BinlogCheckpointEvent",
    "ColumnarRowsEvent",
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


@dataclass(slots=True, unsafe_hash=True, init=False)
class EventHeader:
    timestamp: int
    type_code: int
    server_id: int
    event_size: int  # whole event, including a checksum trailer
    log_pos: int  # offset just after the event; 0 for artificial/in-payload events
    flags: int
    offset: int  # start offset in the file (log_pos - event_size, or tracked by the decoder)

    def __init__(
        self,
        timestamp: int,
        type_code: int,
        server_id: int,
        event_size: int,
        log_pos: int,
        flags: int,
        offset: int,
    ) -> None:
        self.timestamp, self.type_code, self.server_id = timestamp, type_code, server_id
        self.event_size, self.log_pos, self.flags, self.offset = event_size, log_pos, flags, offset

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


@dataclass(slots=True, unsafe_hash=True)
class Event:
    header: EventHeader


@dataclass(slots=True, unsafe_hash=True)
class FormatDescriptionEvent(Event):
    binlog_version: int
    server_version: str
    create_timestamp: int
    format: StreamFormat


@dataclass(slots=True, unsafe_hash=True, init=False)
class QueryEvent(Event):
    thread_id: int
    exec_time: int
    schema: str
    error_code: int
    sql: str  # decoded with the client charset from status vars; invalid bytes replaced
    sql_bytes: bytes  # exact statement text
    status: dict[str, object] = field(default_factory=dict)  # decoded status variables by name
    compressed: bool = False  # MariaDB QUERY_COMPRESSED_EVENT

    def __init__(
        self, header: EventHeader, thread_id: int, exec_time: int, schema: str, error_code: int, sql: str,
        sql_bytes: bytes, status: dict[str, object] | None = None, compressed: bool = False,
    ) -> None:  # fmt: skip
        self.header, self.thread_id, self.exec_time, self.schema = header, thread_id, exec_time, schema
        self.error_code, self.sql, self.sql_bytes = error_code, sql, sql_bytes
        self.status = {} if status is None else status
        self.compressed = compressed


@dataclass(slots=True, unsafe_hash=True, init=False)
class ExecuteLoadQueryEvent(QueryEvent):
    file_id: int = 0
    start_pos: int = 0
    end_pos: int = 0
    dup_handling: int = 0

    def __init__(
        self, header: EventHeader, thread_id: int, exec_time: int, schema: str, error_code: int, sql: str,
        sql_bytes: bytes, status: dict[str, object] | None = None, compressed: bool = False,
        file_id: int = 0, start_pos: int = 0, end_pos: int = 0, dup_handling: int = 0,
    ) -> None:  # fmt: skip
        # not super(): slots=True makes a new class, which the zero-argument form does not know
        QueryEvent.__init__(
            self, header, thread_id, exec_time, schema, error_code, sql, sql_bytes, status, compressed
        )
        self.file_id, self.start_pos = file_id, start_pos
        self.end_pos, self.dup_handling = end_pos, dup_handling


@dataclass(slots=True, unsafe_hash=True)
class RotateEvent(Event):
    next_file: str
    position: int
    fake: bool  # sent by the server at stream start: timestamp 0 / log_pos 0 / artificial


@dataclass(slots=True, unsafe_hash=True)
class StopEvent(Event):
    pass


@dataclass(slots=True, unsafe_hash=True)
class IntvarEvent(Event):
    kind: int  # 1 LAST_INSERT_ID, 2 INSERT_ID
    value: int


@dataclass(slots=True, unsafe_hash=True)
class RandEvent(Event):
    seed1: int
    seed2: int


@dataclass(slots=True, unsafe_hash=True)
class UserVarEvent(Event):
    name: str
    value: bytes | None  # raw value bytes as MySQL stores them; None for NULL
    value_type: int  # Item_result: 0 STRING, 1 REAL, 2 INT, 4 DECIMAL
    charset: int
    unsigned: bool


@dataclass(slots=True, unsafe_hash=True, init=False)
class XidEvent(Event):
    xid: int

    def __init__(self, header: EventHeader, xid: int) -> None:
        self.header, self.xid = header, xid


@dataclass(slots=True, unsafe_hash=True)
class BeginLoadQueryEvent(Event):
    file_id: int
    data: bytes


@dataclass(slots=True, unsafe_hash=True)
class AppendBlockEvent(Event):
    file_id: int
    data: bytes


@dataclass(slots=True, unsafe_hash=True)
class DeleteFileEvent(Event):
    file_id: int


@dataclass(slots=True, unsafe_hash=True, init=False)
class TableMapEvent(Event):
    table: TableSchema

    def __init__(self, header: EventHeader, table: TableSchema) -> None:
        self.header, self.table = header, table


@dataclass(slots=True, unsafe_hash=True, init=False)
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

    def __init__(
        self, header: EventHeader, table: TableSchema, changes: list[RowChange], op: Op, flags: int,
        version: int, extra_info: bytes = b"", skipped: bool = False, partial: bool = False,
        compressed: bool = False, partition_id: int | None = None, source_partition_id: int | None = None,
        ndb_info: bytes | None = None,
    ) -> None:  # fmt: skip
        self.header, self.table, self.changes, self.op = header, table, changes, op
        self.flags, self.version, self.extra_info, self.skipped = flags, version, extra_info, skipped
        self.partial, self.compressed = partial, compressed
        self.partition_id, self.source_partition_id, self.ndb_info = (
            partition_id,
            source_partition_id,
            ndb_info,
        )


@dataclass(slots=True, unsafe_hash=True, init=False)
class ColumnarRowsEvent(RowsEvent):
    """A RowsEvent of DecodeOptions.columnar: its rows column by column (`changes` is []). A
    subclass, so that the other RowsEvents (and `decode --events`, which prints every field)
    stay as they were."""

    columns: RowColumns | None = None

    def __init__(
        self, header: EventHeader, table: TableSchema, columns: RowColumns, op: Op, flags: int,
        version: int, extra_info: bytes = b"", skipped: bool = False, partial: bool = False,
        compressed: bool = False, partition_id: int | None = None, source_partition_id: int | None = None,
        ndb_info: bytes | None = None,
    ) -> None:  # fmt: skip
        RowsEvent.__init__(
            self, header, table, [], op, flags, version, extra_info, skipped, partial, compressed,
            partition_id, source_partition_id, ndb_info,
        )  # fmt: skip
        self.columns = columns


@dataclass(slots=True, unsafe_hash=True)
class IncidentEvent(Event):
    incident: int
    message: str


@dataclass(slots=True, unsafe_hash=True, init=False)
class HeartbeatEvent(Event):
    log_file: str
    log_pos: int  # HEARTBEAT_V2 carries it; v1 uses header.log_pos

    def __init__(self, header: EventHeader, log_file: str, log_pos: int) -> None:
        self.header, self.log_file, self.log_pos = header, log_file, log_pos


@dataclass(slots=True, unsafe_hash=True, init=False)
class RowsQueryEvent(Event):
    query: str

    def __init__(self, header: EventHeader, query: str) -> None:
        self.header, self.query = header, query


@dataclass(slots=True, unsafe_hash=True, init=False)
class AnnotateRowsEvent(Event):
    query: str

    def __init__(self, header: EventHeader, query: str) -> None:
        self.header, self.query = header, query


@dataclass(slots=True, unsafe_hash=True, init=False)
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

    def __init__(
        self, header: EventHeader, gtid: str | None, flags: int = 0, sid: str = "", gno: int = 0,
        tag: str | None = None, anonymous: bool = False, last_committed: int = 0, sequence_number: int = 0,
        immediate_commit_ts: int | None = None, original_commit_ts: int | None = None,
        transaction_length: int | None = None, immediate_server_version: int | None = None,
        original_server_version: int | None = None, commit_group_ticket: int | None = None,
        domain_id: int | None = None, seq_no: int | None = None, commit_id: int | None = None,
        standalone: bool = False, xid: bytes | None = None,
    ) -> None:  # fmt: skip
        self.header, self.gtid, self.flags, self.sid, self.gno, self.tag = header, gtid, flags, sid, gno, tag
        self.anonymous, self.last_committed, self.sequence_number = anonymous, last_committed, sequence_number
        self.immediate_commit_ts, self.original_commit_ts = immediate_commit_ts, original_commit_ts
        self.transaction_length, self.immediate_server_version = transaction_length, immediate_server_version
        self.original_server_version, self.commit_group_ticket = original_server_version, commit_group_ticket
        self.domain_id, self.seq_no, self.commit_id = domain_id, seq_no, commit_id
        self.standalone, self.xid = standalone, xid


@dataclass(slots=True, unsafe_hash=True)
class PreviousGtidsEvent(Event):
    gtid_set: str  # "uuid:1-5:7-9,uuid:tag:1-3"


@dataclass(slots=True, unsafe_hash=True)
class GtidListEvent(Event):  # MariaDB
    gtids: tuple[str, ...]
    flags: int = 0


@dataclass(slots=True, unsafe_hash=True)
class BinlogCheckpointEvent(Event):  # MariaDB
    file: str


@dataclass(slots=True, unsafe_hash=True)
class XaPrepareEvent(Event):
    one_phase: bool
    format_id: int
    gtrid: bytes
    bqual: bytes


@dataclass(slots=True, unsafe_hash=True)
class OpaqueEvent(Event):
    """Events carried but not interpreted: IGNORABLE, TRANSACTION_CONTEXT, VIEW_CHANGE,
    unknown types flagged LOG_EVENT_IGNORABLE_F, and LOAD-era events."""

    body: bytes


@dataclass(slots=True, eq=False, init=False)
class TransactionPayloadEvent(Event):
    """TRANSACTION_PAYLOAD_EVENT. `events` lazily decompresses and decodes the inner
    events through the same decoder (table maps, GTID, stats): iterate it fully before
    feeding the next event (the decoder drains it otherwise)."""

    compression: int  # 0 ZSTD, 255 NONE
    payload_size: int
    uncompressed_size: int
    events: Iterator[Event]

    def __init__(
        self, header: EventHeader, compression: int, payload_size: int, uncompressed_size: int,
        events: Iterator[Event],
    ) -> None:  # fmt: skip
        self.header, self.compression, self.payload_size = header, compression, payload_size
        self.uncompressed_size, self.events = uncompressed_size, events
