"""WS /ws/events: applied row changes, filtered, in commit order, with sequence numbers.

Protocol (docs/api.md has the full text):
  1. connect; authenticate with `Authorization: Bearer <token>` or `?token=`;
  2. subscribe with query parameters (tables, ops, columns, after, stream) or, when none are
     given, with a first message `{"type": "subscribe", ...}` within SUBSCRIBE_TIMEOUT;
  3. the server answers `{"type": "subscribed", "stream", "last_seq", ...}`, then sends
     `change` and `gap` messages (with `batch`: `changes` messages, each carrying many `change`
     objects, and `gap` messages); a client may send `{"type": "ping"}` for a `pong`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import orjson
from fastapi import APIRouter, WebSocket
from pydantic import BaseModel, ConfigDict, ValidationError
from redis.exceptions import RedisError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from api.auth import Scope, Verdict, decide, refusal
from api.broadcast import Batch, Broadcaster, Closed, EventFilter, FilterError, Gap, Subscription
from api.changelog import changelog_prelude
from api.deps import STANDBY_REFUSAL, StatusSource
from service.pipeline.status import State
from service.settings import Settings
from service.transactions import TableFilter

__all__ = [
    "CLOSE_BAD_REQUEST",
    "CLOSE_FORBIDDEN",
    "CLOSE_INTERNAL",
    "CLOSE_STANDBY",
    "CLOSE_SUBSCRIBE_TIMEOUT",
    "CLOSE_UNAUTHORIZED",
    "CLOSE_UNKNOWN_TABLE",
    "SubscribeIn",
    "router",
]

log = logging.getLogger(__name__)

Send = Callable[[str], Awaitable[None]]

router = APIRouter(tags=["events"])

CLOSE_INTERNAL = 1011
CLOSE_BAD_REQUEST = 4400  # malformed subscribe message or filter
CLOSE_UNAUTHORIZED = 4401  # missing or wrong token
CLOSE_FORBIDDEN = 4403  # no token set and a non-loopback address: row changes are not served
CLOSE_UNKNOWN_TABLE = 4404  # an exact table name that is never mirrored
CLOSE_SUBSCRIBE_TIMEOUT = 4408  # no subscribe message in time
CLOSE_STANDBY = 4503  # a standby applies nothing: its subscribers would miss the leader's changes
SUBSCRIBE_TIMEOUT = 10.0
MAX_CLIENT_MESSAGE = 64 * 1024
MAX_PATTERNS = 1000
CLOSE_TIMEOUT = 10.0  # a dropped client gets this long to read what was buffered + the close
SUBSCRIBE_PARAMS = ("tables", "ops", "columns", "after", "stream", "batch")


class SubscribeIn(BaseModel):
    """The subscribe request, as a first JSON message or as query parameters."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["subscribe"] = "subscribe"
    tables: list[str] | str | None = None  # "schema.table" globs; list or comma-separated
    ops: list[str] | str | None = None  # insert | update | delete
    columns: list[str] | str | None = None  # projection of before/after
    after: int | None = None  # resume: send changes with seq > after
    stream: str | None = None  # the stream id the `after` came from
    batch: bool = False  # many changes per message (`changes`) instead of one (`change`)


class _Refused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


