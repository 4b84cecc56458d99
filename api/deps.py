"""Dependencies as `Annotated` aliases over `HTTPConnection.app.state` (HTTP and websockets alike).

`app.state` holds, set once by `create_app`:
    settings        Settings
    status_source   StatusSource | None   (the Replicator, or anything with `status()`)
    hub             Broadcaster
    registry        prometheus CollectorRegistry
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any, Protocol

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry
from starlette.requests import HTTPConnection

from api.broadcast import Broadcaster
from api.schemas import DetailOut
from service.pipeline.status import ReplicatorStatus
from service.settings import Settings

__all__ = [
    "AUTH_RESPONSES",
    "STANDBY_REFUSAL",
    "STATUS_RESPONSES",
    "AuthDep",
    "HubDep",
    "RegistryDep",
    "SettingsDep",
    "StatusDep",
    "StatusSource",
    "get_status",
    "token_ok",
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


# Why a standby refuses what only the writer can do (control) or see (the applied changes).
STANDBY_REFUSAL = (
    "this instance is a standby: another instance holds the writer lease; "
    "send this to the leader (GET /health/leader answers 200 there)"
)

SettingsDep = Annotated[Settings, Depends(get_settings)]
HubDep = Annotated[Broadcaster, Depends(get_hub)]
RegistryDep = Annotated[CollectorRegistry, Depends(get_registry)]
StatusDep = Annotated[ReplicatorStatus, Depends(get_status)]

_bearer = HTTPBearer(auto_error=False, description="settings.api_token, when set")


def token_ok(settings: Settings, presented: str | None) -> bool:
    """True when no token is configured, or `presented` equals it (constant-time)."""
    if settings.api_token is None:
        return True
    if not presented:
        return False
    return hmac.compare_digest(presented.encode(), settings.api_token.get_secret_value().encode())


def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    if settings.api_token is None:
        return
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing bearer token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if credentials.scheme.lower() != "bearer" or not token_ok(settings, credentials.credentials):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="invalid bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )


AuthDep = Depends(require_token)

# OpenAPI `responses` for routers behind the token / reading the status snapshot.
AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": DetailOut, "description": "Missing or invalid bearer token (when api_token is set)."}
}
STATUS_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    503: {"model": DetailOut, "description": "The replicator has not started yet."},
}
