"""The dump connection: register as a replica, send the dump command, read raw events.

This is the only module that uses aiomysql's private packet layer (`_read_packet`,
`write_packet`, `_next_seq_id`, and, once the dump started, the connection's `_writer.transport`
and what is left in its `_reader`);
tests/integration/test_stream_transport.py checks they still exist.

Wire formats (all integers little-endian):

    COM_REGISTER_SLAVE  0x15  server_id:4  host:lenstr1  user:lenstr1  password:lenstr1
                              port:2  rank:4  master_id:4
    COM_BINLOG_DUMP     0x12  pos:4  flags:2  server_id:4  file:eof
    COM_BINLOG_DUMP_GTID 0x1e flags:2  server_id:4  file_len:4  file  pos:8  data_len:4  gtid_set_data
    each event packet   0x00 (OK)  event bytes     (0xfe EOF ends a non-blocking dump, 0xff ERR)

After the dump command the socket is no longer aiomysql's: `_DumpProtocol` (an
asyncio.BufferedProtocol swapped onto the same transport, plain or TLS) receives into a
`DumpBuffer`, which cuts the bytes into events (joining the 0xffffff-sized continuations of
events longer than 16 MB - 1). `read_batch()` returns every event received since the last call:
one await per batch, not two per packet as aiomysql's `_read_packet`.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from typing import Any

import aiomysql
import pymysql

from service.checkpoint import BinlogPosition, MariadbGtidPos, MysqlGtidSet
from service.errors import SourceError
from service.transport.connection import ServerInfo, fetch, map_errors
from service.transport.packets import DumpBuffer

__all__ = ["REPLICA_HOST", "BinlogStream", "encode_gtid_set"]

log = logging.getLogger(__name__)

COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E
BINLOG_THROUGH_GTID = 0x04
MARIA_SLAVE_CAPABILITY_GTID = 4
PAUSE_BYTES = 1 << 20  # stop reading the socket while this much is received and not taken
REPLICA_HOST = "binlog-mirror"  # the host this mirror registers with (SHOW SLAVE HOSTS / SHOW REPLICAS)


def encode_gtid_set(gtids: MysqlGtidSet) -> bytes:
    """MySQL's binary GTID set (Gtid_set::encode), as PREVIOUS_GTIDS carries it. Untagged:
    n_sids:8, then per uuid: uuid:16, n_intervals:8, (start:8, end_exclusive:8)*. When any entry has
    a tag (MySQL 8.3+): the first 8 bytes are format 1, n_sids:6, format 1, and each uuid is followed
    by its tag as a varlen length (one byte: tags are at most 32 characters) and the characters."""
    tagged = any(tag for (_, tag), _ in gtids.sets)
    n = len(gtids.sets)
    out = [struct.pack("<Q", (1 << 56) | (n << 8) | 1 if tagged else n)]
    for (sid, tag), intervals in gtids.sets:
        out.append(uuid.UUID(sid).bytes)
        if tagged:
            out.append(bytes([len(tag) << 1]) + tag.encode("ascii"))
        out.append(struct.pack("<Q", len(intervals)))
        out.extend(struct.pack("<QQ", lo, hi + 1) for lo, hi in intervals)
    return b"".join(out)


def _lenstr1(text: str) -> bytes:
    data = text.encode()[:255]
    return bytes([len(data)]) + data


class _DumpProtocol(asyncio.BufferedProtocol):
    """Receives the dump into a DumpBuffer and keeps the events until `take()`. Reading pauses
    while PAUSE_BYTES of events wait (TCP then pushes back on the server)."""

    def __init__(self, transport: asyncio.BaseTransport, buffer: DumpBuffer) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._previous = transport.get_protocol()
        self.buffer = buffer
        self._events: list[bytes] = []
        self._waiting = 0  # bytes of those events
        self._paused = False
        self._wakeup: asyncio.Future[None] | None = None
        self.lost: str | None = None  # why the connection ended, once it did
        self.failure: SourceError | None = None  # a corrupt stream, raised once its events are out

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer.get_buffer()

    def feed(self, data: bytes) -> None:
        """Bytes that arrived before this protocol took the socket over."""
        self._add(self.buffer.feed(data))

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self._add(self.buffer.buffer_updated(nbytes))
        except SourceError as exc:
            self.failure = exc
            self._transport.close()

    def _add(self, events: list[bytes]) -> None:
        if events:
            self._events += events
            self._waiting += sum(map(len, events))
            if self._waiting >= PAUSE_BYTES and not self._paused:
                self._paused = True
                self._transport.pause_reading()
        self._wake()  # partial events too: any byte proves the connection alive

    def eof_received(self) -> bool:
        self.lost = self.lost or "the source closed the connection"
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = self.lost or (repr(exc) if exc else "the source closed the connection")
        self._wake()
        self._previous.connection_lost(exc)  # aiomysql's: its writer's wait_closed() returns

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def take(self) -> list[bytes]:
        events, self._events, self._waiting = self._events, [], 0
        if self._paused:
            self._paused = False
            self._transport.resume_reading()
        return events

    async def wait(self) -> None:
        self._wakeup = asyncio.get_running_loop().create_future()
        try:
            await self._wakeup
        finally:
            self._wakeup = None


class BinlogStream:
    """One dump connection. `await read_batch()` returns the raw events (header + body +
    checksum) that arrived together, or None when a non-blocking dump reached the end.
    Reads time out after `read_timeout` seconds of silence (the server sends heartbeats every
    `heartbeat` seconds when idle)."""

    def __init__(self, conn: aiomysql.Connection, info: ServerInfo, *, read_timeout: float) -> None:
        self._conn = conn
        self._info = info
        self.read_timeout = read_timeout
        self._protocol: _DumpProtocol | None = None  # set by the dump command

    @property
    def thread_id(self) -> int:
        return int(self._conn.server_thread_id[0])

    async def prepare(self, *, heartbeat: float, server_id: int) -> None:
        """Session variables the dump thread reads: checksum, heartbeat, MariaDB capability."""
        statements = [
            "SET @master_binlog_checksum = @@global.binlog_checksum",
            f"SET @master_heartbeat_period = {int(heartbeat * 1e9)}",
        ]
        if self._info.mariadb:
            statements.append(f"SET @mariadb_slave_capability = {MARIA_SLAVE_CAPABILITY_GTID}")
        else:
            statements += [
                "SET @source_binlog_checksum = @@global.binlog_checksum",
                f"SET @source_heartbeat_period = {int(heartbeat * 1e9)}",
            ]
        for sql in statements:
            await fetch(self._conn, sql)
        await self._command(self._register_packet(server_id), "COM_REGISTER_SLAVE")
        await self._read_reply("COM_REGISTER_SLAVE")

    def _register_packet(self, server_id: int) -> bytes:
        return (
            struct.pack("<BI", COM_REGISTER_SLAVE, server_id)
            + _lenstr1(REPLICA_HOST)
            + _lenstr1("")
            + _lenstr1("")
            + struct.pack("<HII", 0, 0, 0)
        )

    async def dump_position(
        self, position: BinlogPosition, *, server_id: int, non_block: bool = False
    ) -> None:
        pos = min(position.pos, 0xFFFFFFFF)
        packet = (
            struct.pack("<BIHI", COM_BINLOG_DUMP, pos, int(non_block), server_id) + position.file.encode()
        )
        await self._dump(packet, "COM_BINLOG_DUMP")

    async def dump_gtid(
        self,
        gtids: MysqlGtidSet | MariadbGtidPos,
        *,
        server_id: int,
        non_block: bool = False,
        strict: bool = True,
    ) -> None:
        """`strict` (MariaDB): refuse a start GTID the binlog does not hold exactly. Off for a
        resume that names the GTID before the last applied one by its sequence number only
        (service/history.py checks the transaction that follows)."""
        if isinstance(gtids, MariadbGtidPos):
            # MariaDB: the GTID start point is a session variable; the dump names no file.
            await fetch(self._conn, "SET @slave_connect_state = %s", (str(gtids),))
            await fetch(self._conn, f"SET @slave_gtid_strict_mode = {int(strict)}")
            await fetch(self._conn, "SET @slave_gtid_ignore_duplicates = 0")
            await self.dump_position(BinlogPosition("", 4), server_id=server_id, non_block=non_block)
            return
        data = encode_gtid_set(gtids)
        packet = (
            struct.pack("<BHII", COM_BINLOG_DUMP_GTID, BINLOG_THROUGH_GTID | int(non_block), server_id, 0)
            + struct.pack("<Q", 4)
            + struct.pack("<I", len(data))
            + data
        )
        await self._dump(packet, "COM_BINLOG_DUMP_GTID")

    async def _dump(self, payload: bytes, what: str) -> None:
        """Send a dump command; from here on the socket is ours (`read_batch`), not aiomysql's."""
        await self._command(payload, what)
        reader, transport = self._conn._reader, self._conn._writer.transport
        buffer = DumpBuffer(next_seq=self._conn._next_seq_id)
        protocol = _DumpProtocol(transport, buffer)
        transport.set_protocol(protocol)
        if not transport.is_reading():  # aiomysql's reader pauses when its buffer fills up
            transport.resume_reading()
        early = bytes(reader._buffer)  # what arrived before the swap, in aiomysql's reader
        reader._buffer.clear()
        protocol.feed(early)
        if reader.at_eof() or reader.exception() is not None:
            protocol.lost = f"the source closed the connection ({reader.exception() or 'EOF'})"
        self._protocol = protocol

    async def _command(self, payload: bytes, what: str) -> None:
        with map_errors(what):
            self._conn._ensure_alive()
            self._conn._next_seq_id = 0
            self._conn.write_packet(payload)
            await self._conn._writer.drain()

    async def _read_reply(self, what: str) -> Any:
        with map_errors(what):
            async with asyncio.timeout(self.read_timeout):
                return await self._conn._read_packet()

    async def read_batch(self) -> list[bytes] | None:
        """The events received since the last call (at least one; heartbeats included), or None
        once a non-blocking dump reached the end. An ERR packet or a broken stream is raised
        after the events before it were returned."""
        protocol = self._protocol
        assert protocol is not None, "read_batch() before a dump command"
        buffer = protocol.buffer
        while True:
            events = protocol.take()
            if events:
                return events
            if buffer.error is not None:
                self._raise_error(buffer.error)
            if buffer.ended:
                return None
            if protocol.failure is not None:
                self.close()
                raise protocol.failure
            if protocol.lost is not None:
                self.close()
                raise SourceError(f"reading the binlog stream: {protocol.lost}")
            try:
                async with asyncio.timeout(self.read_timeout):
                    await protocol.wait()
            except TimeoutError:
                self.close()
                raise SourceError(
                    f"no event or heartbeat from the source for {self.read_timeout:.1f}s: "
                    "connection presumed dead"
                ) from None

    def _raise_error(self, payload: bytes) -> None:
        self.close()
        with map_errors("reading the binlog stream"):
            pymysql.err.raise_mysql_exception(payload)

    @property
    def connection(self) -> aiomysql.Connection:
        return self._conn

    def close(self) -> None:
        self._conn.close()
