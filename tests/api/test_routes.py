"""HTTP routes over a typed status double (shapes, status codes, auth, redaction, CORS)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from apihelpers import TOKEN, StatusDouble, change, streaming_status, txn
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.checkpoint import BinlogPosition
from service.pipeline.status import (
    ColumnStatus,
    ErrorStatus,
    ReplicatorStatus,
    ResyncStatus,
    ShapeStatus,
    State,
    TableStatus,
)

ORDERS = TableStatus(
    schema="shop",
    table="orders",
    table_id=108,
    columns=(
        ColumnStatus("id", "INT", None, False, True, None, "binlog"),
        ColumnStatus("note", "VARCHAR", 400, True, None, "utf8mb4_general_ci", "binlog", length=100),
    ),
    primary_key=("id",),
    inserts=5,
    updates=2,
    deletes=1,
    last_change_ts=1_700_000_000,
)


def test_liveness_needs_no_token(make_client: Callable[..., TestClient]) -> None:
    c = make_client(api_token=TOKEN)
    r = c.get("/health/live")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_readiness_needs_no_token_and_shows_no_data(
    make_client: Callable[..., TestClient], double: StatusDouble
) -> None:
    """Probes carry no token: the answer is the state and the reasons, nothing the token guards."""
    c = make_client(api_token=TOKEN)
    for headers in ({}, {"Authorization": "Bearer nope"}):
        r = c.get("/health/ready", headers=headers)
        assert r.status_code == 200
        assert set(r.json()) == {"ready", "state", "role", "reasons", "lag_seconds", "max_lag_seconds"}
    double.snapshot = replace(double.snapshot, redis_reachable=False)
    r = c.get("/health/ready")
    assert r.status_code == 503 and r.json()["reasons"] == ["redis unreachable"]


def test_ready_when_streaming(client: TestClient) -> None:
    r = client.get("/health/ready")
    assert r.status_code == 200
    body = r.json()
    assert body["ready"] is True and body["state"] == "streaming" and body["reasons"] == []
    assert (body["lag_seconds"], body["max_lag_seconds"]) == (0.0, 30.0)


def test_not_ready_lists_every_reason(client: TestClient, double: StatusDouble) -> None:
    double.snapshot = replace(
        streaming_status(lag_seconds=99.0, redis_reachable=False),
        state=State.RECONNECTING,
        source=replace(double.snapshot.source, connected=False),
    )
    r = client.get("/health/ready")
    assert r.status_code == 503
    body = r.json()
    assert body["ready"] is False and body["state"] == "reconnecting"
    assert body["reasons"] == [  # lag is no reason (tests/api/test_health.py)
        "replicator is reconnecting",
        "binlog stream not connected",
        "redis unreachable",
    ]


def test_position(client: TestClient, double: StatusDouble) -> None:
    double.snapshot = streaming_status(
        received_gtid="0-1-7",
        received_gtid_set="0-1-7,1-1-3",
        errors=ErrorStatus(count=2, last="OSError('mysql://mirror:hunter2@db:3306 refused')", last_ts=1.0),
    )
    body = client.get("/position").json()
    assert body["source"] == {
        "flavour": "mariadb",
        "version": "11.4.2-MariaDB",
        "server_id": 1,
        "connected": True,
        "url": "mysql://mirror:***@h:3306",
        "server_uuid": None,
        "gtid_domain_id": 0,
    }
    assert body["failovers"] == {"count": 0, "last": None, "last_time": None}
    received = (body["received_file"], body["received_pos"], body["received_gtid"])
    assert received == ("bin.000001", 1234, "0-1-7") and body["received_gtid_set"] == "0-1-7,1-1-3"
    assert body["applied"]["file"] == "bin.000001" and body["applied"]["gtid_set"] == "0-1-7"
    assert body["last_event_time"].endswith("Z")
    assert body["errors"]["count"] == 2
    assert "hunter2" not in client.get("/position").text
    assert body["errors"]["last"] == "OSError('mysql://mirror:***@db:3306 refused')"


def test_position_shows_the_last_source_failover(client: TestClient, double: StatusDouble) -> None:
    last = "server_id=1 domain=0 -> server_id=2 domain=0 at 0-1-125"
    double.snapshot = streaming_status(failovers=2, last_failover_at=1_700_000_000.0, last_failover=last)
    failovers = client.get("/position").json()["failovers"]
    assert failovers == {"count": 2, "last": last, "last_time": "2023-11-14T22:13:20Z"}


def test_position_before_anything_is_known(client: TestClient, double: StatusDouble) -> None:
    double.snapshot = replace(streaming_status(), state=State.STARTING, received_position=None, applied=None)
    body = client.get("/position").json()
    assert body["state"] == "starting" and body["applied"] is None and body["received_file"] is None


def test_lag(client: TestClient, double: StatusDouble) -> None:
    double.snapshot = streaming_status(
        lag_seconds=42.5,
        bytes_behind=9000,
        retention_seconds_left=3600.0,
        transactions_waiting=3,
        rows_waiting=17,
    )
    assert client.get("/lag").json() == {
        "seconds_behind": 42.5,
        "bytes_behind": 9000,
        "retention_seconds_left": 3600.0,
        "transactions_waiting": 3,
        "rows_waiting": 17,
        "max_lag_seconds": 30.0,
        "over_limit": True,
    }


def test_tables_list_and_detail(client: TestClient, double: StatusDouble) -> None:
    users = TableStatus(schema="crm", table="users", key_source="none", mirrored=False, skipped_rows=4)
    double.snapshot = streaming_status(tables=(users, ORDERS))
    listing = client.get("/tables").json()["tables"]
    assert [(t["schema"], t["table"]) for t in listing] == [("crm", "users"), ("shop", "orders")]
    assert listing[0]["mirrored"] is False and listing[0]["rows_applied"]["skipped"] == 4
    detail = client.get("/tables/shop/orders").json()
    assert detail["table_id"] == 108 and detail["primary_key"] == ["id"]
    assert detail["rows_applied"] == {"insert": 5, "update": 2, "delete": 1, "skipped": 0}
    assert detail["columns"][1] == {
        "name": "note",
        "type": "VARCHAR",
        "metadata": 400,
        "nullable": True,
        "unsigned": None,
        "charset": "utf8mb4_general_ci",
        "name_source": "binlog",
        "length": 100,
    }
    assert detail["last_change_time"] == "2023-11-14T22:13:20Z"
    assert detail["resync"] is None


def test_tables_show_a_shaped_tables_index_entry_counts(
    client: TestClient, double: StatusDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts come from the source's `counted_status()` (the Replicator reads them from Redis);
    a source without one shows them as null."""
    shape = ShapeStatus(
        "shop.orders", (("id", "id"), ("state", "state")), (), "1:00ff", "app:order:{id}",
        (("set", "app:orders-by-state:{state}", None), ("zset", "app:orders-by-id", "id")),
    )  # fmt: skip
    double.snapshot = streaming_status(tables=(replace(ORDERS, shape=shape),))
    shown = client.get("/tables").json()["tables"][0]["shape"]
    assert shown["copies"] is None and [i["entries"] for i in shown["indexes"]] == [None, None]

    async def counted() -> ReplicatorStatus:
        return streaming_status(tables=(replace(ORDERS, shape=replace(shape, copies=7, entries=(5, 7))),))

    monkeypatch.setattr(double, "counted_status", counted, raising=False)
    for path in ("/tables", "/tables/shop/orders"):
        body = client.get(path).json()
        shown = (body["tables"][0] if path == "/tables" else body)["shape"]
        assert shown["copies"] == 7 and shown["indexes"] == [
            {"kind": "set", "key": "app:orders-by-state:{state}", "score": None, "entries": 5},
            {"kind": "zset", "key": "app:orders-by-id", "score": "id", "entries": 7},
        ]


