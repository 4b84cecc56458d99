"""The probes with Kubernetes semantics, over HTTP against a status double: a healthy standby is
Ready, /health/leader says which instance writes, lag is no reason, and a standby refuses what
only the writer can do (control) or see (the applied changes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from apihelpers import TOKEN, StatusDouble, streaming_status
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.websockets import WebSocketDisconnect

from api.deps import STANDBY_REFUSAL
from api.routes.events import CLOSE_STANDBY
from service.pipeline.status import ErrorStatus, ReplicatorStatus, SourceStatus, State


def standby_status(**overrides: Any) -> ReplicatorStatus:
    """What a standby reports: waiting for the lease another instance holds, never connected."""
    fields: dict[str, Any] = {
        "state": State.STARTING,
        "leader": False,
        "standby": True,
        "source": SourceStatus(),
        "lag_seconds": None,
        "applied": None,
    }
    return replace(streaming_status(), **{**fields, **overrides})


def samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_a_healthy_standby_is_ready_and_not_the_leader(client: TestClient, double: StatusDouble) -> None:
    double.snapshot = standby_status()
    ready = client.get("/health/ready")
    assert ready.status_code == 200
    assert ready.json() == {
        "ready": True,
        "state": "starting",
        "role": "standby",
        "reasons": [],
        "lag_seconds": None,
        "max_lag_seconds": 30.0,
    }
    leader = client.get("/health/leader")
    assert leader.status_code == 503
    assert leader.json() == {"leader": False, "role": "standby", "state": "starting"}


def test_a_standby_without_redis_is_not_ready(client: TestClient, double: StatusDouble) -> None:
    """It could not take over: Redis holds the lease. (The lease keeper clears `standby` then.)"""
    double.snapshot = standby_status(redis_reachable=False, standby=False)
    r = client.get("/health/ready")
    assert r.status_code == 503
    assert r.json()["role"] == "starting"
    assert r.json()["reasons"] == [
        "redis unreachable",
        "waiting to take the writer lease or to see another instance hold it",
    ]


def test_a_failed_standby_is_not_ready(client: TestClient, double: StatusDouble) -> None:
    double.snapshot = standby_status(
        state=State.FAILED, errors=ErrorStatus(count=1, last="ConfigError('bad')")
    )
    r = client.get("/health/ready")
    assert r.status_code == 503 and r.json()["reasons"] == [
        "replicator is failed",
        "failed: ConfigError('bad')",
    ]


def test_the_leader_answers_200_on_both(client: TestClient) -> None:
    assert client.get("/health/ready").json()["role"] == "leader"
    r = client.get("/health/leader")
    assert r.status_code == 200 and r.json() == {"leader": True, "role": "leader", "state": "streaming"}


def test_a_leader_that_does_not_stream_is_the_leader_but_not_ready(
    client: TestClient, double: StatusDouble
) -> None:
    double.snapshot = replace(
        streaming_status(), state=State.RECONNECTING, source=SourceStatus(connected=False)
    )
    assert client.get("/health/leader").status_code == 200
    r = client.get("/health/ready")
    assert r.status_code == 503
    assert r.json()["reasons"] == ["replicator is reconnecting", "binlog stream not connected"]


@pytest.mark.parametrize("lag", [None, 4.0, 99_999.0])
def test_lag_is_no_reason_to_leave_the_service(
    make_client: Callable[..., TestClient], double: StatusDouble, lag: float | None
) -> None:
    """Catching up is when ctl, /lag and the dashboard are needed: lag is a metric and an alert."""
    double.snapshot = streaming_status(lag_seconds=lag)
    r = make_client(max_lag_seconds=3).get("/health/ready")
    assert r.status_code == 200 and r.json()["lag_seconds"] == lag
    assert make_client(max_lag_seconds=3).get("/lag").json()["over_limit"] is True


def test_nothing_started_is_neither_ready_nor_leader(make_client: Callable[..., TestClient]) -> None:
    c = make_client()
    c.app.state.status_source = None  # type: ignore[attr-defined]
    assert c.get("/health/leader").status_code == 503
    assert c.get("/health/leader").json()["role"] == "starting"
    assert c.get("/health/ready").json()["role"] == "starting"


def test_probes_need_no_token(make_client: Callable[..., TestClient], double: StatusDouble) -> None:
    c = make_client(api_token=TOKEN)
    assert c.get("/health/leader").status_code == 200
    double.snapshot = standby_status()
    assert c.get("/health/ready").status_code == 200
    assert c.get("/health/leader").status_code == 503


def test_a_standby_refuses_control_and_the_websocket(authed: TestClient, double: StatusDouble) -> None:
    """Pausing a standby would leave the writer running, and its websocket would never carry the
    writer's changes: both say so instead of answering as if they worked."""
    double.snapshot = standby_status()
    for path in ("/control/pause", "/control/resume", "/control/resync/shop/orders"):
        r = authed.post(path)
        assert r.status_code == 409 and r.json() == {"detail": STANDBY_REFUSAL}, path
    with authed.websocket_connect(f"/ws/events?token={TOKEN}&tables=shop.*") as ws:
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == CLOSE_STANDBY and "standby" in closed.value.reason
    assert authed.get("/position").status_code == 200  # reads answer with the standby's own status


def test_metrics_follow_the_probes(authed: TestClient, double: StatusDouble) -> None:
    """`ready` is /health/ready's answer (so 1 on a healthy standby), `leader` /health/leader's;
    the lag limit is exported once, from the setting; errors are counted by kind."""
    double.snapshot = standby_status(
        lease_acquisitions=2,
        errors=ErrorStatus(count=3, by_kind=(("LeaseLost", 2), ("SinkError", 1))),
    )
    values = samples(authed.get("/metrics").text)
    assert values["binlog_mirror_ready"] == 1 and values["binlog_mirror_leader"] == 0
    assert values["binlog_mirror_lease_acquisitions_total"] == 2
    assert values["binlog_mirror_max_lag_seconds"] == 30
    assert values["binlog_mirror_errors_total{kind=LeaseLost}"] == 2
    assert values["binlog_mirror_errors_total{kind=SinkError}"] == 1
    double.snapshot = replace(streaming_status(), state=State.RECONNECTING)
    values = samples(authed.get("/metrics").text)
    assert values["binlog_mirror_ready"] == 0 and values["binlog_mirror_leader"] == 1
