"""Prometheus exposition."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import AUTH_RESPONSES, MetricsAuthDep, RegistryDep

__all__ = ["router"]

router = APIRouter(tags=["metrics"], dependencies=[MetricsAuthDep], responses=AUTH_RESPONSES)


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus text format",
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus exposition format 0.0.4"}},
)
def metrics(registry: RegistryDep) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
