"""GET /ws/events: the websocket's entry in the OpenAPI document (OpenAPI has no websocket
operation), and the answer a plain HTTP request gets: 426, upgrade to a websocket."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse

from api.schemas import DetailOut

__all__ = ["router"]

router = APIRouter(tags=["events"])

DESCRIPTION = """\
**A websocket** (connect with `ws://` / `wss://`; a plain HTTP request gets 426). It streams the
row changes applied to Redis, in commit order, each with a sequence number `seq`.

1. Authenticate with `Authorization: Bearer <token>` or `?token=` (when `api_token` is set).
2. Subscribe with the query parameters below, or, with none of them, a first message
   `{"type": "subscribe", "tables": [...], "ops": [...], "columns": [...], "after": N, "stream": "...",
   "batch": false}` within 10 s.
3. The server answers `{"type": "subscribed", "stream", "last_seq", "oldest_seq", "filter",
   "queue_size", "batch", "warnings"}`, then sends `change` (or, with `batch`, `changes`) and `gap`
   messages; `{"type": "ping"}` gets a `pong`.

Close codes: 1001 server shutting down (after every applied change was sent; resume with
`after`), 1012 stream restarted (subscribe again without `after`), 1013 subscriber lagging, 4400
bad request, 4401 missing or invalid token, 4404 unknown table, 4408 no subscribe message in time.
docs/api.md has the whole protocol.
"""


@router.get(
    "/ws/events",
    summary="WebSocket: applied row changes (subscribe, then change/gap messages)",
    description=DESCRIPTION,
    status_code=status.HTTP_426_UPGRADE_REQUIRED,
    responses={
        101: {"description": "Switching Protocols: the websocket is open."},
        426: {"model": DetailOut, "description": "A plain HTTP request: connect with a websocket client."},
    },
)
async def events_http(
    tables: Annotated[str | None, Query(description="schema.table globs, comma-separated")] = None,
    ops: Annotated[str | None, Query(description="insert,update,delete")] = None,
    columns: Annotated[str | None, Query(description="keep only these columns")] = None,
    after: Annotated[int | None, Query(description="resume: changes with seq > after first")] = None,
    stream: Annotated[str | None, Query(description="the stream id `after` came from")] = None,
    batch: Annotated[bool, Query(description="many changes per message")] = False,
    token: Annotated[str | None, Query(description="the API token, if not sent as a header")] = None,
) -> JSONResponse:
    return JSONResponse(
        {"detail": "this is a websocket: connect with ws:// (Upgrade: websocket)"},
        status_code=status.HTTP_426_UPGRADE_REQUIRED,
        headers={"Upgrade": "websocket", "Connection": "Upgrade"},
    )
