"""Serve the app with uvicorn inside an event loop someone else owns (`binlog-mirror run`).

`serve(app, settings)` installs no signal handlers: the caller decides when to stop, either by
cancelling the task that awaits `serve` (a graceful shutdown follows: listeners close,
websocket clients get a close frame, the app's lifespan ends) or with `ApiServer.request_exit()`.

uvicorn closes the websockets still open at shutdown with 1012, which this API defines as "the
sequence restarted: subscribe again without `after`". So `run` first calls `close_subscribers`:
every subscriber gets what was applied, then 1001 (going away), before uvicorn is asked to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI

from api.broadcast import Broadcaster
from service.errors import ConfigError
from service.settings import Settings

__all__ = ["ApiServer", "close_subscribers", "serve"]

GRACEFUL_SHUTDOWN_SECONDS = 5


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the run command owns SIGTERM/SIGINT


class ApiServer:
    """One uvicorn server for one app; `port` is the bound port once `started` is set."""

    def __init__(self, app: FastAPI, settings: Settings, sock: socket.socket | None = None) -> None:
        self.settings = settings
        self._sock = sock  # bound by the caller (service.startup.bind_api_socket), else uvicorn binds
        config = uvicorn.Config(
            app,
            host=settings.api_host,
            port=settings.api_port,
            lifespan="on",
            log_config=None,  # keep the process's logging setup
            access_log=False,
            ws_ping_interval=settings.ws_ping_seconds,
            ws_ping_timeout=settings.ws_ping_seconds,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
            proxy_headers=False,
            server_header=False,
        )
        self._server = _Server(config)
        self.started = asyncio.Event()

    @property
    def port(self) -> int:
        sockets = [s for server in getattr(self._server, "servers", []) for s in (server.sockets or ())]
        if not sockets:
            raise RuntimeError("server not started")
        return int(sockets[0].getsockname()[1])

    def request_exit(self) -> None:
        self._server.should_exit = True

    async def serve(self) -> None:
        """Run until `request_exit()` or cancellation; raise ConfigError if it cannot start."""
        task = asyncio.create_task(self._serve(), name="api-server")
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            self.request_exit()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(GRACEFUL_SHUTDOWN_SECONDS + 5):
                    await task
            if not task.done():
                task.cancel()
            raise

    async def _serve(self) -> None:
        watcher = asyncio.create_task(self._watch_started())
        try:
            await self._server.serve(sockets=[self._sock] if self._sock is not None else None)
        except SystemExit:  # uvicorn exits when it cannot bind or the lifespan fails to start
            host, port = self.settings.api_host, self.settings.api_port
            raise ConfigError(f"API server could not start on {host}:{port} (see the log above)") from None
        finally:
            watcher.cancel()

    async def _watch_started(self) -> None:
        while not self._server.started:
            await asyncio.sleep(0.02)
        self.started.set()


async def close_subscribers(hub: Broadcaster, timeout: float = GRACEFUL_SHUTDOWN_SECONDS) -> None:
    """End every websocket subscription with 1001 after the changes queued for it (the last
    applied ones included), and wait (at most `timeout`) until their handlers have closed."""
    hub.close()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while hub.subscribers:
                await asyncio.sleep(0.02)


async def serve(app: FastAPI, settings: Settings) -> None:
    """Serve `app` on settings.api_host:api_port until cancelled (no signal handlers)."""
    await ApiServer(app, settings).serve()
