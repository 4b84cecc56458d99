"""GTID events: MySQL GTID / ANONYMOUS_GTID / GTID_TAGGED (8.4), PREVIOUS_GTIDS (incl. tagged),
MariaDB GTID and GTID_LIST."""

from __future__ import annotations

from typing import Final

from service.binlog.constants import HEADER_LEN
from service.binlog.constants import EventType as E
from service.binlog.events import EventHeader, GtidEvent, GtidListEvent, PreviousGtidsEvent
from service.binlog.reader import ByteReader
from service.errors import InvalidValue, UnsupportedBinlog

__all__ = ["parse_gtid", "parse_gtid_list", "parse_mariadb_gtid", "parse_previous_gtids"]

_LOGICAL_TS_TYPECODE = 2
_GTID_TAGGED: Final = int(E.GTID_TAGGED)  # plain ints: IntEnum lookups cost ~60 ns each
_ANONYMOUS_GTID: Final = int(E.ANONYMOUS_GTID)
_BIT55 = 1 << 55
_BIT31 = 1 << 31
_MAX_SIDS = 1 << 20  # sanity bound: far beyond any real server, far below a memory problem


def _uuid(raw: bytes) -> str:
    h = raw.hex()  # str(uuid.UUID(bytes=raw)) gives the same text at several times the cost
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def parse_gtid(header: EventHeader, body: bytes) -> GtidEvent:
    type_code = header.type_code
    if type_code == _GTID_TAGGED:
        return _parse_tagged(header, body)
    r = ByteReader(body, base=HEADER_LEN)
    flags = r.u8()
    sid = _uuid(r.take(16))
    gno = r.uint(8)
    anonymous = type_code == _ANONYMOUS_GTID
    last_committed = sequence_number = 0
    immediate_ts = original_ts = tx_len = None
    immediate_ver = original_ver = None
    if r.remaining() >= 17 and r.buf[r.pos] == _LOGICAL_TS_TYPECODE:
        r.skip(1)
        last_committed = r.uint(8)
        sequence_number = r.uint(8)
        if r.remaining() >= 7:
            immediate_ts = r.uint(7)
            if immediate_ts & _BIT55:
                immediate_ts &= ~_BIT55
                original_ts = r.uint(7)
            else:
                original_ts = immediate_ts
            if not r.at_end():
                tx_len = r.lenenc()
            if r.remaining() >= 4:
                immediate_ver = r.uint(4)
                if immediate_ver & _BIT31:
                    immediate_ver &= ~_BIT31
                    original_ver = r.uint(4)
                else:
                    original_ver = immediate_ver
    gtid = None if anonymous else f"{sid}:{gno}"
    # Positional, in field order: one GTID per transaction, and keyword arguments double the cost
    # of building this 20-field record from compiled code.
    return GtidEvent(
        header, gtid, flags, sid, gno, None, anonymous, last_committed, sequence_number,
        immediate_ts, original_ts, tx_len, immediate_ver, original_ver,
    )  # fmt: skip


def _parse_tagged(header: EventHeader, body: bytes) -> GtidEvent:
    """GTID_TAGGED_LOG_EVENT: a mysql::serialization message (version 2):
    version(1) payload_size last_non_ignorable_field_id { field_id value }*."""
    r = ByteReader(body, base=HEADER_LEN)
    version = r.u8()
    if version != 2:
        raise UnsupportedBinlog(f"tagged GTID serialization version {version}")
    start = 0
    payload_size = r.varlen()
    last_non_ignorable = r.varlen()
    end = start + payload_size
    if end > r.end or end < r.pos:
        raise InvalidValue(f"tagged GTID payload size {payload_size} does not fit the event")
    f = ByteReader(body, r.pos, end, base=HEADER_LEN)
    ints: dict[int, int] = {}
    sid_raw = bytes(16)
    tag = ""
    while not f.at_end():
        fid = f.varlen()
        if fid == 1:
            sid_raw = bytes(f.varlen() & 0xFF for _ in range(16))
        elif fid == 3:
            tag = f.take(f.varlen()).decode("ascii", "replace")
        elif fid in (2, 4, 5):
            ints[fid] = f.varlen_signed()
        elif fid in (0, 6, 7, 8, 9, 10, 11):
            ints[fid] = f.varlen()
        elif fid <= last_non_ignorable:
            raise UnsupportedBinlog(f"tagged GTID has unknown non-ignorable field {fid}")
        else:
            break  # unknown ignorable field: its length is unknown, stop here
    sid = _uuid(sid_raw)
    gno = ints.get(2, 0)
    imm_ts = ints.get(6)
    imm_ver = ints.get(9)
    return GtidEvent(
        header,
        f"{sid}:{tag}:{gno}" if tag else f"{sid}:{gno}",
        flags=ints.get(0, 0),
        sid=sid,
        gno=gno,
        tag=tag or None,
        last_committed=ints.get(4, 0),
        sequence_number=ints.get(5, 0),
        immediate_commit_ts=imm_ts,
        original_commit_ts=ints.get(7, imm_ts),
        transaction_length=ints.get(8),
        immediate_server_version=imm_ver,
        original_server_version=ints.get(10, imm_ver),
        commit_group_ticket=ints.get(11),
    )


