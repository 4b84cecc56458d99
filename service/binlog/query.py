"""QUERY_EVENT (and EXECUTE_LOAD_QUERY, MariaDB QUERY_COMPRESSED) with its status variables.

Status variables are (code, value) pairs whose value layout depends on the code, with no length
of its own, so the first code this module does not know ends parsing, exactly as the server's
Query_log_event constructor does: the code is kept as status["unknown_code"], the bytes from
there on as status["unparsed"], and BinlogDecoder counts such events in
stats.unknown_status_vars. The schema and the SQL text come after the status block (whose
length is in the post-header), so they are always decoded.
"""

from __future__ import annotations

from typing import Any, Final

from service.binlog.charsets import codec_for_collation, decode_latin1
from service.binlog.compress import mariadb_uncompress
from service.binlog.constants import HEADER_LEN
from service.binlog.constants import EventType as E
from service.binlog.events import EventHeader, ExecuteLoadQueryEvent, QueryEvent
from service.binlog.fde import StreamFormat
from service.binlog.reader import ByteReader

__all__ = ["parse_query", "parse_status_vars"]

_EXECUTE_LOAD_QUERY: Final = int(E.EXECUTE_LOAD_QUERY)  # plain ints: IntEnum lookups cost ~60 ns
_QUERY_COMPRESSED: Final = int(E.MARIA_QUERY_COMPRESSED)

# Status variable codes (log_event.h Q_*; MariaDB adds 128+)
_FIXED: dict[int, tuple[str, int]] = {
    0: ("flags2", 4),
    1: ("sql_mode", 8),
    3: ("auto_increment", 4),  # increment(2) + offset(2)
    4: ("charset", 6),  # character_set_client(2), collation_connection(2), collation_server(2)
    7: ("lc_time_names", 2),
    8: ("charset_database", 2),
    9: ("table_map_for_update", 8),
    10: ("master_data_written", 4),
    13: ("microseconds", 3),
    16: ("explicit_defaults_for_timestamp", 1),
    17: ("ddl_xid", 8),
    18: ("default_collation_for_utf8mb4", 2),
    19: ("sql_require_primary_key", 1),
    20: ("default_table_encryption", 1),
    128: ("hrnow", 3),  # MariaDB
    129: ("xid", 8),  # MariaDB
}
_GTID_FLAGS3: Final = 130  # MariaDB 10.8+ Q_GTID_FLAGS3: flags(1) [+ start-alter seq_no(8)]
_CHARACTER_SET_COLLATIONS: Final = 131  # MariaDB 11.2+: count(1) + count * (charset id(2), collation id(2))
# Gtid_log_event::FL_COMMIT_ALTER_E1 | FL_ROLLBACK_ALTER_E1: a COMMIT/ROLLBACK ALTER carries the
# seq_no of its START ALTER (sql/log_event.cc, Query_log_event::Query_log_event, case Q_GTID_FLAGS3)
_ALTER_COMPLETION_FLAGS: Final = 0x04 | 0x08


def parse_status_vars(raw: bytes) -> dict[str, Any]:
    """Decode status variables. An unknown code ends parsing, as the server does (a value
    has no length of its own, so nothing after it can be located); the code is kept under
    "unknown_code" and the remaining bytes under "unparsed"."""
    r = ByteReader(raw)
    out: dict[str, Any] = {}
    while not r.at_end():
        code = r.u8()
        if code in _FIXED:
            name, size = _FIXED[code]
            if code == 3:
                out[name] = (r.uint(2), r.uint(2))
            elif code == 4:
                out[name] = (r.uint(2), r.uint(2), r.uint(2))
            else:
                out[name] = r.uint(size)
        elif code == 2:  # Q_CATALOG_CODE (old): len + str + NUL
            out["catalog"] = r.take(r.u8()).decode("utf-8", "replace")
            r.skip(1)
        elif code in (5, 6):  # time zone / catalog_nz: len + str
            out["time_zone" if code == 5 else "catalog"] = r.take(r.u8()).decode("utf-8", "replace")
        elif code == 11:  # Q_INVOKER: user, host
            user = r.take(r.u8()).decode("utf-8", "replace")
            host = r.take(r.u8()).decode("utf-8", "replace")
            out["invoker"] = (user, host)
        elif code == 12:  # Q_UPDATED_DB_NAMES
            count = r.u8()
            if count == 254:  # OVER_MAX_DBS_IN_EVENT_MTS
                out["updated_db_names"] = None
            else:
                out["updated_db_names"] = tuple(r.cstring().decode("utf-8", "replace") for _ in range(count))
        elif code == _GTID_FLAGS3:
            flags = r.u8()
            out["gtid_flags3"] = flags
            if flags & _ALTER_COMPLETION_FLAGS:
                out["start_alter_seq_no"] = r.uint(8)
        elif code == _CHARACTER_SET_COLLATIONS:  # Charset_collation_map_st::to_binary
            count = r.u8()
            out["character_set_collations"] = tuple((r.uint(2), r.uint(2)) for _ in range(count))
        else:
            out["unknown_code"] = code
            out["unparsed"] = r.rest()
            break
    return out


def _decode_sql(raw: bytes, status: dict[str, Any]) -> str:
    charset = status.get("charset")
    codec = codec_for_collation(charset[0]) if charset else None
    if codec == "latin1":
        return decode_latin1(raw)
    if codec is None or codec == "binary":
        return raw.decode("utf-8", "replace")
    return raw.decode(codec, "replace")


def parse_query(header: EventHeader, body: bytes, fmt: StreamFormat) -> QueryEvent:
    r = ByteReader(body, base=HEADER_LEN)
    type_code = header.type_code
    thread_id = r.uint(4)
    exec_time = r.uint(4)
    schema_len = r.u8()
    error_code = r.uint(2)
    post = fmt.post_header_len(type_code, 13 if type_code != _EXECUTE_LOAD_QUERY else 26)
    status_len = r.uint(2) if post >= 13 else 0
    load = (0, 0, 0, 0)
    if type_code == _EXECUTE_LOAD_QUERY:
        load = (r.uint(4), r.uint(4), r.uint(4), r.u8())
        r.skip(max(0, post - 26))
    else:
        r.skip(max(0, post - 13))
    status = parse_status_vars(r.take(status_len))
    schema = r.take(schema_len).decode("utf-8", "replace")
    r.skip(1)
    sql_bytes = r.rest()
    compressed = type_code == _QUERY_COMPRESSED
    if compressed:
        sql_bytes = mariadb_uncompress(sql_bytes)
    sql = _decode_sql(sql_bytes, status)
    if type_code == _EXECUTE_LOAD_QUERY:
        return ExecuteLoadQueryEvent(
            header, thread_id, exec_time, schema, error_code, sql, sql_bytes, status, False, *load
        )
    return QueryEvent(header, thread_id, exec_time, schema, error_code, sql, sql_bytes, status, compressed)
