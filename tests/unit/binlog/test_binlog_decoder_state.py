"""Decoder state and error paths, on events taken from real binlogs (patched where a test
needs a broken or unusual event; the CRC is recomputed so only the intended fault remains)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from binlog_text import FIXTURES, VECTORS
from hypothesis import given
from hypothesis import strategies as st

from service.binlog import (
    BinlogDecoder,
    DecodeOptions,
    EventType,
    RotateEvent,
    RowsEvent,
    TableMapEvent,
    TransactionPayloadEvent,
    read_binlog_file,
    scan_binlog_file,
)
from service.binlog.reader import ByteReader
from service.errors import ChecksumMismatch, DecodeError, MissingTableMap, TruncatedEvent, UnknownEvent

CRC57 = VECTORS / "mysql-5.7" / "mysql-bin.checksum-crc32"
TAGGED = VECTORS / "mysql-8" / "binlog_transaction_with_GTID_TAG.000001"
PAYLOAD = VECTORS / "mysql-8" / "transaction_compression.000001"


def raws(path: Path) -> list[bytes]:
    return list(read_binlog_file(path))


def of_type(events: list[bytes], code: int) -> list[bytes]:
    return [e for e in events if e[4] == code]


def patch(raw: bytes, at: int, new: bytes, crc: bool = True) -> bytes:
    out = raw[:at] + new + raw[at + len(new) :]
    if crc:
        out = out[:-4] + struct.pack("<I", zlib.crc32(out[:-4]))
    return out


def test_offsets_come_from_log_pos_and_match_the_file() -> None:
    decoder = BinlogDecoder(file=CRC57.name)
    for raw in read_binlog_file(CRC57):
        event = decoder.feed(bytes(raw))  # plain bytes: the offset comes from log_pos
        assert event is not None and event.header.offset == raw.offset  # type: ignore[attr-defined]


def test_scan_and_read_give_the_same_events_and_offsets() -> None:
    """scan_binlog_file (the fast path: offset, bytes) and read_binlog_file (RawEvents) agree,
    also from a start and up to a stop inside the file; a scan left unfinished closes its file."""
    whole = [(raw.offset, bytes(raw)) for raw in read_binlog_file(CRC57)]
    assert list(scan_binlog_file(CRC57)) == whole
    start, stop = whole[3][0], whole[-2][0]
    assert list(scan_binlog_file(CRC57, start, stop)) == [e for e in whole if start <= e[0] < stop]
    scan = scan_binlog_file(CRC57)
    next(scan)
    scan.close()  # GeneratorExit at the yield: the `with open(...)` block closes the file


def test_table_map_cleared_at_statement_end_fde_and_rotate() -> None:
    evs = raws(TAGGED)
    fde, tmap, rows, rotate = (of_type(evs, t)[0] for t in (15, 19, 30, 4))
    d = BinlogDecoder()
    d.feed(fde)
    d.feed(tmap)
    assert isinstance(d.feed(rows), RowsEvent)
    with pytest.raises(MissingTableMap, match="table id"):
        d.feed(rows)  # STMT_END_F dropped the map
    d.feed(tmap)
    d.feed(fde)
    with pytest.raises(MissingTableMap):
        d.feed(rows)
    d.feed(tmap)
    rot = d.feed(rotate)
    assert isinstance(rot, RotateEvent) and not rot.fake and d.file == rot.next_file
    with pytest.raises(MissingTableMap):
        d.feed(rows)


def test_events_before_fde_and_fake_rotate() -> None:
    evs = raws(TAGGED)
    d = BinlogDecoder()
    with pytest.raises(DecodeError, match="before any FORMAT_DESCRIPTION"):
        d.feed(of_type(evs, 19)[0])
    rotate = of_type(evs, 4)[0]
    fake = patch(rotate, 0, b"\x00\x00\x00\x00")  # timestamp 0
    fake = patch(fake, 13, b"\x00\x00\x00\x00")  # log_pos 0
    ev = d.feed(fake)
    assert isinstance(ev, RotateEvent) and ev.fake and d.file == ev.next_file and d.next_offset == ev.position


def test_checksum_mismatch_names_file_and_offset() -> None:
    evs = raws(CRC57)
    xid = of_type(evs, EventType.XID)[0]
    d = BinlogDecoder(file="mysql-bin.000042")
    d.feed(evs[0])
    bad = patch(xid, 19, b"\xff", crc=False)
    with pytest.raises(ChecksumMismatch, match=r"mysql-bin\.000042 at offset 486"):
        d.feed(bad)
    d2 = BinlogDecoder(DecodeOptions(verify_checksum=False))
    d2.feed(evs[0])
    assert d2.feed(bad) is not None


def test_unknown_events_fail_unless_ignorable() -> None:
    evs = raws(CRC57)
    xid = of_type(evs, EventType.XID)[0]
    d = BinlogDecoder()
    d.feed(evs[0])
    with pytest.raises(UnknownEvent, match="unknown event type 99"):
        d.feed(patch(xid, 4, b"\x63"))
    ignorable = patch(patch(xid, 4, b"\x63"), 17, bytes([xid[17] | 0x80]))
    assert d.feed(ignorable) is None
    assert d.stats.skipped_ignorable == 1


def test_log_pos_zero_uses_the_running_offset() -> None:
    evs = raws(CRC57)
    d = BinlogDecoder()
    d.feed(evs[0])
    d.feed(evs[1])
    ev = d.feed(patch(evs[2], 13, b"\x00\x00\x00\x00"))  # MariaDB 11.4+ style log_pos 0
    assert ev is not None and ev.header.offset == evs[2].offset  # type: ignore[attr-defined]
    assert d.next_offset == evs[3].offset  # type: ignore[attr-defined]


def test_skip_rows_keeps_the_table_map() -> None:
    d = BinlogDecoder(DecodeOptions(skip_rows=lambda t: t.table == "orders"))
    out = [d.feed(r) for r in raws(TAGGED)]
    assert any(isinstance(e, TableMapEvent) for e in out)
    rows = [e for e in out if isinstance(e, RowsEvent)]
    assert rows and all(e.skipped and e.changes == [] for e in rows)
    assert d.stats.skipped_rows_events == 1


def test_unconsumed_payload_is_drained_before_the_next_event() -> None:
    d = BinlogDecoder()
    seen = [d.feed(r) for r in raws(PAYLOAD)]
    assert any(isinstance(e, TransactionPayloadEvent) for e in seen)
    assert d.stats.rows == 1 and d.stats.events_by_type[EventType.WRITE_ROWS] == 1


def test_invalid_text_bytes_come_out_as_bytes_and_are_counted() -> None:
    path = next((FIXTURES / "mariadb-10.11").glob("03*"))
    d = BinlogDecoder()
    for raw in raws(path):
        if raw[4] == EventType.UPDATE_ROWS_V1:
            at = bytes(raw).find(b"minimal")
            ev = d.feed(patch(raw, at, b"\xff"))
            assert isinstance(ev, RowsEvent) and ev.changes[0].after == {"i": 42, "vc": b"\xffinimal"}
            assert d.stats.invalid_text_values == 1
            return
        d.feed(raw)
    raise AssertionError("no UPDATE_ROWS event")


def test_truncated_event_is_a_decode_error() -> None:
    evs = raws(CRC57)
    d = BinlogDecoder()
    d.feed(evs[0])
    with pytest.raises(DecodeError, match="header says"):
        d.feed(evs[1][:-3])


@given(st.binary(min_size=8, max_size=8), st.integers(1, 8))
def test_byte_reader_uint_is_little_endian_at_every_width(data: bytes, n: int) -> None:
    """ByteReader.uint computes the common widths itself (2, 4, 8): same as int.from_bytes."""
    r = ByteReader(data, pos=8 - n)
    assert r.uint(n) == int.from_bytes(data[8 - n :], "little") and r.at_end()
    with pytest.raises(TruncatedEvent):
        ByteReader(data[: n - 1]).uint(n)
