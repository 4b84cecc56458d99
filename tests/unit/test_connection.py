"""Connecting to a source that accepts and never greets (a MariaDB stuck in its accept queue, or
a port that is not MySQL): a real TCP listener that reads and answers nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from service.errors import SourceError
from service.settings import Settings
from service.transport import connection


class SilentSource:
    def __init__(self) -> None:
        self.accepted = asyncio.Event()
        self.closed = asyncio.Event()  # the client closed its end

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.set()
        await reader.read()  # b"" at EOF
        self.closed.set()
        writer.close()


@pytest.fixture
async def silent() -> AsyncIterator[tuple[SilentSource, Settings]]:
    source = SilentSource()
    server = await asyncio.start_server(source.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield source, Settings(mysql=f"mysql://u:p@127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()


async def test_no_greeting_within_the_connect_timeout_is_a_source_error(
    silent: tuple[SilentSource, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, settings = silent
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT", 0.3)
    with pytest.raises(SourceError, match=r"connecting to .*: no answer within 0.3 s"):
        await connection.connect(settings)
    await asyncio.wait_for(source.closed.wait(), 5)  # and its socket is closed


async def test_a_connect_cancelled_during_the_handshake_stops_and_closes_its_socket(
    silent: tuple[SilentSource, Settings],
) -> None:
    source, settings = silent
    attempt = asyncio.create_task(connection.connect(settings))
    await asyncio.wait_for(source.accepted.wait(), 5)
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    await asyncio.wait_for(source.closed.wait(), 5)