def parse_previous_gtids(header: EventHeader, body: bytes) -> PreviousGtidsEvent:
    r = ByteReader(body, base=HEADER_LEN)
    head = r.uint(8)
    tagged = head >> 56 == 1
    n_sids = (head >> 8) & ((1 << 48) - 1) if tagged else head & ((1 << 56) - 1)
    if n_sids > _MAX_SIDS or n_sids * 24 > r.remaining():
        raise InvalidValue(f"PREVIOUS_GTIDS declares {n_sids} source ids in {r.remaining()} bytes")
    parts: list[str] = []
    for _ in range(n_sids):
        sid = _uuid(r.take(16))
        tag = r.take(r.varlen()).decode("ascii", "replace") if tagged else ""
        n_iv = r.uint(8)
        if n_iv * 16 > r.remaining():
            raise InvalidValue(f"PREVIOUS_GTIDS declares {n_iv} intervals in {r.remaining()} bytes")
        ivs = []
        for _ in range(n_iv):
            lo, hi = r.uint(8), r.uint(8)  # [lo, hi)
            ivs.append(str(lo) if hi - 1 == lo else f"{lo}-{hi - 1}")
        parts.append(":".join([sid, *([tag] if tag else []), *ivs]))
    return PreviousGtidsEvent(header, ",".join(parts))


# MariaDB Gtid_log_event flags2
FL_STANDALONE = 1
FL_GROUP_COMMIT_ID = 2
FL_PREPARED_XA = 64
FL_COMPLETED_XA = 128


def parse_mariadb_gtid(header: EventHeader, body: bytes) -> GtidEvent:
    r = ByteReader(body, base=HEADER_LEN)
    seq_no = r.uint(8)
    domain_id = r.uint(4)
    flags2 = r.u8()
    commit_id = None
    xid = None
    if flags2 & FL_GROUP_COMMIT_ID:
        commit_id = r.uint(8)
    elif flags2 & (FL_PREPARED_XA | FL_COMPLETED_XA):
        fmt_id = r.take(4)
        gtrid_len, bqual_len = r.u8(), r.u8()
        xid = fmt_id + r.take(gtrid_len + bqual_len)
    return GtidEvent(  # positional, in field order (see parse_gtid)
        header, f"{domain_id}-{header.server_id}-{seq_no}", flags2, "", 0, None, False, 0, 0,
        None, None, None, None, None, None, domain_id, seq_no, commit_id, bool(flags2 & FL_STANDALONE), xid,
    )  # fmt: skip


def parse_gtid_list(header: EventHeader, body: bytes) -> GtidListEvent:
    r = ByteReader(body, base=HEADER_LEN)
    raw = r.uint(4)
    count, flags = raw & 0x0FFFFFFF, raw >> 28
    if count * 16 > r.remaining():
        raise InvalidValue(f"GTID_LIST declares {count} GTIDs in {r.remaining()} bytes")
    gtids = []
    for _ in range(count):
        domain, server, seq = r.uint(4), r.uint(4), r.uint(8)
        gtids.append(f"{domain}-{server}-{seq}")
    return GtidListEvent(header, tuple(gtids), flags)
