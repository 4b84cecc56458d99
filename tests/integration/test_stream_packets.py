"""`DumpBuffer` on the bytes of real dumps from the local mariadbd: every chunking gives the
same events as aiomysql's own packet reader, including events of 16 MB - 1 and more; and the
dump connection stops reading while its events are not taken."""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Iterable, Iterator

import aiomysql
import pytest
from stream_helpers import admin, make_tables, run_sql, settings_for, unique_db, workload

from service.binlog.constants import EventType
from service.checkpoint import BinlogPosition
from service.devtools.stack import LocalStack
from service.errors import SourceError
from service.transactions import TableFilter
from service.transport.connection import connect, server_info
from service.transport.packets import BUFFER_SIZE, MAX_PAYLOAD, DumpBuffer
from service.transport.source import BinlogSource
from service.transport.stream import COM_BINLOG_DUMP, PAUSE_BYTES, BinlogStream

pytestmark = pytest.mark.integration
_WRITE_ROWS = {bytes([EventType.WRITE_ROWS_V1]), bytes([EventType.WRITE_ROWS])}


def _position(stack: LocalStack) -> BinlogPosition:
    """The end of the binlog once it is quiet: MariaDB writes a BINLOG_CHECKPOINT some time after
    a FLUSH BINARY LOGS (an earlier test's, or this test's own workload), which would make two
    dumps from here differ (seen once in CI: 96 bytes more in the second)."""
    last = None
    while True:
        with admin(stack) as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
        assert row is not None
        here = BinlogPosition(row[0], row[1])
        if here == last:
            return here
        last = here
        time.sleep(0.3)


async def _dump(stack: LocalStack, start: BinlogPosition) -> aiomysql.Connection:
    """A connection that sent a non-blocking COM_BINLOG_DUMP from `start` (new server_id each),
    still read by aiomysql (BinlogStream.dump_position would hand the socket to DumpBuffer)."""
    settings = settings_for(stack)
    conn = await connect(settings)
    stream = BinlogStream(conn, await server_info(conn), read_timeout=10)
    await stream.prepare(heartbeat=1, server_id=settings.server_id)
    dump = struct.pack("<BIHI", COM_BINLOG_DUMP, start.pos, 1, settings.server_id) + start.file.encode()
    await stream._command(dump, "COM_BINLOG_DUMP")
    return conn


def _is_eof(payload: bytes) -> bool:
    return payload[:1] == b"\xfe" and len(payload) < 9


async def _payloads_by_aiomysql(stack: LocalStack, start: BinlogPosition) -> list[bytes]:
    """The reference: aiomysql's `_read_packet` (continuations joined) up to the dump's EOF."""
    conn = await _dump(stack, start)
    out: list[bytes] = []
    try:
        while not out or not _is_eof(out[-1]):
            out.append((await conn._read_packet()).get_all_data())
    finally:
        conn.close()
    return out


def _events(payloads: list[bytes]) -> list[bytes]:
    """The event bytes of the OK packets (the dump's EOF ends the list)."""
    assert _is_eof(payloads[-1])
    assert all(p[0] == 0 for p in payloads[:-1])
    return [p[1:] for p in payloads[:-1]]


