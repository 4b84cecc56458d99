"""The live dashboard: `GET /` serves one page that polls the JSON endpoints and reads the websocket.

The page and its two assets ship inside the package (`api/static/dashboard/`, package-data):
no build step, no CDN, so it works on a closed network. The page itself holds no data and needs
no token; every figure comes from the authenticated endpoints (`/position`, `/lag`, `/tables`,
`/health/ready`, `/ws/events`) plus `GET /dashboard/info`, which adds the few facts no other
JSON endpoint gives: the writer-lease role, the redacted Redis URL and every resync in flight.
A Content-Security-Policy limits the page to its own origin.
"""

from __future__ import annotations

import datetime as dt
import functools
from importlib import resources

from fastapi import APIRouter, HTTPException, Response, status
from pydantic import BaseModel, Field

from api.deps import STATUS_RESPONSES, AuthDep, SettingsDep, StatusDep
from api.schemas import ResyncOut

__all__ = ["DashboardInfoOut", "TableResyncOut", "router"]

router = APIRouter(tags=["dashboard"])

_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
# 'self' covers same-origin ws:/wss: in CSP level 3 (every current browser).
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.cache
def _asset(name: str) -> bytes:
    return resources.files("api").joinpath("static", "dashboard", name).read_bytes()


def _serve(name: str) -> Response:
    return Response(_asset(name), media_type=_TYPES[name], headers=_HEADERS)


@router.get("/", include_in_schema=False)
def index() -> Response:
    return _serve("index.html")


@router.get("/dashboard/static/{name}", include_in_schema=False)
def asset(name: str) -> Response:
    if name == "index.html" or name not in _TYPES:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no dashboard asset {name}")
    return _serve(name)


class TableResyncOut(BaseModel):
    schema_: str = Field(alias="schema", serialization_alias="schema")
    table: str
    resync: ResyncOut

    model_config = {"populate_by_name": True}


class DashboardInfoOut(BaseModel):
    leader: bool = Field(description="This instance holds the writer lease; false: standby.")
    redis_url: str | None = Field(description="The Redis URL with its password redacted.")
    redis_reachable: bool
    state_since: dt.datetime = Field(description="When the replicator entered its current state.")
    resyncs: list[TableResyncOut] = Field(description="Tables being re-read after a DDL, with progress.")


@router.get(
    "/dashboard/info",
    response_model=DashboardInfoOut,
    summary="Lease role, redacted Redis URL and resyncs in flight (for the dashboard)",
    dependencies=[AuthDep],
    responses=STATUS_RESPONSES,
)
async def info(s: StatusDep, settings: SettingsDep) -> DashboardInfoOut:
    return DashboardInfoOut(
        leader=s.leader,
        redis_url=settings.redis.redacted() if settings.redis else None,
        redis_reachable=s.redis_reachable,
        state_since=dt.datetime.fromtimestamp(s.since, tz=dt.UTC),
        resyncs=[
            TableResyncOut(schema=t.schema, table=t.table, resync=ResyncOut.from_domain(t.resync))
            for t in s.tables
            if t.resync is not None
        ],
    )
