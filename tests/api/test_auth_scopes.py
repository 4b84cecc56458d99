"""Scoped tokens and the safe default, over HTTP and the websocket (api/auth.py): the read token
reads, only the control token controls, and an API on a non-loopback address with no token
refuses data and control while health and metrics stay open, unless allowed explicitly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from apihelpers import TOKEN, StatusDouble
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from api.auth import READ_ONLY_REFUSAL, is_loopback
from api.routes.events import CLOSE_FORBIDDEN, CLOSE_UNAUTHORIZED
from service.errors import ConfigError
from service.pipeline.control import Control
from service.settings import load_settings

READ = "read-only-token"
READS = ("/position", "/lag", "/tables", "/dashboard/info")
CONTROLS = ("/control/pause", "/control/resume")
OPEN = ("/health/live", "/health/ready", "/health/leader", "/docs", "/openapi.json", "/")


@pytest.fixture(autouse=True)
def controlled(double: StatusDouble) -> None:
    """The double gets the replicator's Control, so control endpoints answer 200 once let in."""
    double.control = Control()  # type: ignore[attr-defined]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ws_close_code(client: TestClient, query: str) -> int | None:
    """The close code the websocket answers a subscribe with (None: it subscribed)."""
    with client.websocket_connect(f"/ws/events?tables=shop.*{query}") as ws:
        try:
            first = ws.receive_json()
        except WebSocketDisconnect as closed:
            return closed.code
    assert first["type"] == "subscribed", first
    return None


def test_the_read_token_reads_and_cannot_control(make_client: Callable[..., TestClient]) -> None:
    c = make_client(api_token=TOKEN, api_read_token=READ, api_host="0.0.0.0")
    for path in READS:
        assert c.get(path, headers=bearer(READ)).status_code == 200, path
        assert c.get(path).status_code == 401, path
    assert c.get("/metrics", headers=bearer(READ)).status_code == 200
    assert c.get("/metrics").status_code == 401  # a read token exists: Prometheus sends it
    for path in CONTROLS:
        r = c.post(path, headers=bearer(READ))
        assert r.status_code == 403 and r.json() == {"detail": READ_ONLY_REFUSAL}, path
        assert c.post(path, headers=bearer("wrong")).status_code == 401
    assert ws_close_code(c, f"&token={READ}") is None


def test_the_control_token_does_everything(make_client: Callable[..., TestClient]) -> None:
    c = make_client(api_token=TOKEN, api_read_token=READ, api_host="0.0.0.0")
    for path in READS:
        assert c.get(path, headers=bearer(TOKEN)).status_code == 200, path
    assert c.get("/metrics", headers=bearer(TOKEN)).status_code == 200
    for path in CONTROLS:
        assert c.post(path, headers=bearer(TOKEN)).status_code == 200, path
    assert ws_close_code(c, f"&token={TOKEN}") is None
    assert ws_close_code(c, "&token=wrong") == CLOSE_UNAUTHORIZED


def test_no_token_on_a_public_address_refuses_data_and_control(
    make_client: Callable[..., TestClient],
) -> None:
    """The image binds 0.0.0.0: without a token nobody who reaches the port reads row changes or
    pauses the mirror; the probes and /metrics stay open so orchestration and scraping work."""
    c = make_client(api_host="0.0.0.0")
    for path in READS:
        r = c.get(path)
        assert r.status_code == 403, path
        detail = r.json()["detail"]
        assert "0.0.0.0" in detail and "api_read_token or api_token" in detail
        assert "api_allow_unauthenticated" in detail
    for path in CONTROLS:
        r = c.post(path)
        assert r.status_code == 403 and "no api_token is set" in r.json()["detail"], path
    assert ws_close_code(c, "") == CLOSE_FORBIDDEN
    for path in OPEN:
        assert c.get(path).status_code == 200, path
    assert c.get("/metrics").status_code == 200


def test_only_a_read_token_on_a_public_address_leaves_control_refused(
    make_client: Callable[..., TestClient],
) -> None:
    c = make_client(api_read_token=READ, api_host="0.0.0.0")
    assert c.get("/position", headers=bearer(READ)).status_code == 200
    assert c.get("/position").status_code == 401
    assert c.post("/control/pause", headers=bearer(READ)).status_code == 403
    assert c.post("/control/pause").status_code == 403


def test_allow_unauthenticated_opens_a_public_address(make_client: Callable[..., TestClient]) -> None:
    c = make_client(api_host="0.0.0.0", api_allow_unauthenticated=True)
    for path in READS:
        assert c.get(path).status_code == 200, path
    assert c.post("/control/pause").status_code == 200
    assert ws_close_code(c, "") is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_no_token_on_loopback_stays_open(make_client: Callable[..., TestClient], host: str) -> None:
    """A developer's `run` on 127.0.0.1 (the default) needs no token, as before."""
    c = make_client(api_host=host)
    assert c.get("/position").status_code == 200
    assert c.post("/control/pause").status_code == 200
    assert ws_close_code(c, "") is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("api.example", False), ("127.0.0.1", True)],
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_tokens_from_files(make_client: Callable[..., TestClient], tmp_path: Path) -> None:
    """The first line of a mounted secret, as `*_password_file`; a trailing newline is not part of it."""
    (tmp_path / "control").write_text("control-from-file\nignored\n")
    (tmp_path / "read").write_text("read-from-file\r\n")
    settings = load_settings(
        None, api_token_file=tmp_path / "control", api_read_token_file=tmp_path / "read", api_host="0.0.0.0"
    )
    assert settings.api_token is not None and settings.api_read_token is not None
    c = make_client(**{name: getattr(settings, name) for name in ("api_token", "api_read_token", "api_host")})
    assert c.get("/position", headers=bearer("read-from-file")).status_code == 200
    assert c.post("/control/pause", headers=bearer("control-from-file")).status_code == 200
    assert c.post("/control/pause", headers=bearer("read-from-file")).status_code == 403


def test_token_file_mistakes_name_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "same").write_text("same\n")
    cases = [
        (
            {"api_token_file": tmp_path / "nope"},
            "invalid setting 'api_token_file' \\(--api-token-file\\): .*nope: No such file",
        ),
        (
            {"api_read_token_file": tmp_path / "empty"},
            "api_read_token_file' \\(--api-read-token-file\\): .*empty",
        ),
        ({"api_token": "x", "api_token_file": tmp_path / "same"}, "api_token_file.*api_token is set too"),
        (
            {"api_token": "same", "api_read_token_file": tmp_path / "same"},
            "api_read_token. \\(--api-read-token-file\\): .*must differ",
        ),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message):
            load_settings(None, **overrides)
    monkeypatch.setenv("BINLOG_MIRROR_API_ALLOW_UNAUTHENTICATED", "maybe")
    with pytest.raises(ConfigError, match="api_allow_unauthenticated.*env BINLOG_MIRROR_API_ALLOW_UNAUTH"):
        load_settings(None)


def test_auth_settings_are_in_the_example_and_the_docs() -> None:
    root = Path(__file__).resolve().parents[2]
    example = (root / "deploy" / "binlog-mirror.example.toml").read_text()
    docs = (root / "docs" / "api.md").read_text()
    for name in ("api_token_file", "api_read_token_file", "api_allow_unauthenticated"):
        assert f"# {name} = " in example, name
    for name in (
        "api_token",
        "api_token_file",
        "api_read_token",
        "api_read_token_file",
        "api_allow_unauthenticated",
    ):
        assert f"| `{name}` |" in docs, name
    load_settings(root / "deploy" / "binlog-mirror.example.toml")  # the example loads as it is
