"""Small control and statement-context events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from service.binlog.constants import HEADER_LEN, LOG_EVENT_ARTIFICIAL_F
from service.binlog.constants import EventType as E
from service.binlog.events import (
    AnnotateRowsEvent,
    AppendBlockEvent,
    BeginLoadQueryEvent,
    BinlogCheckpointEvent,
    DeleteFileEvent,
    Event,
    EventHeader,
    HeartbeatEvent,
    IncidentEvent,
    IntvarEvent,
    RandEvent,
    RotateEvent,
    RowsQueryEvent,
    StopEvent,
    UserVarEvent,
    XaPrepareEvent,
    XidEvent,
)
from service.binlog.fde import StreamFormat
from service.binlog.reader import ByteReader
from service.errors import InvalidValue

__all__ = ["CONTROL_EVENTS", "parse_control", "parse_rotate"]

_ROTATE: Final = int(E.ROTATE)  # a plain int: IntEnum attribute lookups cost ~60 ns each


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def parse_rotate(h: EventHeader, body: bytes, fmt: StreamFormat | None) -> RotateEvent:
    r = ByteReader(body, base=HEADER_LEN)
    post = fmt.post_header_len(_ROTATE, 8) if fmt is not None else 8
    position = r.uint(8) if post >= 8 else 4
    r.skip(max(0, post - 8))
    name = _text(r.rest())
    fake = h.timestamp == 0 or h.log_pos == 0 or bool(h.flags & LOG_EVENT_ARTIFICIAL_F)
    return RotateEvent(h, name, position, fake)


def _user_var(h: EventHeader, r: ByteReader) -> Event:
    name = _text(r.take(r.uint(4)))
    if r.u8():
        return UserVarEvent(h, name, None, 0, 0, False)
    vtype = r.u8()
    charset = r.uint(4)
    value = r.take(r.uint(4))
    flags = r.u8() if not r.at_end() else 0
    return UserVarEvent(h, name, value, vtype, charset, bool(flags & 1))


def _heartbeat_v2(h: EventHeader, r: ByteReader) -> Event:
    """HEARTBEAT_LOG_EVENT_V2: type(lenenc) length(lenenc) value, ended by type 0."""
    name, pos = "", h.log_pos
    while not r.at_end():
        kind = r.lenenc()
        if kind == 0:
            break
        value = ByteReader(r.take(r.lenenc()))
        if kind == 1:
            name = _text(value.rest())
        elif kind == 2:
            pos = value.lenenc()
    return HeartbeatEvent(h, name, pos)


def _xid(h: EventHeader, r: ByteReader) -> Event:
    return XidEvent(h, r.uint(8))


def _intvar(h: EventHeader, r: ByteReader) -> Event:
    return IntvarEvent(h, r.u8(), r.uint(8))


def _rand(h: EventHeader, r: ByteReader) -> Event:
    return RandEvent(h, r.uint(8), r.uint(8))


def _begin_load_query(h: EventHeader, r: ByteReader) -> Event:
    return BeginLoadQueryEvent(h, r.uint(4), r.rest())


def _append_block(h: EventHeader, r: ByteReader) -> Event:
    return AppendBlockEvent(h, r.uint(4), r.rest())


def _delete_file(h: EventHeader, r: ByteReader) -> Event:
    return DeleteFileEvent(h, r.uint(4))


def _incident(h: EventHeader, r: ByteReader) -> Event:
    incident = r.uint(2)
    msg = _text(r.take(r.u8())) if not r.at_end() else ""
    return IncidentEvent(h, incident, msg)


def _heartbeat(h: EventHeader, r: ByteReader) -> Event:
    return HeartbeatEvent(h, _text(r.rest()), h.log_pos)


def _rows_query(h: EventHeader, r: ByteReader) -> Event:
    r.skip(1)  # length byte, truncated at 255: the text runs to the end of the event
    return RowsQueryEvent(h, _text(r.rest()))


def _annotate_rows(h: EventHeader, r: ByteReader) -> Event:
    return AnnotateRowsEvent(h, _text(r.rest()))


def _binlog_checkpoint(h: EventHeader, r: ByteReader) -> Event:
    return BinlogCheckpointEvent(h, _text(r.take(r.uint(4))))


def _xa_prepare(h: EventHeader, r: ByteReader) -> Event:
    one_phase = bool(r.u8())
    fmt_id = r.sint(4)
    gtrid_len, bqual_len = r.uint(4), r.uint(4)
    if gtrid_len > 64 or bqual_len > 64:
        raise InvalidValue(f"XA id lengths {gtrid_len}/{bqual_len} exceed 64")
    return XaPrepareEvent(h, one_phase, fmt_id, r.take(gtrid_len), r.take(bqual_len))


def _stop(h: EventHeader, r: ByteReader) -> Event:
    return StopEvent(h)


# One lookup by type code instead of a chain of IntEnum comparisons (~90 ns each).
_PARSERS: dict[int, Callable[[EventHeader, ByteReader], Event]] = {
    E.STOP: _stop,
    E.XID: _xid,
    E.INTVAR: _intvar,
    E.RAND: _rand,
    E.USER_VAR: _user_var,
    E.BEGIN_LOAD_QUERY: _begin_load_query,
    E.APPEND_BLOCK: _append_block,
    E.DELETE_FILE: _delete_file,
    E.INCIDENT: _incident,
    E.HEARTBEAT: _heartbeat,
    E.HEARTBEAT_V2: _heartbeat_v2,
    E.ROWS_QUERY: _rows_query,
    E.MARIA_ANNOTATE_ROWS: _annotate_rows,
    E.MARIA_BINLOG_CHECKPOINT: _binlog_checkpoint,
    E.XA_PREPARE: _xa_prepare,
}
CONTROL_EVENTS = frozenset(int(t) for t in _PARSERS) | {int(E.ROTATE)}


def parse_control(h: EventHeader, body: bytes, fmt: StreamFormat) -> Event | None:
    """Decode the small events; None when `h.type_code` is not one of them."""
    t = h.type_code
    if t == _ROTATE:
        return parse_rotate(h, body, fmt)
    parser = _PARSERS.get(t)
    if parser is None:
        return None
    return parser(h, ByteReader(body, base=HEADER_LEN))
