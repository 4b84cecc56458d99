"""The local stack's processes: free ports, servers started detached (they outlive the CLI that
started them) and stopped by pid, and a Redis reached over a bare socket (no client library)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = [
    "CLUSTER_BUS_OFFSET",
    "alive",
    "free_ports",
    "redis_command",
    "redis_ping",
    "spawn_detached",
    "stop",
]

# Below Linux's ephemeral range (32768-60999 by default), so a port chosen here is not taken by
# some client connection's local end between now and a (re)start of the server.
PORT_RANGE = (20000, 32000)
# A cluster node also listens on its bus port, port + 10,000: both stay below the ephemeral range.
CLUSTER_BUS_OFFSET = 10000
CLUSTER_PORT_RANGE = (20000, 22700)


def free_ports(n: int, *, cluster: bool = False) -> list[int]:
    """n distinct free ports (`cluster`: each with its bus port free too). The sockets stay bound
    until all are chosen (bind(0) twice once gave MariaDB and Redis the same port)."""
    rng = random.SystemRandom()
    socks: list[socket.socket] = []
    chosen: list[int] = []
    try:
        while len(chosen) < n:
            port = rng.randrange(*(CLUSTER_PORT_RANGE if cluster else PORT_RANGE))
            wanted = [port, port + CLUSTER_BUS_OFFSET] if cluster else [port]
            bound = []
            for p in wanted:
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    s.close()
                    break
                bound.append(s)
            socks += bound
            if len(bound) == len(wanted):
                chosen.append(port)
        return chosen
    finally:
        for s in socks:
            s.close()


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return Path(f"/proc/{pid}").exists() and "zombie" not in proc_state(pid)
    return done == 0


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return ""


def spawn_detached(cmd: list[str], output: Path) -> int:
    """Start a server in its own session, not as our child: it outlives this process
    (the CLI exits after `stack up`) and is never a Popen object left running."""
    result = subprocess.run(
        ["sh", "-c", '"$@" </dev/null >>"$0" 2>&1 & echo $!', str(output), *cmd],
        capture_output=True,
        text=True,
        start_new_session=True,
        check=True,
    )
    return int(result.stdout.strip())


def redis_command(port: int, command: bytes) -> bytes:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(command)
            chunks = b""
            while True:
                chunk = s.recv(65536)
                chunks += chunk
                # A bulk reply: "$<len>\r\n<body>\r\n"; stop once the body is complete.
                if chunks.startswith(b"$"):
                    head, _, body = chunks.partition(b"\r\n")
                    if len(body) >= int(head[1:]) + 2:
                        return chunks
                elif chunks.endswith(b"\r\n") or not chunk:
                    return chunks
    except OSError:
        return b""


def redis_ping(port: int) -> bool:
    return redis_command(port, b"PING\r\n").startswith(b"+PONG")


def stop(pid: int | None, *, kill: bool, timeout: float = 30.0) -> None:
    if not alive(pid):
        return
    assert pid is not None
    try:
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.05)
