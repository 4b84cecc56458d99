"""The app factory: `create_app(settings, replicator=None)`.

Two ways to run it:
  * inside `binlog-mirror run`: the run command owns the Replicator and passes it in, then
    serves the app in the same event loop with `api.server.serve(app, settings)`;
  * standalone, one worker: `uvicorn --factory api.main:create_app --workers 1`; with no
    replicator given, the lifespan builds one from the settings and owns its task
    (STYLE rule 10). More workers would mean more replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol, runtime_checkable

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

from api import dashboard, log_redaction
from api.auth import Scope, Verdict, decide, refusal
from api.broadcast import Broadcaster
from api.deps import StatusSource
from api.docs import add_offline_docs
from api.metrics import build_registry, register_pipeline_metrics
from api.routes import control, events, events_doc, health, lag, metrics, position, tables
from service.pipeline.status import ReplicatorStatus
from service.settings import Settings, load_settings
from service.transactions import Transaction
from service.version import version

__all__ = ["AppliedHook", "HookHost", "create_app"]

log = logging.getLogger(__name__)

AppliedHook = Callable[[Transaction, int], None]
STOP_TIMEOUT = 10.0  # seconds the lifespan waits for the replicator to stop before cancelling it


@runtime_checkable
class HookHost(Protocol):
    """A status source that calls its `on_applied` hooks after each apply (the Replicator)."""

    on_applied: list[AppliedHook]

    def status(self) -> ReplicatorStatus: ...


@runtime_checkable
class KeyedSource(Protocol):
    """Says which tables have no usable key: their rows never reach Redis nor the websocket."""

    def unkeyed(self, schema: str, table: str) -> bool: ...


class OwnedReplicator(HookHost, Protocol):
    async def run(self) -> None: ...

    def stop(self) -> None: ...


def create_app(
    settings: Settings | None = None,
    replicator: StatusSource | None = None,
    *,
    broadcaster: Broadcaster | None = None,
) -> FastAPI:
    """Build the API. Without `replicator`, the app's lifespan creates and runs one."""
    settings = settings if settings is not None else load_settings()
    hub = broadcaster or Broadcaster(
        buffer_size=settings.ws_buffer_events, queue_size=settings.ws_queue_events
    )
    app = FastAPI(
        title="binlog-mirror",
        summary="Status of the Redis mirror of a MySQL/MariaDB source, and a websocket of its changes.",
        version=version(),
        lifespan=_lifespan,
        docs_url=None,  # served by add_offline_docs: no CDN
        redoc_url=None,
    )
    add_offline_docs(app)
    app.state.settings = settings
    app.state.hub = hub
    app.state.status_source = replicator
    app.state.owns_replicator = replicator is None
    registry, apply_delay = build_registry(lambda: _status_or_none(app), hub, settings)
    app.state.registry = registry
    app.state.hooks = (hub.on_applied, apply_delay.on_applied)
    if isinstance(replicator, HookHost):
        _attach(replicator, app.state.hooks)
    if isinstance(replicator, KeyedSource):
        hub.unkeyed = replicator.unkeyed
    register_pipeline_metrics(registry, replicator)

    if settings.api_cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.api_cors_origins,
            allow_methods=["GET"],
            allow_headers=["Authorization"],
        )
    app.add_exception_handler(Exception, _internal_error)
    for module in (health, position, lag, tables, metrics, control, events, events_doc):
        app.include_router(module.router)
    app.include_router(dashboard.router)
    log_redaction.install()  # the dashboard sends its token as /ws/events?token=
    for scope in (Scope.READ, Scope.CONTROL):
        if decide(settings, scope, None) is Verdict.CLOSED:
            log.warning("API %s endpoints: %s", scope.value, refusal(settings, scope))
    return app


def _attach(replicator: HookHost, hooks: tuple[AppliedHook, ...]) -> None:
    for hook in hooks:
        if hook not in replicator.on_applied:
            replicator.on_applied.append(hook)


def _status_or_none(app: FastAPI) -> ReplicatorStatus | None:
    source: StatusSource | None = app.state.status_source
    return source.status() if source is not None else None


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal error"}, status_code=500)


def _build_replicator(settings: Settings) -> OwnedReplicator:
    from service.pipeline.replicator import Replicator  # the pipeline is optional for route tests

    replicator: OwnedReplicator = Replicator(settings)
    return replicator


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    task: asyncio.Task[None] | None = None
    replicator: OwnedReplicator | None = None
    if app.state.owns_replicator:
        replicator = _build_replicator(app.state.settings)
        _attach(replicator, app.state.hooks)
        if isinstance(replicator, KeyedSource):
            app.state.hub.unkeyed = replicator.unkeyed
        register_pipeline_metrics(app.state.registry, replicator)
        app.state.status_source = replicator
        task = asyncio.create_task(_run(replicator), name="replicator")
    try:
        yield
    finally:
        app.state.hub.close()  # websocket subscribers get 1001
        if replicator is not None and task is not None:
            replicator.stop()  # finishes the batch in flight, never half-applies
            try:
                async with asyncio.timeout(STOP_TIMEOUT):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def _run(replicator: OwnedReplicator) -> None:
    """Run the replicator; a failure stays visible in /health/ready instead of killing the API."""
    try:
        await replicator.run()
    except Exception:
        log.exception("replicator stopped with an error")
