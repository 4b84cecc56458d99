"""The dashboard page and its assets, `GET /dashboard/info`, and the `token=` log redaction.

The page itself is driven in a real browser in tests/integration/test_dashboard.py.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from importlib import resources

import pytest
from apihelpers import TOKEN, StatusDouble, streaming_status
from fastapi.testclient import TestClient
from websockets.asyncio.client import connect

from api.log_redaction import LOGGERS
from api.main import create_app
from api.server import ApiServer
from service.logsetup import RedactSecrets, redact
from service.pipeline.status import ResyncStatus, TableStatus
from service.settings import Settings

ASSETS = ("app.js", "app.css")
ASSET_BUDGET = 100 * 1024  # the "under ~100 KB of assets"


def test_root_serves_the_page_without_a_token(make_client: Callable[..., TestClient]) -> None:
    c = make_client(api_token=TOKEN)
    r = c.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "script-src 'self'" in csp
    for name in ASSETS:
        assert f'"/dashboard/static/{name}"' in r.text


@pytest.mark.parametrize(
    ("name", "media"), [("app.js", "text/javascript"), ("app.css", "text/css")], ids=["js", "css"]
)
def test_assets_are_served_from_the_package(client: TestClient, name: str, media: str) -> None:
    r = client.get(f"/dashboard/static/{name}")
    assert r.status_code == 200 and r.headers["content-type"].startswith(media)
    assert r.content == resources.files("api").joinpath("static", "dashboard", name).read_bytes()


@pytest.mark.parametrize("name", ["index.html", "nope.js", "..%2Fdashboard.py"])
def test_unknown_asset_is_404(client: TestClient, name: str) -> None:
    assert client.get(f"/dashboard/static/{name}").status_code == 404


def test_page_is_small_and_names_no_other_host() -> None:
    folder = resources.files("api").joinpath("static", "dashboard")
    files = [f for f in folder.iterdir() if f.is_file()]
    assert {f.name for f in files} == {"index.html", *ASSETS}
    assert sum(len(f.read_bytes()) for f in files) < ASSET_BUDGET
    for f in files:
        # no absolute or protocol-relative URL: the page must work on a closed network
        assert not re.search(r"https?://|wss?://|[\"'(]//", f.read_text()), f.name


def test_root_is_not_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and "/dashboard/info" in paths


def test_info_needs_the_token(make_client: Callable[..., TestClient]) -> None:
    c = make_client(api_token=TOKEN)
    assert c.get("/dashboard/info").status_code == 401
    assert c.get("/dashboard/info", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_info_gives_role_redacted_redis_url_and_resyncs(
    make_client: Callable[..., TestClient], double: StatusDouble
) -> None:
    resync = ResyncStatus(started_ts=1_700_000_000.0, rows_done=40, rows_total=100, reason="ALTER TABLE t")
    double.snapshot = streaming_status(
        leader=False,
        tables=(
            TableStatus(schema="shop", table="orders", resync=resync),
            TableStatus(schema="a", table="b"),
        ),
    )
    c = make_client(redis="redis://:pw-secret@cache:6380/2")
    body = c.get("/dashboard/info").json()
    assert body["leader"] is False and body["redis_reachable"] is True
    assert body["redis_url"] == "redis://***@cache:6380/2"
    assert [(r["schema"], r["table"]) for r in body["resyncs"]] == [("shop", "orders")]
    progress = body["resyncs"][0]["resync"]
    assert (progress["rows_done"], progress["rows_total"], progress["reason"]) == (40, 100, "ALTER TABLE t")


def test_info_before_the_replicator_starts_is_503() -> None:
    app = create_app(Settings(), StatusDouble())
    app.state.status_source = None  # what the app holds until its own replicator exists
    with TestClient(app) as c:
        assert c.get("/dashboard/info").status_code == 503


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/ws/events?token=s3cret", "/ws/events?token=***"),
        ("/ws/events?tables=a.*&token=s3cret&batch=1", "/ws/events?tables=a.*&token=***&batch=1"),
        ("/ws/events?TOKEN=s3cret", "/ws/events?TOKEN=***"),
        ("/ws/events?mytoken=x&batch=1", "/ws/events?mytoken=x&batch=1"),
        ("/tables", "/tables"),
    ],
    ids=["only", "middle", "case", "other-name", "none"],
)
def test_redact_query(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_filter_rewrites_uvicorn_access_record() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/lag?token=s3cret", "1.1", 401),
        None,
    )
    assert RedactSecrets().filter(record) is True
    assert record.getMessage() == '127.0.0.1:5000 - "GET /lag?token=*** HTTP/1.1" 401'


async def test_websocket_token_never_reaches_uvicorn_logs(caplog: pytest.LogCaptureFixture) -> None:
    """A real uvicorn server logs the websocket path with its query: the token shows as ***."""
    secret = "dashboard-s3cret-token"
    settings = Settings(api_token=secret, api_port=0)
    server = ApiServer(create_app(settings, StatusDouble(streaming_status())), settings)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            await server.started.wait()
        with caplog.at_level(logging.DEBUG):
            url = f"ws://127.0.0.1:{server.port}/ws/events?tables=shop.*&token={secret}"
            async with connect(url) as ws:
                assert '"subscribed"' in str(await ws.recv())
            await asyncio.sleep(0.2)  # let the server log the close
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    accepted = [r for r in caplog.records if "[accepted]" in r.getMessage()]
    assert accepted and accepted[0].name in LOGGERS
    assert "token=***" in accepted[0].getMessage()
    server_side = [r for r in caplog.records if not r.name.startswith("websockets.client")]
    assert any(r.name == "uvicorn.error" and r.levelno == logging.DEBUG for r in server_side)
    leaks = [r.getMessage() for r in server_side if secret in r.getMessage()]
    assert leaks == []  # at every level, the handshake's DEBUG lines included