@router.websocket("/ws/events")
async def events(ws: WebSocket) -> None:
    settings: Settings = ws.app.state.settings
    hub: Broadcaster = ws.app.state.hub
    await ws.accept()
    verdict = decide(settings, Scope.READ, _presented_token(ws))
    if verdict is Verdict.CLOSED:
        await _close(ws, CLOSE_FORBIDDEN, refusal(settings, Scope.READ))
        return
    if verdict is not Verdict.ALLOWED:
        await _close(ws, CLOSE_UNAUTHORIZED, "missing or invalid token")
        return
    source: StatusSource | None = ws.app.state.status_source
    if source is not None and source.status().standby:
        await _close(ws, CLOSE_STANDBY, STANDBY_REFUSAL)
        return
    try:
        request = await _subscribe_request(ws)
        flt = _filter(request, settings, ws.app.state.status_source)
    except _Refused as refused:
        await _close(ws, refused.code, refused.reason)
        return
    except WebSocketDisconnect:
        return
    if hub.closed:
        await _close(ws, 1001, "server shutting down")
        return
    after, stream = request.after, request.stream
    try:  # ops (#26): a resume older than the ring reads the change log first
        prelude, logged_to = await changelog_prelude(settings, hub, flt, after)
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("change log not readable for a resume (%s); using the buffer only", exc)
        prelude, logged_to = [], after
    if prelude:
        after, stream = logged_to, None  # continuity shown by the log's own seq numbers
    sub = hub.subscribe(flt, after=after, stream=stream, prelude=prelude)
    try:
        await _serve(ws, hub, sub, request.batch, _warnings(flt, ws.app.state.status_source))
    finally:
        hub.unsubscribe(sub)


def _presented_token(ws: WebSocket) -> str | None:
    header = ws.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return ws.query_params.get("token")


async def _subscribe_request(ws: WebSocket) -> SubscribeIn:
    params = ws.query_params
    if any(name in params for name in SUBSCRIBE_PARAMS):
        raw: dict[str, Any] = {name: params[name] for name in SUBSCRIBE_PARAMS if name in params}
    else:
        try:
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT):
                message = await ws.receive()
        except TimeoutError:
            raise _Refused(
                CLOSE_SUBSCRIBE_TIMEOUT, f"no subscribe message within {SUBSCRIBE_TIMEOUT:g}s"
            ) from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        decoded = _json_message(message)
        if not isinstance(decoded, dict) or decoded.get("type", "subscribe") != "subscribe":
            raise _Refused(CLOSE_BAD_REQUEST, 'first message must be {"type": "subscribe", ...}')
        raw = decoded
    try:
        return SubscribeIn.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "message"
        raise _Refused(CLOSE_BAD_REQUEST, f"bad subscribe field '{where}': {err['msg']}") from None


def _json_message(message: Mapping[str, Any]) -> Any:
    data = message.get("text")
    if data is None:
        data = message.get("bytes") or b""
    if len(data) > MAX_CLIENT_MESSAGE:
        raise _Refused(CLOSE_BAD_REQUEST, f"message larger than {MAX_CLIENT_MESSAGE} bytes")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _Refused(CLOSE_BAD_REQUEST, "message is not valid JSON") from None


def _filter(request: SubscribeIn, settings: Settings, source: StatusSource | None) -> EventFilter:
    try:
        flt = EventFilter.parse(request.tables, request.ops, request.columns)
    except FilterError as exc:
        raise _Refused(CLOSE_BAD_REQUEST, str(exc)) from None
    if len(flt.tables) > MAX_PATTERNS:
        raise _Refused(CLOSE_BAD_REQUEST, f"more than {MAX_PATTERNS} table patterns")
    mirrored = TableFilter.from_lists(settings.tables, settings.exclude_tables)
    for schema, table in flt.exact_tables:
        if not mirrored.wants(schema, table):
            raise _Refused(
                CLOSE_UNKNOWN_TABLE, f"unknown table {schema}.{table}: not mirrored by this service"
            )
    status = source.status() if source is not None else None
    if status is not None and status.state in (State.STREAMING, State.RESYNCING):
        # once streaming, every selected table of the source is in the status (bootstrap, CREATE)
        known = {(t.schema, t.table) for t in status.tables}
        for schema, table in flt.exact_tables:
            if (schema, table) not in known:
                raise _Refused(CLOSE_UNKNOWN_TABLE, f"unknown table {schema}.{table}: not on the source")
    return flt


def _warnings(flt: EventFilter, source: StatusSource | None) -> list[str]:
    if source is None or not flt.exact_tables:
        return []
    seen = {(t.schema, t.table) for t in source.status().tables}
    return [f"no changes seen yet for {s}.{t}" for s, t in flt.exact_tables if (s, t) not in seen]


