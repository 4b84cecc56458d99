"""Liveness (the process answers) and readiness (the mirror is usable).

Neither needs the API token, so orchestrator probes (Kubernetes, compose, a Docker HEALTHCHECK)
work with one set: they answer with a state and reasons only, never rows, positions or URLs.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, status
from fastapi.responses import JSONResponse
from starlette.requests import Request

from api.deps import SettingsDep, StatusSource
from api.schemas import LiveOut, ReadyOut
from service.pipeline.status import ReplicatorStatus, State

__all__ = ["readiness", "router"]

router = APIRouter(prefix="/health", tags=["health"])

SILENT_HEARTBEATS = 2  # heartbeat periods without a packet that make the stream count as silent


@router.get("/live", response_model=LiveOut, summary="The process is up and its event loop answers")
async def live() -> LiveOut:
    return LiveOut()


def readiness(s: ReplicatorStatus, max_lag: float, heartbeat: float | None = None) -> list[str]:
    """Every reason the mirror should not take traffic; [] when ready. With `heartbeat` (the
    source's heartbeat period), a stream silent for more than SILENT_HEARTBEATS periods is one:
    the source or the path to it went quiet, whatever the connection's state says."""
    reasons: list[str] = []
    if s.state not in (State.STREAMING, State.RESYNCING):
        reasons.append(f"replicator is {s.state.value}")
    if s.paused:
        reasons.append("applying is paused (POST /control/resume or `binlog-mirror ctl resume`)")
    if s.state is State.FAILED and s.errors.last:
        reasons.append(f"failed: {s.errors.last}")  # retried with backoff; the error says what to fix
    if not s.source.connected:
        reasons.append("binlog stream not connected")
    elif heartbeat is not None and s.last_packet_at is not None:
        silent = time.time() - s.last_packet_at
        if silent > SILENT_HEARTBEATS * heartbeat:
            reasons.append(f"no event or heartbeat from the source for {silent:.1f}s")
    if not s.redis_reachable:
        reasons.append("redis unreachable")
    if not s.leader:
        reasons.append("not the writer (another instance holds the lease)")
    if s.lag_seconds is None:
        reasons.append("lag unknown (nothing applied yet)")
    elif s.lag_seconds > max_lag:
        reasons.append(f"lag {s.lag_seconds:.1f}s above max_lag_seconds {max_lag:g}s")
    return reasons


@router.get(
    "/ready",
    response_model=ReadyOut,
    summary="Stream connected, Redis reachable, lag under max_lag_seconds",
    responses={503: {"model": ReadyOut, "description": "Not ready; `reasons` says why."}},
)
async def ready(request: Request, settings: SettingsDep) -> ReadyOut | JSONResponse:
    source: StatusSource | None = request.app.state.status_source
    if source is None:
        body = ReadyOut(
            ready=False,
            state=State.STARTING,
            reasons=["replicator not started"],
            lag_seconds=None,
            max_lag_seconds=settings.max_lag_seconds,
        )
    else:
        s = source.status()
        reasons = readiness(s, settings.max_lag_seconds, settings.heartbeat_seconds)
        body = ReadyOut(
            ready=not reasons,
            state=s.state,
            reasons=reasons,
            lag_seconds=s.lag_seconds,
            max_lag_seconds=settings.max_lag_seconds,
        )
    if body.ready:
        return body
    return JSONResponse(body.model_dump(mode="json"), status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