def test_table_under_resync(client: TestClient, double: StatusDouble) -> None:
    resync = ResyncStatus(
        started_ts=time.time(), rows_done=10, rows_total=100, reason="ALTER TABLE ...", rows_reread=3
    )
    double.snapshot = streaming_status(tables=(replace(ORDERS, resync=resync),))
    detail = client.get("/tables/shop/orders").json()
    assert detail["resync"]["rows_done"] == 10 and detail["resync"]["rows_reread"] == 3
    assert detail["settle_until"] is None


def test_table_in_its_settle_window(client: TestClient, double: StatusDouble) -> None:
    settling = replace(ORDERS, settle_until=BinlogPosition("mysql-bin.000002", 4711))
    double.snapshot = streaming_status(tables=(settling,))
    assert client.get("/tables/shop/orders").json()["settle_until"] == "mysql-bin.000002:4711"


def test_unknown_table_is_404_with_detail(client: TestClient) -> None:
    r = client.get("/tables/shop/nope")
    assert r.status_code == 404 and r.json() == {"detail": "unknown table shop.nope"}


def test_unknown_route_is_json_404(client: TestClient) -> None:
    r = client.get("/nowhere")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}


@pytest.mark.parametrize("path", ["/position", "/lag", "/tables", "/tables/a/b", "/metrics"])
def test_token_required_everywhere_but_the_probes(make_client: Callable[..., TestClient], path: str) -> None:
    c = make_client(api_token=TOKEN)
    missing = c.get(path)
    assert missing.status_code == 401 and "missing bearer token" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = c.get(path, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["detail"] == "invalid bearer token"
    assert c.get(path, headers={"Authorization": "Basic " + TOKEN}).status_code == 401
    assert c.get(path, params={"token": TOKEN}).status_code == 401  # query tokens: websocket only
    ok = c.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code in (200, 404)
    assert TOKEN not in ok.text


def test_metrics_read_the_snapshot_at_scrape_time(authed: TestClient, double: StatusDouble) -> None:
    double.snapshot = streaming_status(tables=(ORDERS,), lag_seconds=1.5, transactions_applied=8)
    double.apply(txn(change(), ts=int(time.time()) - 3))
    r = authed.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }
    assert samples[("binlog_mirror_lag_seconds", ())] == 1.5
    assert samples[("binlog_mirror_transactions_applied_total", ())] == 8
    key = ("binlog_mirror_rows_applied_total", (("op", "insert"), ("schema", "shop"), ("table", "orders")))
    assert samples[key] == 5
    assert samples[("binlog_mirror_state", (("state", "streaming"),))] == 1
    assert samples[("binlog_mirror_websocket_clients", ())] == 0
    assert samples[("binlog_mirror_websocket_dropped_subscribers_total", ())] == 0
    assert samples[("binlog_mirror_broadcast_changes_total", ())] == 1
    assert samples[("binlog_mirror_apply_delay_seconds_count", ())] == 1
    assert samples[("binlog_mirror_apply_delay_seconds_bucket", (("le", "5.0"),))] == 1
    double.snapshot = streaming_status(lag_seconds=0.0)
    assert "binlog_mirror_lag_seconds 0.0" in authed.get("/metrics").text


