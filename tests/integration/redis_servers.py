"""redis-servers (and sentinels) of a test's own, configured as production would be: TLS with
client certificates, a replica, a sentinel. Each runs in a temp dir and is stopped at the end."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis as redis_sync

from service.devtools.processes import free_ports

START_TIMEOUT = 20.0


@dataclass
class Server:
    """One redis-server (or sentinel) process and how to reach it."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    client_options: dict[str, Any]

    def client(self, **options: Any) -> redis_sync.Redis:
        return redis_sync.Redis(host="127.0.0.1", port=self.port, **{**self.client_options, **options})

    def stop(self, kill: bool = False) -> None:
        if self.process.poll() is None:
            self.process.kill() if kill else self.process.terminate()
            self.process.wait(timeout=30)


def free_port() -> int:
    return free_ports(1)[0]


def start_server(
    directory: Path, lines: list[str], *, port: int | None = None, sentinel: bool = False,
    tls: dict[str, Any] | None = None,
) -> Server:  # fmt: skip
    """A redis-server (`sentinel`: in sentinel mode) with `lines` added to its config; returns once
    it answers PING (over TLS when `tls` gives the client's ssl_* options)."""
    port = port or free_port()
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / ("sentinel.conf" if sentinel else "redis.conf")
    head = ["bind 127.0.0.1", f"dir {directory}", f"logfile {directory / 'redis.log'}", "daemonize no"]
    head.append(f"tls-port {port}\nport 0" if tls else f"port {port}")
    conf.write_text("\n".join([*head, *lines, ""]))
    cmd = ["redis-server", str(conf), *(["--sentinel"] if sentinel else [])]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    options = {"ssl": True, **tls} if tls else {}
    server = Server(port, directory, process, options)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited; see {directory / 'redis.log'}")
        with contextlib.suppress(redis_sync.RedisError), server.client(socket_timeout=1) as r:
            if r.ping():
                return server
        time.sleep(0.05)
    server.stop(kill=True)
    raise RuntimeError(f"redis-server did not answer on port {port}")


@contextlib.contextmanager
def servers() -> Iterator[list[Server]]:
    """Collects the servers a test starts; stops every one of them at the end."""
    started: list[Server] = []
    try:
        yield started
    finally:
        for server in started:
            server.stop(kill=True)
