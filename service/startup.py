"""Checks `binlog-mirror run` makes before it starts replicating.

An error only an operator can fix (a wrong password, a missing grant: `ReplicatorError.permanent`)
stops the process at startup with one line naming the setting. A server that does not answer yet
is logged with its redacted URL and the cause, and left to the replicator, which retries.
"""

from __future__ import annotations

import logging
import socket

from service.errors import ConfigError, SinkError, SourceError
from service.settings import Settings

__all__ = ["bind_api_socket", "check_access"]

log = logging.getLogger(__name__)


async def check_access(settings: Settings) -> None:
    """Connect once to MySQL and Redis; raise their permanent errors, log the others."""
    from service.sink.client import redis_client
    from service.sink.mirror import map_redis_errors
    from service.transport.connection import close_connection, connect

    if settings.mysql is not None:
        try:
            conn = await connect(settings)
        except SourceError as exc:
            if exc.permanent:
                raise
            log.warning("mysql at %s does not answer yet (%s); the replicator retries", settings.mysql, exc)
        else:
            await close_connection(conn)
    if settings.redis is not None:
        redis = redis_client(
            settings.redis.url.get_secret_value(), socket_timeout=5, socket_connect_timeout=5, cluster_ok=True
        )
        try:
            with map_redis_errors(f"connecting to {settings.redis}"):
                await redis.ping()
        except SinkError as exc:
            if exc.permanent:
                raise
            log.warning("redis at %s does not answer yet (%s); the replicator retries", settings.redis, exc)
        finally:
            await redis.aclose()


def bind_api_socket(settings: Settings) -> socket.socket:
    """The API's listening socket, bound now: a busy port stops the process with one line
    instead of uvicorn logging `[Errno 98]` while the mirror runs on without an API."""
    host, port = settings.api_host, settings.api_port
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family = infos[0][0]
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigError(
            f"api: cannot listen on {host}:{port}: {why} (check BINLOG_MIRROR_API_PORT / --api-port, "
            "BINLOG_MIRROR_API_HOST / --api-host)"
        ) from None