def test_cors_is_off_by_default_and_configurable(make_client: Callable[..., TestClient]) -> None:
    origin = {"Origin": "https://dash.example"}
    assert "access-control-allow-origin" not in make_client().get("/health/live", headers=origin).headers
    c = make_client(api_cors_origins="https://dash.example")
    r = c.get("/health/live", headers=origin)
    assert r.headers["access-control-allow-origin"] == "https://dash.example"
    pre = c.options(
        "/lag",
        headers={
            **origin,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert pre.status_code == 200


def test_no_replicator_yet_is_503_not_500(make_client: Callable[..., TestClient]) -> None:
    c = make_client()
    c.app.state.status_source = None  # type: ignore[attr-defined]
    assert c.get("/position").status_code == 503
    assert c.get("/position").json() == {"detail": "replicator not started"}
    r = c.get("/health/ready")
    assert r.status_code == 503 and r.json()["reasons"] == ["replicator not started"]
    assert c.get("/metrics").status_code == 200


def test_openapi_documents_every_endpoint(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert set(schema["paths"]) == {
        "/health/live",
        "/health/ready",
        "/health/leader",
        "/position",
        "/lag",
        "/tables",
        "/tables/{schema}/{table}",
        "/metrics",
        "/dashboard/info",
        "/control/pause",
        "/control/resume",
        "/control/resync/{schema}/{table}",
        "/ws/events",
    }
    ws = schema["paths"]["/ws/events"]["get"]
    assert "websocket" in ws["description"].lower() and "1001" in ws["description"]
    assert {p["name"] for p in ws["parameters"]} == {
        "tables",
        "ops",
        "columns",
        "after",
        "stream",
        "batch",
        "token",
    }
    assert client.get("/ws/events").status_code == 426
    docs = client.get("/docs")
    assert docs.status_code == 200 and "cdn" not in docs.text.lower() and "https://" not in docs.text
    assert "/docs-static/swagger-ui-bundle.js" in docs.text
    js = client.get("/docs-static/swagger-ui-bundle.js")
    assert js.status_code == 200 and "SwaggerUIBundle" in js.text
    assert client.get("/docs-static/swagger-ui.css").status_code == 200
    redoc = client.get("/redoc")
    assert redoc.status_code == 200 and "https://" not in redoc.text
    assert client.get("/docs-static/redoc.standalone.js").status_code == 200
