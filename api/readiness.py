"""Readiness and role, read from a status snapshot: what `/health/ready`, `/health/leader` and the
`binlog_mirror_ready` metric answer, decided in one place.

Kubernetes semantics: Ready means "this pod may take API traffic and does its job", so a healthy
standby (Redis reachable, waiting for the lease another instance holds) is Ready too; a rollout
of a leader and a standby then completes. Which pod writes is `/health/leader` and the `leader`
metric. Lag is no reason to leave the Service (the API is needed most while the mirror catches
up): it is the `lag_seconds` metric and the BinlogMirrorLagHigh alert.
"""

from __future__ import annotations

import time
from typing import Literal

from service.pipeline.status import ReplicatorStatus, State

__all__ = ["SILENT_HEARTBEATS", "Role", "readiness", "role"]

SILENT_HEARTBEATS = 2  # heartbeat periods without a packet that make the stream count as silent

Role = Literal["leader", "standby", "starting"]


def role(s: ReplicatorStatus) -> Role:
    """`leader`: holds the writer lease; `standby`: another instance holds it; `starting`: neither
    yet (Redis not reached, or the lease not tried)."""
    if s.leader:
        return "leader"
    return "standby" if s.standby else "starting"


def readiness(s: ReplicatorStatus, heartbeat: float | None = None) -> list[str]:
    """Every reason this instance should not take traffic; [] when ready. With `heartbeat` (the
    source's heartbeat period), a leader's stream silent for more than SILENT_HEARTBEATS periods is
    one: the source or the path to it went quiet, whatever the connection's state says."""
    reasons: list[str] = []
    current = role(s)
    leader = current == "leader"  # a standby streams nothing: its source and pause do not apply
    if s.state in (State.FAILED, State.STOPPED) or (
        leader and s.state not in (State.STREAMING, State.RESYNCING)
    ):
        reasons.append(f"replicator is {s.state.value}")
    if leader and s.paused:
        reasons.append("applying is paused (POST /control/resume or `binlog-mirror ctl resume`)")
    if s.state is State.FAILED and s.errors.last:
        reasons.append(f"failed: {s.errors.last}")  # retried with backoff; the error says what to fix
    if leader and not s.source.connected:
        reasons.append("binlog stream not connected")
    elif leader and heartbeat is not None and s.last_packet_at is not None:
        silent = time.time() - s.last_packet_at
        if silent > SILENT_HEARTBEATS * heartbeat:
            reasons.append(f"no event or heartbeat from the source for {silent:.1f}s")
    if not s.redis_reachable:
        reasons.append("redis unreachable")
    if current == "starting":
        reasons.append("waiting to take the writer lease or to see another instance hold it")
    return reasons
