"""Pure binlog decoding core: bytes in, typed events out (no asyncio, no network).

Entry points: `BinlogDecoder(options).feed(raw)` / `.decode_events(raw)`,
`read_binlog_file(path)`, and `canonical.row_change_to_dict(change)`.
"""

from __future__ import annotations

from service.binlog import canonical
from service.binlog.constants import ChecksumAlg, ColumnType, EventType
from service.binlog.decoder import BinlogDecoder, DecodeOptions
from service.binlog.events import (
    AnnotateRowsEvent,
    AppendBlockEvent,
    BeginLoadQueryEvent,
    BinlogCheckpointEvent,
    DeleteFileEvent,
    Event,
    EventHeader,
    ExecuteLoadQueryEvent,
    FormatDescriptionEvent,
    GtidEvent,
    GtidListEvent,
    HeartbeatEvent,
    IncidentEvent,
    IntvarEvent,
    OpaqueEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RandEvent,
    RotateEvent,
    RowsEvent,
    RowsQueryEvent,
    StopEvent,
    TableMapEvent,
    TransactionPayloadEvent,
    UserVarEvent,
    XaPrepareEvent,
    XidEvent,
)
from service.binlog.fde import StreamFormat
from service.binlog.files import RawEvent, read_binlog_file, scan_binlog_file
from service.binlog.jsonb import JSON_NULL, JsonDiff, JsonDiffOp, JsonNull, JsonOpaque, JsonPartial
from service.binlog.rowchange import EventSpan, Op, Row, RowChange
from service.binlog.schema import Column, TableSchema
from service.binlog.stats import DecoderStats
from service.binlog.values import Geometry

__all__ = [
    "JSON_NULL",
    "AnnotateRowsEvent",
    "AppendBlockEvent",
    "BeginLoadQueryEvent",
    "BinlogCheckpointEvent",
    "BinlogDecoder",
    "ChecksumAlg",
    "Column",
    "ColumnType",
    "DecodeOptions",
    "DecoderStats",
    "DeleteFileEvent",
    "Event",
    "EventHeader",
    "EventSpan",
    "EventType",
    "ExecuteLoadQueryEvent",
    "FormatDescriptionEvent",
    "Geometry",
    "GtidEvent",
    "GtidListEvent",
    "HeartbeatEvent",
    "IncidentEvent",
    "IntvarEvent",
    "JsonDiff",
    "JsonDiffOp",
    "JsonNull",
    "JsonOpaque",
    "JsonPartial",
    "Op",
    "OpaqueEvent",
    "PreviousGtidsEvent",
    "QueryEvent",
    "RandEvent",
    "RawEvent",
    "RotateEvent",
    "Row",
    "RowChange",
    "RowsEvent",
    "RowsQueryEvent",
    "StopEvent",
    "StreamFormat",
    "TableMapEvent",
    "TableSchema",
    "TransactionPayloadEvent",
    "UserVarEvent",
    "XaPrepareEvent",
    "XidEvent",
    "canonical",
    "read_binlog_file",
    "scan_binlog_file",
]
