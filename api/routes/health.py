"""Liveness (the process answers), readiness (it may take traffic) and leadership (it writes).

None needs the API token, so orchestrator probes (Kubernetes, compose, a Docker HEALTHCHECK)
work with one set: they answer with a state, a role and reasons only, never rows, positions or
URLs. What counts as ready is decided in api/readiness.py.
"""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.responses import JSONResponse
from starlette.requests import Request

from api.deps import SettingsDep, StatusSource
from api.readiness import readiness, role
from api.schemas import LeaderOut, LiveOut, ReadyOut
from service.pipeline.status import State

__all__ = ["router"]

router = APIRouter(prefix="/health", tags=["health"])


@router.get("/live", response_model=LiveOut, summary="The process is up and its event loop answers")
async def live() -> LiveOut:
    return LiveOut()


def _unavailable(body: ReadyOut | LeaderOut) -> JSONResponse:
    return JSONResponse(body.model_dump(mode="json"), status_code=status.HTTP_503_SERVICE_UNAVAILABLE)


@router.get(
    "/ready",
    response_model=ReadyOut,
    summary="The leader streams, or a standby waits with Redis reachable (lag is no reason)",
    responses={503: {"model": ReadyOut, "description": "Not ready; `reasons` says why."}},
)
async def ready(request: Request, settings: SettingsDep) -> ReadyOut | JSONResponse:
    source: StatusSource | None = request.app.state.status_source
    if source is None:
        body = ReadyOut(
            ready=False,
            state=State.STARTING,
            role="starting",
            reasons=["replicator not started"],
            lag_seconds=None,
            max_lag_seconds=settings.max_lag_seconds,
        )
    else:
        s = source.status()
        reasons = readiness(s, settings.heartbeat_seconds)
        body = ReadyOut(
            ready=not reasons,
            state=s.state,
            role=role(s),
            reasons=reasons,
            lag_seconds=s.lag_seconds,
            max_lag_seconds=settings.max_lag_seconds,
        )
    return body if body.ready else _unavailable(body)


@router.get(
    "/leader",
    response_model=LeaderOut,
    summary="200 on the instance holding the writer lease, 503 on a standby",
    responses={503: {"model": LeaderOut, "description": "Not the writer (a standby, or starting)."}},
)
async def leader(request: Request) -> LeaderOut | JSONResponse:
    source: StatusSource | None = request.app.state.status_source
    if source is None:
        return _unavailable(LeaderOut(leader=False, role="starting", state=State.STARTING))
    s = source.status()
    body = LeaderOut(leader=s.leader, role=role(s), state=s.state)
    return body if body.leader else _unavailable(body)
