"""Dependencies as `Annotated` aliases over `HTTPConnection.app.state` (HTTP and websockets alike).

`app.state` holds, set once by `create_app`:
    settings        Settings
    status_source   StatusSource | None   (the Replicator, or anything with `status()`; with an
                                          async `counted_status()` too, /tables shows the shaped
                                          tables' index entry counts)
    hub             Broadcaster
    registry        prometheus CollectorRegistry
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry
from starlette.requests import HTTPConnection

from api.auth import READ_ONLY_REFUSAL, Scope, Verdict, decide, refusal
from api.broadcast import Broadcaster
from api.schemas import DetailOut
from service.pipeline.status import ReplicatorStatus
from service.settings import Settings

__all__ = [
    "AUTH_RESPONSES",
    "STANDBY_REFUSAL",
    "STATUS_RESPONSES",
    "AuthDep",
    "CountedStatusDep",
    "ControlAuthDep",
    "HubDep",
    "MetricsAuthDep",
    "RegistryDep",
    "SettingsDep",
    "StatusDep",
    "StatusSource",
    "get_status",
]


class StatusSource(Protocol):
    """What the API reads: the Replicator (or a stand-in) returning a fresh snapshot."""

    def status(self) -> ReplicatorStatus: ...


def get_settings(conn: HTTPConnection) -> Settings:
    settings: Settings = conn.app.state.settings
    return settings


def get_hub(conn: HTTPConnection) -> Broadcaster:
    hub: Broadcaster = conn.app.state.hub
    return hub


def get_registry(conn: HTTPConnection) -> CollectorRegistry:
    registry: CollectorRegistry = conn.app.state.registry
    return registry


def get_status(conn: HTTPConnection) -> ReplicatorStatus:
    source: StatusSource | None = conn.app.state.status_source
    if source is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail="replicator not started")
    return source.status()


async def get_counted_status(conn: HTTPConnection) -> ReplicatorStatus:
    """The status with the shaped tables' row copies and index entries counted (read from Redis),
    when the source can count them (the Replicator); else as `get_status`."""
    source = conn.app.state.status_source
    counted = getattr(source, "counted_status", None)
    if counted is None:
        return get_status(conn)
    s: ReplicatorStatus = await counted()
    return s


# Why a standby refuses what only the writer can do (control) or see (the applied changes).
STANDBY_REFUSAL = (
    "this instance is a standby: another instance holds the writer lease; "
    "send this to the leader (GET /health/leader answers 200 there)"
)

SettingsDep = Annotated[Settings, Depends(get_settings)]
HubDep = Annotated[Broadcaster, Depends(get_hub)]
RegistryDep = Annotated[CollectorRegistry, Depends(get_registry)]
StatusDep = Annotated[ReplicatorStatus, Depends(get_status)]
CountedStatusDep = Annotated[ReplicatorStatus, Depends(get_counted_status)]

_bearer = HTTPBearer(auto_error=False, description="settings.api_token or api_read_token, when set")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _require(scope: Scope) -> Callable[[Settings, HTTPAuthorizationCredentials | None], None]:
    """A dependency that lets a request through for `scope` (api/auth.py), else 401 or 403."""

    def check(settings: SettingsDep, credentials: BearerDep) -> None:
        bearer = credentials is not None and credentials.scheme.lower() == "bearer"
        verdict = decide(settings, scope, credentials.credentials if credentials and bearer else None)
        if verdict is Verdict.ALLOWED:
            return
        if verdict is Verdict.CLOSED:
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail=refusal(settings, scope))
        if verdict is Verdict.READ_ONLY:
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail=READ_ONLY_REFUSAL)
        detail = "invalid bearer token"
        if credentials is None:
            detail = "missing bearer token (Authorization: Bearer <token>)"
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
        )

    return check


AuthDep = Depends(_require(Scope.READ))  # status and data reads: the read token or the control token
ControlAuthDep = Depends(_require(Scope.CONTROL))  # what changes the mirror: the control token only
MetricsAuthDep = Depends(_require(Scope.METRICS))  # like AuthDep, but open while no token is set

# OpenAPI `responses` for routers behind the token / reading the status snapshot.
AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": DetailOut, "description": "Missing or invalid bearer token (when a token is set)."},
    403: {
        "model": DetailOut,
        "description": "No token is set and the API listens on a non-loopback address, or the "
        "read token was sent to a control endpoint (api/auth.py).",
    },
}
STATUS_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    503: {"model": DetailOut, "description": "The replicator has not started yet."},
}
