"""Schemathesis over the OpenAPI schema: no 5xx, and responses match their documented schemas."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from apihelpers import TOKEN, StatusDouble, streaming_status
from hypothesis import HealthCheck, settings

from api.main import create_app
from service.pipeline.control import Control
from service.pipeline.status import ColumnStatus, TableStatus
from service.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    schemathesis = pytest.importorskip("schemathesis")  # dev extra; skipped where not installed

TABLE = TableStatus(
    schema="shop",
    table="orders",
    table_id=1,
    columns=(ColumnStatus("id", "INT", None, False, False),),
    primary_key=("id",),
)


class ControlledDouble(StatusDouble):
    """With the replicator's control surface, so POST /control/... answers (not 503)."""

    control = Control()


app = create_app(Settings(api_token=TOKEN), ControlledDouble(streaming_status(tables=(TABLE,))))
# GET /ws/events documents the websocket: over plain HTTP it always answers 426 (upgrade)
schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path="/ws/events")


@schema.parametrize()  # type: ignore[untyped-decorator]
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_answers_5xx(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})
