"""Small control and statement-context events."""

from __future__ import annotations

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

__all__ = ["parse_control"]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def parse_rotate(h: EventHeader, body: bytes, fmt: StreamFormat | None) -> RotateEvent:
    r = ByteReader(body, base=HEADER_LEN)
    post = fmt.post_header_len(E.ROTATE, 8) if fmt is not None else 8
    position = r.uint(8) if post >= 8 else 4
    r.skip(max(0, post - 8))
    name = _text(r.rest())
    fake = h.timestamp == 0 or h.log_pos == 0 or bool(h.flags & LOG_EVENT_ARTIFICIAL_F)
    return RotateEvent(h, name, position, fake)


def _user_var(h: EventHeader, r: ByteReader) -> UserVarEvent:
    name = _text(r.take(r.uint(4)))
    if r.u8():
        return UserVarEvent(h, name, None, 0, 0, False)
    vtype = r.u8()
    charset = r.uint(4)
    value = r.take(r.uint(4))
    flags = r.u8() if not r.at_end() else 0
    return UserVarEvent(h, name, value, vtype, charset, bool(flags & 1))


def _heartbeat_v2(h: EventHeader, r: ByteReader) -> HeartbeatEvent:
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


def parse_control(h: EventHeader, body: bytes, fmt: StreamFormat) -> Event | None:
    """Decode the small events; None when `h.type_code` is not one of them."""
    t = h.type_code
    r = ByteReader(body, base=HEADER_LEN)
    if t == E.ROTATE:
        return parse_rotate(h, body, fmt)
    if t == E.STOP:
        return StopEvent(h)
    if t == E.XID:
        return XidEvent(h, r.uint(8))
    if t == E.INTVAR:
        return IntvarEvent(h, r.u8(), r.uint(8))
    if t == E.RAND:
        return RandEvent(h, r.uint(8), r.uint(8))
    if t == E.USER_VAR:
        return _user_var(h, r)
    if t == E.BEGIN_LOAD_QUERY:
        return BeginLoadQueryEvent(h, r.uint(4), r.rest())
    if t == E.APPEND_BLOCK:
        return AppendBlockEvent(h, r.uint(4), r.rest())
    if t == E.DELETE_FILE:
        return DeleteFileEvent(h, r.uint(4))
    if t == E.INCIDENT:
        incident = r.uint(2)
        msg = _text(r.take(r.u8())) if not r.at_end() else ""
        return IncidentEvent(h, incident, msg)
    if t == E.HEARTBEAT:
        return HeartbeatEvent(h, _text(r.rest()), h.log_pos)
    if t == E.HEARTBEAT_V2:
        return _heartbeat_v2(h, r)
    if t == E.ROWS_QUERY:
        r.skip(1)  # length byte, truncated at 255: the text runs to the end of the event
        return RowsQueryEvent(h, _text(r.rest()))
    if t == E.MARIA_ANNOTATE_ROWS:
        return AnnotateRowsEvent(h, _text(r.rest()))
    if t == E.MARIA_BINLOG_CHECKPOINT:
        return BinlogCheckpointEvent(h, _text(r.take(r.uint(4))))
    if t == E.XA_PREPARE:
        one_phase = bool(r.u8())
        fmt_id = r.sint(4)
        gtrid_len, bqual_len = r.uint(4), r.uint(4)
        if gtrid_len > 64 or bqual_len > 64:
            raise InvalidValue(f"XA id lengths {gtrid_len}/{bqual_len} exceed 64")
        return XaPrepareEvent(h, one_phase, fmt_id, r.take(gtrid_len), r.take(bqual_len))
    return None
