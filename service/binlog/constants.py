"""Binlog constants: event types, column types, flags (libbinlogevents / MariaDB log_event.h)."""

from __future__ import annotations

from enum import IntEnum, IntFlag

__all__ = [
    "BINLOG_MAGIC",
    "HEADER_LEN",
    "LOG_EVENT_ARTIFICIAL_F",
    "LOG_EVENT_IGNORABLE_F",
    "STMT_END_F",
    "ChecksumAlg",
    "ColumnType",
    "EventType",
    "RowsFlag",
]

BINLOG_MAGIC = b"\xfebin"
HEADER_LEN = 19  # v4 common header

# Event header flags (LOG_EVENT_*_F)
LOG_EVENT_ARTIFICIAL_F = 0x20
LOG_EVENT_IGNORABLE_F = 0x80

# Rows event flags
STMT_END_F = 0x0001


class RowsFlag(IntFlag):
    STMT_END = 0x0001
    NO_FOREIGN_KEY_CHECKS = 0x0002
    RELAXED_UNIQUE_CHECKS = 0x0004
    COMPLETE_ROWS = 0x0008


class ChecksumAlg(IntEnum):
    OFF = 0
    CRC32 = 1
    UNDEF = 255  # server predates checksums (< 5.6.1 / MariaDB < 5.3)


class EventType(IntEnum):
    UNKNOWN = 0
    START_V3 = 1
    QUERY = 2
    STOP = 3
    ROTATE = 4
    INTVAR = 5
    LOAD = 6
    SLAVE = 7
    CREATE_FILE = 8
    APPEND_BLOCK = 9
    EXEC_LOAD = 10
    DELETE_FILE = 11
    NEW_LOAD = 12
    RAND = 13
    USER_VAR = 14
    FORMAT_DESCRIPTION = 15
    XID = 16
    BEGIN_LOAD_QUERY = 17
    EXECUTE_LOAD_QUERY = 18
    TABLE_MAP = 19
    PRE_GA_WRITE_ROWS = 20  # "v0" rows events (MySQL 5.1.0-5.1.15)
    PRE_GA_UPDATE_ROWS = 21
    PRE_GA_DELETE_ROWS = 22
    WRITE_ROWS_V1 = 23
    UPDATE_ROWS_V1 = 24
    DELETE_ROWS_V1 = 25
    INCIDENT = 26
    HEARTBEAT = 27
    IGNORABLE = 28
    ROWS_QUERY = 29
    WRITE_ROWS = 30  # v2
    UPDATE_ROWS = 31
    DELETE_ROWS = 32
    GTID = 33
    ANONYMOUS_GTID = 34
    PREVIOUS_GTIDS = 35
    TRANSACTION_CONTEXT = 36
    VIEW_CHANGE = 37
    XA_PREPARE = 38
    PARTIAL_UPDATE_ROWS = 39
    TRANSACTION_PAYLOAD = 40
    HEARTBEAT_V2 = 41
    GTID_TAGGED = 42
    # MariaDB
    MARIA_ANNOTATE_ROWS = 160
    MARIA_BINLOG_CHECKPOINT = 161
    MARIA_GTID = 162
    MARIA_GTID_LIST = 163
    MARIA_START_ENCRYPTION = 164
    MARIA_QUERY_COMPRESSED = 165
    MARIA_WRITE_ROWS_COMPRESSED_V1 = 166
    MARIA_UPDATE_ROWS_COMPRESSED_V1 = 167
    MARIA_DELETE_ROWS_COMPRESSED_V1 = 168
    MARIA_WRITE_ROWS_COMPRESSED = 169
    MARIA_UPDATE_ROWS_COMPRESSED = 170
    MARIA_DELETE_ROWS_COMPRESSED = 171


class ColumnType(IntEnum):
    """enum_field_types as written in TABLE_MAP (binlog_type())."""

    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    TYPED_ARRAY = 20
    # MariaDB's `COMPRESSED` columns (10.3+, include/mysql_com.h): row values carry a compression
    # header; TABLE_MAP metadata as BLOB (pack length, 1 byte) and VARCHAR (max length, 2 bytes)
    BLOB_COMPRESSED = 140
    VARCHAR_COMPRESSED = 141
    VECTOR = 242
    INVALID = 243
    BOOL = 244
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255
