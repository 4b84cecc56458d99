"""How far the mirror is behind the source."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import STATUS_RESPONSES, AuthDep, SettingsDep, StatusDep
from api.schemas import LagOut

__all__ = ["router"]

router = APIRouter(tags=["replication"], dependencies=[AuthDep], responses=STATUS_RESPONSES)


@router.get("/lag", response_model=LagOut, summary="Seconds and bytes behind; transactions and rows waiting")
async def lag(s: StatusDep, settings: SettingsDep) -> LagOut:
    return LagOut.from_domain(s, settings.max_lag_seconds)
