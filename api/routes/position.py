"""Where the mirror is in the source's binlog."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import STATUS_RESPONSES, AuthDep, StatusDep
from api.schemas import PositionOut

__all__ = ["router"]

router = APIRouter(tags=["replication"], dependencies=[AuthDep], responses=STATUS_RESPONSES)


@router.get(
    "/position",
    response_model=PositionOut,
    summary="Source identity, received position/GTID, last applied checkpoint, last event time",
)
async def position(s: StatusDep) -> PositionOut:
    return PositionOut.from_domain(s)
