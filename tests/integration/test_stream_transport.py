"""The packet layer: aiomysql private API still there, >16 MB events, and parity with
python-mysql-replication on the same workload."""

from __future__ import annotations

import asyncio
import inspect

import aiomysql
import pytest
from stream_helpers import (
    admin,
    changes_of,
    collect,
    expected_changes,
    make_tables,
    peer_changes,
    run_sql,
    settings_for,
    unique_db,
    workload,
)

from service.binlog import BinlogDecoder
from service.binlog.constants import EventType
from service.binlog.events import HeartbeatEvent
from service.checkpoint import BinlogPosition, Checkpoint
from service.devtools.stack import LocalStack
from service.errors import SourceError
from service.transactions import TableFilter
from service.transport.connection import close_connection, connect, current_checkpoint, server_info
from service.transport.source import BinlogSource
from service.transport.stream import BinlogStream

pytestmark = pytest.mark.integration


def test_aiomysql_private_packet_api_still_exists() -> None:
    """service/transport/stream.py relies on these; an aiomysql upgrade must keep them."""
    conn = aiomysql.Connection
    assert inspect.iscoroutinefunction(conn._read_packet)
    assert callable(conn.write_packet) and callable(conn._write_bytes) and callable(conn._ensure_alive)
    source = inspect.getsource(conn)
    for name in ("self._next_seq_id", "self._reader", "self._writer", "self.server_thread_id"):
        assert name in source, name
    assert aiomysql.__version__.startswith("0.3.")


async def test_event_larger_than_16mb(stack: LocalStack) -> None:
    db = unique_db("st_big")
    run_sql(stack, [f"CREATE DATABASE {db}", f"CREATE TABLE {db}.blobs (id INT PRIMARY KEY, b LONGBLOB)"])
    big = 17 * 1024 * 1024 + 123  # one rows event of > 16 MB - 1: two protocol packets
    source = BinlogSource(settings_for(stack), "now", table_filter=TableFilter((f"{db}.*",)))
    async with source:
        run_sql(stack, [f"INSERT INTO {db}.blobs VALUES (1, REPEAT('x', {big})), (2, 'small')"])
        txns = await collect(source, db, 2, timeout=60)
    after = [c.after for t in txns for c in t.changes]
    assert after[0] is not None and after[0]["b"] == b"x" * big
    assert after[1] == {"id": 2, "b": b"small"}
    assert source.stats.bytes > big


async def test_same_changes_as_python_mysql_replication(stack: LocalStack) -> None:
    db = unique_db("st_peer")
    run_sql(stack, make_tables(db))
    with admin(stack) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    assert row is not None
    start = Checkpoint(BinlogPosition(row[0], row[1]))
    run_sql(stack, workload(db, 0, 15, rotate_every=7))
    run_sql(stack, [f"UPDATE {db}.items SET name = NULL, qty = -qty WHERE id % 2 = 0"])
    run_sql(stack, [f"DELETE FROM {db}.items WHERE id > 10"])
    settings = settings_for(stack)
    theirs = await asyncio.to_thread(peer_changes, stack, start, db, settings.server_id + 1)
    assert len(theirs) == 30 + 5 + 2  # workload, 5 updates, 2 deletes
    async with BinlogSource(settings, start, table_filter=TableFilter((f"{db}.*",))) as source:
        ours = changes_of(await collect(source, db, len(theirs)), db)
    assert ours == theirs


async def test_tls_verified_required_and_refused(stack: LocalStack) -> None:
    """The stack's MariaDB serves TLS with its own throwaway CA. A user created with REQUIRE SSL
    streams over verified TLS; without TLS, or when the server's certificate does not verify,
    the start fails with a SourceError; `mysql_ssl_verify=false` keeps TLS without the checks."""
    info = stack.load()
    assert info is not None
    db = unique_db("st_tls")
    run_sql(stack, make_tables(db))
    run_sql(
        stack,
        [
            "CREATE USER 'tls_only'@'127.0.0.1' IDENTIFIED BY 'tls-pw' REQUIRE SSL",
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT ON *.* "
            "TO 'tls_only'@'127.0.0.1'",
        ],
    )
    url = f"mysql://tls_only:tls-pw@127.0.0.1:{info.mysql_port}"
    with pytest.raises(SourceError, match="Access denied"):
        await BinlogSource(settings_for(stack, url), "now").start()
    with pytest.raises(SourceError, match="CERTIFICATE_VERIFY_FAILED"):  # system CAs do not know ours
        await BinlogSource(settings_for(stack, url, mysql_ssl=True), "now").start()

    verified, unverified = (
        {"mysql_ssl_ca": stack.tls_dir / "ca.pem"},
        {"mysql_ssl": True, "mysql_ssl_verify": False},
    )
    for first, tls in ((0, verified), (3, unverified)):
        source = BinlogSource(settings_for(stack, url, **tls), "now", table_filter=TableFilter((f"{db}.*",)))
        async with source:
            ctl = await source._control()
            async with ctl.cursor() as cur:
                await cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                row = await cur.fetchone()
            assert row is not None and row[1], tls  # the side connection is encrypted too
            run_sql(stack, workload(db, first, 3))
            got = await collect(source, db, len(expected_changes(db, first, 3)))
        assert changes_of(got, db) == expected_changes(db, first, 3)


async def test_heartbeat_from_the_server_decodes(stack: LocalStack) -> None:
    """HEARTBEAT events as the local MariaDB sends them to an idle replica (real bytes, which no
    binlog file holds): each names the file and offset the dump is at, and its CRC32 checks.
    (HEARTBEAT_V2 is MySQL 8.0.26+ only: no server here sends it.)"""
    settings = settings_for(stack)
    ctl = await connect(settings)
    try:
        info = await server_info(ctl)
        at = (await current_checkpoint(ctl, info)).position
    finally:
        await close_connection(ctl)
    stream = BinlogStream(await connect(settings), info, read_timeout=10)
    decoder = BinlogDecoder(file=at.file)
    heartbeats: list[HeartbeatEvent] = []
    try:
        await stream.prepare(heartbeat=0.2, server_id=settings.server_id)
        await stream.dump_position(at, server_id=settings.server_id)
        while len(heartbeats) < 2:
            for raw in await stream.read_batch() or []:
                event = decoder.feed(raw)  # fake ROTATE, FORMAT_DESCRIPTION, then heartbeats
                if isinstance(event, HeartbeatEvent):
                    assert raw[4] == EventType.HEARTBEAT
                    heartbeats.append(event)
    finally:
        stream.close()
    for hb in heartbeats:
        assert (hb.log_file, hb.log_pos) == (at.file, at.pos)
        # header (19) + file name + CRC32; MariaDB stamps no time on a heartbeat
        assert hb.header.event_size == 19 + len(at.file) + 4 and hb.header.timestamp == 0
