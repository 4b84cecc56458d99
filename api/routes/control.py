"""POST /control/...: pause/resume applying and copy one table again (behind the token).

The same actions as `binlog-mirror ctl pause|resume|resync`. They need the replicator of this
process (`binlog-mirror run`, or the standalone app's own); without one they answer 503.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field
from starlette.requests import Request

from api.deps import STANDBY_REFUSAL, STATUS_RESPONSES, ControlAuthDep, SettingsDep
from api.schemas import DetailOut
from service.pipeline.control import Control
from service.pipeline.status import ReplicatorStatus
from service.transactions import TableFilter

__all__ = ["ControlOut", "router"]

router = APIRouter(
    prefix="/control",
    tags=["control"],
    dependencies=[ControlAuthDep],
    responses={
        **STATUS_RESPONSES,
        409: {"model": DetailOut, "description": "This instance is a standby: send it to the leader."},
    },
)


@runtime_checkable
class Controlled(Protocol):
    control: Control

    def status(self) -> ReplicatorStatus: ...


class ControlOut(BaseModel):
    paused: bool = Field(description="Applying is paused: the mirror stays at its checkpoint.")
    resyncs_requested: list[str] = Field(description="Tables whose copy is requested and not started yet.")


def _controlled(request: Request) -> Controlled:
    source = request.app.state.status_source
    if source is not None and source.status().standby:  # pausing it would leave the writer running
        raise HTTPException(status.HTTP_409_CONFLICT, detail=STANDBY_REFUSAL)
    if not isinstance(source, Controlled):
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail="replicator not started")
    return source


def _out(control: Control) -> ControlOut:
    return ControlOut(paused=control.paused, resyncs_requested=[f"{s}.{t}" for s, t in control.resyncs])


@router.post("/pause", response_model=ControlOut, summary="Stop applying after the batch in flight")
async def pause(request: Request) -> ControlOut:
    control = _controlled(request).control
    control.pause()
    return _out(control)


@router.post("/resume", response_model=ControlOut, summary="Apply again")
async def resume(request: Request) -> ControlOut:
    control = _controlled(request).control
    control.resume()
    return _out(control)


@router.post(
    "/resync/{schema}/{table}",
    response_model=ControlOut,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Copy one mirrored table again from the source (the resync an ALTER starts)",
    responses={404: {"model": DetailOut, "description": "The table is not mirrored."}},
)
async def resync(schema: str, table: str, request: Request, settings: SettingsDep) -> ControlOut:
    source = _controlled(request)
    selected = TableFilter.from_lists(settings.tables, settings.exclude_tables).wants(schema, table)
    known = any(t.schema == schema and t.table == table and t.mirrored for t in source.status().tables)
    if not (selected and known):
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"{schema}.{table} is not mirrored")
    source.control.request_resync(schema, table)
    return _out(source.control)
