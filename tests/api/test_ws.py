"""WS /ws/events in-process (TestClient): subscribe, filters, seq, resume, gaps, close codes, auth.

Publishing goes through the app's own event loop (`client.portal`), exactly as the Replicator
calls its `on_applied` hooks there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from apihelpers import TOKEN, StatusDouble, change, txn
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

import api.routes.events as events_route
from api.broadcast import Broadcaster
from service.binlog.rowchange import Op, RowChange
from service.pipeline.status import State, TableStatus


def publish(client: TestClient, double: StatusDouble, *changes: RowChange) -> int:
    portal = client.portal
    assert portal is not None
    first: int = portal.call(double.apply, txn(*changes))
    return first


def close_of(ws: Any) -> WebSocketDisconnect:
    """Read until the server closes; return the close (code, reason)."""
    with pytest.raises(WebSocketDisconnect) as info:
        while True:
            ws.receive_json()
    return info.value


def test_query_subscription_gets_only_matching_changes_in_order(
    client: TestClient, double: StatusDouble
) -> None:
    with client.websocket_connect("/ws/events?tables=shop.*&ops=insert,update") as ws:
        hello = ws.receive_json()
        assert hello["type"] == "subscribed" and hello["filter"]["tables"] == ["shop.*"]
        assert hello["last_seq"] is None and hello["warnings"] == []
        publish(
            client,
            double,
            change(Op.INSERT, id=1),
            change(Op.INSERT, schema="crm", table="users"),
            change(Op.DELETE, id=1),
            change(Op.UPDATE, table="items", id=2),
        )
        publish(client, double, change(Op.INSERT, id=3))
        got = [ws.receive_json(), ws.receive_json(), ws.receive_json()]
        assert [(m["seq"], m["op"], m["table"]) for m in got] == [
            (1, "insert", "orders"),
            (4, "update", "items"),
            (5, "insert", "orders"),
        ]
        assert got[0]["after"] == {"id": 1} and got[0]["before"] is None


def test_first_message_subscription_with_projection(client: TestClient, double: StatusDouble) -> None:
    with client.websocket_connect("/ws/events") as ws:
        ws.send_json({"type": "subscribe", "tables": ["shop.orders"], "columns": ["id"]})
        assert ws.receive_json()["filter"]["columns"] == ["id"]
        publish(client, double, change(Op.UPDATE, id=9, secret="x"))
        msg = ws.receive_json()
        assert msg["before"] == msg["after"] == {"id": 9}


def test_subscribers_with_different_filters_each_get_their_own(
    client: TestClient, double: StatusDouble
) -> None:
    with (
        client.websocket_connect("/ws/events?tables=shop.orders") as a,
        client.websocket_connect("/ws/events?tables=crm.*") as b,
    ):
        a.receive_json(), b.receive_json()
        publish(client, double, change(id=1), change(schema="crm", table="users", id=2), change(id=3))
        assert [a.receive_json()["seq"], a.receive_json()["seq"]] == [1, 3]
        assert b.receive_json()["seq"] == 2
        a.send_json({"type": "ping", "data": 1})
        assert a.receive_json() == {"type": "pong", "data": 1}  # nothing else was queued for a


def test_exact_table_unknown_before_streaming_is_a_warning(client: TestClient, double: StatusDouble) -> None:
    """Before the service streams, its table list is not complete yet: a warning, not a refusal."""
    from dataclasses import replace

    double.snapshot = replace(
        double.snapshot, state=State.STARTING, tables=(TableStatus(schema="shop", table="orders"),)
    )
    with client.websocket_connect("/ws/events?tables=shop.orders,shop.later") as ws:
        assert ws.receive_json()["warnings"] == ["no changes seen yet for shop.later"]


def test_exact_table_not_on_the_source_is_refused(client: TestClient) -> None:
    """Streaming: every selected table of the source is in the status, so another name is unknown."""
    with client.websocket_connect("/ws/events?tables=shop.orders,shop.nope") as ws:
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == 4404 and "shop.nope: not on the source" in closed.value.reason


@pytest.mark.parametrize(
    ("url", "first", "code", "reason"),
    [
        pytest.param("/ws/events?tables=orders", None, 4400, "must be schema.table", id="bad-pattern"),
        pytest.param("/ws/events?ops=merge", None, 4400, "unknown op", id="bad-op"),
        pytest.param("/ws/events?after=soon", None, 4400, "bad subscribe field 'after'", id="bad-after"),
        pytest.param("/ws/events", "not json", 4400, "not valid JSON", id="not-json"),
        pytest.param("/ws/events", '{"type": "hello"}', 4400, "first message must be", id="wrong-type"),
        pytest.param("/ws/events", '{"tables": "a.b", "x": 1}', 4400, "field 'x'", id="extra-key"),
        pytest.param("/ws/events", "[1, 2]", 4400, "first message must be", id="array"),
        pytest.param("/ws/events?tables=internal.audit", None, 4404, "unknown table", id="excluded"),
    ],
)
def test_bad_subscriptions_are_closed_with_a_4xxx_reason(
    make_client: Callable[..., TestClient], url: str, first: str | None, code: int, reason: str
) -> None:
    client = make_client(exclude_tables=["internal.*"])
    with client.websocket_connect(url) as ws:
        if first is not None:
            ws.send_text(first)
        closed = close_of(ws)
    assert closed.code == code and reason in closed.reason


def test_subscribe_timeout(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_route, "SUBSCRIBE_TIMEOUT", 0.05)
    with client.websocket_connect("/ws/events") as ws:
        closed = close_of(ws)
    assert closed.code == 4408


def test_only_pings_after_subscribing(client: TestClient) -> None:
    with client.websocket_connect("/ws/events?tables=a.b") as ws:
        ws.receive_json()
        ws.send_json({"type": "subscribe"})
        closed = close_of(ws)
    assert closed.code == 4400 and "only" in closed.reason


def test_resume_after_reconnect_misses_nothing(client: TestClient, double: StatusDouble) -> None:
    seen: list[int] = []
    with client.websocket_connect("/ws/events?tables=shop.orders") as ws:
        stream = ws.receive_json()["stream"]
        publish(client, double, change(id=1), change(table="other"), change(id=2))
        seen += [ws.receive_json()["seq"], ws.receive_json()["seq"]]
    publish(client, double, change(id=3))  # while disconnected
    publish(client, double, change(table="other"), change(id=4))
    with client.websocket_connect(f"/ws/events?tables=shop.orders&after={seen[-1]}&stream={stream}") as ws:
        hello = ws.receive_json()
        assert hello["last_seq"] == 6
        publish(client, double, change(id=5))
        seen += [ws.receive_json()["seq"] for _ in range(3)]
    assert seen == [1, 3, 4, 6, 7]


def test_resume_too_old_is_an_explicit_gap(
    make_client: Callable[..., TestClient], double: StatusDouble
) -> None:
    client = make_client(ws_buffer_events=2)
    for i in range(5):
        publish(client, double, change(id=i))
    with client.websocket_connect("/ws/events?after=1") as ws:
        ws.receive_json()
        gap = ws.receive_json()
        reason = "requested changes are no longer buffered"
        assert gap == {"type": "gap", "from_seq": 2, "to_seq": 3, "reason": reason}
        assert [ws.receive_json()["seq"], ws.receive_json()["seq"]] == [4, 5]


def test_shutdown_closes_subscribers_with_1001(client: TestClient) -> None:
    with client.websocket_connect("/ws/events?tables=a.b") as ws:
        ws.receive_json()
        portal = client.portal
        assert portal is not None
        hub: Broadcaster = client.app.state.hub  # type: ignore[attr-defined]
        portal.call(hub.close)
        closed = close_of(ws)
    assert closed.code == 1001


def test_websocket_clients_gauge(client: TestClient) -> None:
    with client.websocket_connect("/ws/events?tables=a.b") as ws:
        ws.receive_json()
        assert "binlog_mirror_websocket_clients 1.0" in client.get("/metrics").text
    # the handler unsubscribes once the disconnect is processed
    assert client.app.state.hub.subscribers == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "headers", "accepted"),
    [
        pytest.param("/ws/events?tables=a.b", {}, False, id="none"),
        pytest.param("/ws/events?tables=a.b&token=wrong", {}, False, id="wrong-query"),
        pytest.param("/ws/events?tables=a.b", {"Authorization": "Bearer wrong"}, False, id="wrong-header"),
        pytest.param(f"/ws/events?tables=a.b&token={TOKEN}", {}, True, id="query"),
        pytest.param("/ws/events?tables=a.b", {"Authorization": f"Bearer {TOKEN}"}, True, id="header"),
    ],
)
def test_websocket_auth(
    make_client: Callable[..., TestClient], url: str, headers: dict[str, str], accepted: bool
) -> None:
    client = make_client(api_token=TOKEN)
    with client.websocket_connect(url, headers=headers) as ws:
        if accepted:
            assert ws.receive_json()["type"] == "subscribed"
        else:
            closed = close_of(ws)
            assert closed.code == 4401 and closed.reason == "missing or invalid token"


def test_batch_mode_sends_each_burst_as_one_changes_message(client: TestClient, double: StatusDouble) -> None:
    with (
        client.websocket_connect("/ws/events?tables=shop.orders&batch=true&columns=id") as batched,
        client.websocket_connect("/ws/events?tables=shop.orders&columns=id") as single,
    ):
        assert batched.receive_json()["batch"] is True and single.receive_json()["batch"] is False
        publish(client, double, change(id=1), change(table="other"), change(id=2, secret="x"))
        publish(client, double, change(id=3))
        first, second = batched.receive_json(), batched.receive_json()
        assert first["type"] == second["type"] == "changes"
        assert [(c["type"], c["seq"], c["after"]) for c in first["changes"]] == [
            ("change", 1, {"id": 1}),
            ("change", 3, {"id": 2}),
        ]
        assert [c["seq"] for c in second["changes"]] == [4]
        # the same changes, byte for byte, as the one-message-per-change subscriber gets them
        assert [single.receive_json() for _ in range(3)] == [*first["changes"], *second["changes"]]


def test_batch_mode_by_subscribe_message_resumes_with_a_gap_first(
    make_client: Callable[..., TestClient], double: StatusDouble
) -> None:
    client = make_client(ws_buffer_events=2)
    for i in range(5):
        publish(client, double, change(id=i))
    with client.websocket_connect("/ws/events") as ws:
        ws.send_json({"type": "subscribe", "after": 1, "batch": True})
        assert ws.receive_json()["batch"] is True
        assert ws.receive_json() == {
            "type": "gap",
            "from_seq": 2,
            "to_seq": 3,
            "reason": "requested changes are no longer buffered",
        }
        replay = ws.receive_json()
        assert replay["type"] == "changes" and [c["seq"] for c in replay["changes"]] == [4, 5]
        publish(client, double, change(id=9))
        assert [c["seq"] for c in ws.receive_json()["changes"]] == [6]


def test_batch_must_be_a_boolean(client: TestClient) -> None:
    with client.websocket_connect("/ws/events?batch=sometimes") as ws:
        closed = close_of(ws)
    assert closed.code == 4400 and "'batch'" in closed.reason