def _wire_size(payloads: Iterable[bytes]) -> int:
    """Bytes on the wire: a 4-byte header per packet; a payload of n bytes takes n // 0xffffff + 1."""
    return sum(len(p) + 4 * (len(p) // MAX_PAYLOAD + 1) for p in payloads)


async def _wire_bytes(stack: LocalStack, start: BinlogPosition, size: int) -> bytes:
    """The raw socket bytes of the same dump, as they arrived; b"" when more arrived than `size`
    (the binlog grew between the two dumps: a late BINLOG_CHECKPOINT, say)."""
    conn = await _dump(stack, start)
    chunks: list[bytes] = []
    got = 0
    try:
        while got < size:
            chunk = await conn._reader.read(1 << 20)
            assert chunk, "the server closed the dump early"
            chunks.append(chunk)
            got += len(chunk)
    finally:
        conn.close()
    return b"".join(chunks) if got == size else b""


async def _same_dump(stack: LocalStack, start: BinlogPosition) -> tuple[list[bytes], bytes]:
    """The dump from `start` read by aiomysql (the reference) and as raw bytes, of one binlog:
    read again while the binlog grows between the two."""
    for _ in range(10):
        reference = await _payloads_by_aiomysql(stack, start)
        wire = await _wire_bytes(stack, start, _wire_size(reference))
        if wire:
            return reference, wire
        await asyncio.sleep(0.5)
    raise AssertionError("the binlog kept growing between the two dumps")


def _split(wire: bytes, sizes: Iterator[int]) -> list[bytes]:
    """Events of `wire` received in reads of `sizes` bytes (as a transport calls get_buffer and
    buffer_updated, through `feed`)."""
    buffer = DumpBuffer()
    out: list[bytes] = []
    at = 0
    while at < len(wire):
        n = next(sizes)
        out += buffer.feed(wire[at : at + n])
        at += n
    assert buffer.ended and buffer.buffered == 0
    assert len(buffer.get_buffer()) == BUFFER_SIZE  # back to the default size
    return out


def _random_sizes(seed: int, low: int, high: int) -> Iterator[int]:
    rnd = random.Random(seed)
    while True:
        yield rnd.randint(low, high)


def _every(n: int) -> Iterator[int]:
    while True:
        yield n


async def test_splitter_matches_aiomysql_on_a_real_dump(stack: LocalStack) -> None:
    db = unique_db("st_pkt")
    start = _position(stack)
    run_sql(stack, make_tables(db) + workload(db, 0, 12, rotate_every=5))
    _position(stack)  # the workload's own FLUSHes: wait for their BINLOG_CHECKPOINTs too
    reference, wire = await _same_dump(stack, start)
    assert len(reference) > 40 and _is_eof(reference[-1])

    events = _events(reference)
    assert _split(wire, _every(len(wire))) == events  # one read
    assert _split(wire, _every(1)) == events  # every packet spans reads
    for seed in range(5):  # reads ending anywhere: inside headers, payloads, at boundaries
        assert _split(wire, _random_sizes(seed, 1, 300)) == events


async def test_splitter_refuses_a_stream_out_of_step(stack: LocalStack) -> None:
    start = _position(stack)
    reference, wire = await _same_dump(stack, start)
    with pytest.raises(SourceError, match="sequence id 1, expected 2"):
        DumpBuffer(next_seq=2).feed(wire)
    first = 4 + len(reference[0])  # drop the first packet: the next one is numbered 2, not 1
    with pytest.raises(SourceError, match="sequence id 2, expected 1"):
        DumpBuffer().feed(wire[first:])


async def test_events_of_16mb_and_more_span_packets(stack: LocalStack) -> None:
    """A rows event whose OK packet is exactly 0xffffff bytes (then an empty packet ends it) and
    one of 17 MB (two packets), split from reads of 64 KiB and through `BinlogSource`."""
    db = unique_db("st_pkt16")
    run_sql(stack, [f"CREATE DATABASE {db}", f"CREATE TABLE {db}.blobs (id INT PRIMARY KEY, b LONGBLOB)"])
    # Calibrate: the rows event of a one-row insert is the blob's length + a fixed overhead.
    start = _position(stack)
    run_sql(stack, [f"INSERT INTO {db}.blobs VALUES (0, 'x')"])
    probe = await _payloads_by_aiomysql(stack, start)
    (rows_event,) = [p for p in probe if p[1 + 4 : 1 + 5] in _WRITE_ROWS]  # OK byte, header
    exact = MAX_PAYLOAD - (len(rows_event) - 1)  # this blob makes the OK packet 0xffffff bytes
    big = 17 * 1024 * 1024 + 7

    start = _position(stack)
    run_sql(stack, [f"INSERT INTO {db}.blobs VALUES (1, REPEAT('y', {exact}))"])
    run_sql(stack, [f"INSERT INTO {db}.blobs VALUES (2, REPEAT('z', {big}))"])
    reference, wire = await _same_dump(stack, start)
    assert sorted(len(p) for p in reference)[-2:] == [MAX_PAYLOAD, MAX_PAYLOAD + big - exact]
    events = _events(reference)
    assert _split(wire, _every(65536)) == events
    assert _split(wire, _random_sizes(1, 1, 3 << 20)) == events

    source = BinlogSource(settings_for(stack), start, table_filter=TableFilter((f"{db}.*",)))
    async with source:
        txns = [await anext(source), await anext(source)]
    blobs = [c.after["b"] for t in txns for c in t.changes if c.after is not None]
    assert blobs == [b"y" * exact, b"z" * big]


async def test_non_blocking_source_ends_at_the_end_of_the_binlog(stack: LocalStack) -> None:
    db = unique_db("st_eof")
    start = _position(stack)
    run_sql(stack, make_tables(db) + workload(db, 0, 6))
    settings = settings_for(stack)
    source = BinlogSource(settings, start, table_filter=TableFilter((f"{db}.*",)), non_blocking=True)
    async with source:
        txns = [t async for t in source]
    assert sum(len(t.changes) for t in txns) == 12
    assert txns[-1].end.position == _position(stack)


async def test_reading_pauses_while_events_wait(stack: LocalStack) -> None:
    """12 MB of binlog that nobody takes: the dump connection holds at most PAUSE_BYTES + one
    read of it (TCP pushes back on the server), and then delivers all of it."""
    db = unique_db("st_pause")
    run_sql(stack, [f"CREATE DATABASE {db}", f"CREATE TABLE {db}.blobs (id INT PRIMARY KEY, b LONGBLOB)"])
    start = _position(stack)
    run_sql(stack, [f"INSERT INTO {db}.blobs VALUES ({i}, REPEAT('p', 60000))" for i in range(200)])
    reference = _events(await _payloads_by_aiomysql(stack, start))

    settings = settings_for(stack)
    conn = await connect(settings)
    stream = BinlogStream(conn, await server_info(conn), read_timeout=10)
    try:
        await stream.prepare(heartbeat=1, server_id=settings.server_id)
        await stream.dump_position(start, server_id=settings.server_id, non_block=True)
        await asyncio.sleep(1)
        protocol = stream._protocol
        assert protocol is not None and protocol._paused
        assert PAUSE_BYTES <= protocol._waiting <= PAUSE_BYTES + BUFFER_SIZE
        got: list[bytes] = []
        while (batch := await stream.read_batch()) is not None:
            got += batch
    finally:
        stream.close()
    assert got == reference