async def _serve(
    ws: WebSocket, hub: Broadcaster, sub: Subscription, batch: bool, warnings: list[str]
) -> None:
    lock = asyncio.Lock()  # the pump and the pong replies share the socket
    pacer = hub.pacer

    async def send(text: str) -> None:
        # Timed and paced: a send the socket's buffers accept never suspends, and subscribers
        # must not keep the event loop from the Replicator, the lease and the health checks.
        await pacer.wait()
        async with lock:
            took = await pacer.timed(ws.send({"type": "websocket.send", "text": text}))
        await pacer.charge(took)

    hello = {
        "type": "subscribed",
        "stream": hub.stream_id,
        "last_seq": hub.last_seq,
        "oldest_seq": hub.oldest_seq,
        "filter": sub.filter.describe(),
        "queue_size": sub.maxsize,
        "batch": batch,
        "warnings": warnings,
    }
    try:
        await send(orjson.dumps(hello).decode())
    except (WebSocketDisconnect, OSError, RuntimeError):
        return

    tasks = {
        asyncio.create_task(
            _pump_batches(sub, send) if batch else _pump_changes(sub, send), name=f"ws-pump-{sub.id}"
        ),
        asyncio.create_task(_listen(ws, send), name=f"ws-listen-{sub.id}"),
        asyncio.create_task(sub.wait_closed(), name=f"ws-closed-{sub.id}"),
    }
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    outcome = _outcome(done)
    if outcome is None:
        _log_failed_send(sub, done)
    if outcome is not None:
        await _close(ws, outcome.code, outcome.reason)


def _log_failed_send(sub: Subscription, done: set[asyncio.Task[Any]]) -> None:
    """Once per subscriber: the send or receive that found the client gone (the pump stops at
    the first failure, so a broken socket is never written again)."""
    for task in done:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.info("websocket subscriber %d gone: %r", sub.id, exc, extra={"subscriber": sub.id})
            return


def _outcome(done: set[asyncio.Task[Any]]) -> Closed | None:
    """How to close after the first task finished: None when the client is already gone."""
    for task in done:
        if task.cancelled():
            continue
        exc = task.exception()
        if isinstance(exc, _Refused):
            return Closed(exc.code, exc.reason)
        if exc is not None and not isinstance(exc, WebSocketDisconnect | OSError | RuntimeError):
            log.error("websocket task failed", exc_info=exc)
            return Closed(CLOSE_INTERNAL, "internal error")
        result = task.result() if exc is None else None
        if isinstance(result, Closed):
            return result
    return None


async def _pump_changes(sub: Subscription, send: Send) -> Closed:
    """One message per change (`change`) or gap."""
    columns = sub.filter.columns
    while True:
        item = await sub.get()
        if isinstance(item, Closed):
            return item
        await send(item.message() if isinstance(item, Gap) else item.message(columns))


async def _pump_batches(sub: Subscription, send: Send) -> Closed:
    """Everything queued for a filter in one burst as few `changes` messages, built once and
    shared by every subscriber with the same filter; gaps stay messages of their own."""
    while True:
        item = await sub.take()
        if isinstance(item, Closed):
            return item
        for text in item.messages() if isinstance(item, Batch) else [item.message()]:
            await send(text)


async def _listen(ws: WebSocket, send: Send) -> None:
    """Answer pings until the client goes away; anything else is a protocol error (4400)."""
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return
        decoded = _json_message(message)
        if isinstance(decoded, dict) and decoded.get("type") == "ping":
            await send(orjson.dumps({"type": "pong", "data": decoded.get("data")}).decode())
        else:
            raise _Refused(CLOSE_BAD_REQUEST, 'after subscribing, only {"type": "ping"} is accepted')


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    if ws.application_state != WebSocketState.CONNECTED or ws.client_state == WebSocketState.DISCONNECTED:
        return
    with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError, TimeoutError):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await ws.close(code=code, reason=reason.encode()[:120].decode(errors="ignore"))
