"""Who may call what: the API's two tokens, their scopes, and the safe default without a token
(docs/api.md, "Authentication").

    scope     endpoints                                                   tokens accepted
    read      /position /lag /tables /dashboard/info /ws/events /metrics   api_read_token, api_token
    control   /control/...                                                 api_token
    (open)    /health/* /docs /redoc /openapi.json, the dashboard page     none needed: no data

A scope without any token configured is open only while the API listens on a loopback address,
or when `api_allow_unauthenticated` says so: on any other address its endpoints are refused
(HTTP 403, websocket 4403), so that an image bound to 0.0.0.0 with no token never hands out row
changes or the pause button. `/metrics` is the exception: with no read token it stays open, like
the probes, so a scrape without credentials keeps working.
"""

from __future__ import annotations

import hmac
import ipaddress
from enum import Enum, StrEnum

from service.settings import Settings

__all__ = ["READ_ONLY_REFUSAL", "Scope", "Verdict", "decide", "is_loopback", "refusal"]


class Scope(StrEnum):
    READ = "read"
    CONTROL = "control"
    METRICS = "metrics"  # read, but open when no read token exists


class Verdict(Enum):
    ALLOWED = "allowed"
    MISSING = "missing"  # a token is configured and none was sent: 401
    INVALID = "invalid"  # a token was sent and matches none of the scope's: 401
    READ_ONLY = "read-only"  # the read token, sent for a control endpoint: 403
    CLOSED = "closed"  # no token configured, non-loopback address, not allowed explicitly: 403


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`; 0.0.0.0, :: and every other address are not."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _tokens(settings: Settings, scope: Scope) -> list[str]:
    wanted = [settings.api_token] if scope is Scope.CONTROL else [settings.api_read_token, settings.api_token]
    return [t.get_secret_value() for t in wanted if t is not None]


def decide(settings: Settings, scope: Scope, presented: str | None) -> Verdict:
    tokens = _tokens(settings, scope)
    if not tokens:
        if scope is Scope.METRICS or settings.api_allow_unauthenticated or is_loopback(settings.api_host):
            return Verdict.ALLOWED
        return Verdict.CLOSED
    if not presented:
        return Verdict.MISSING
    # compare with every token (constant time each): which one matched is not revealed by timing
    matches = [hmac.compare_digest(presented.encode(), t.encode()) for t in tokens]
    if any(matches):
        return Verdict.ALLOWED
    read = settings.api_read_token
    if (
        scope is Scope.CONTROL
        and read
        and hmac.compare_digest(presented.encode(), read.get_secret_value().encode())
    ):
        return Verdict.READ_ONLY
    return Verdict.INVALID


READ_ONLY_REFUSAL = "the read token (api_read_token) may only read: control needs api_token"


def refusal(settings: Settings, scope: Scope) -> str:
    """Why a CLOSED scope refuses, and the ways to open it."""
    token = "api_token" if scope is Scope.CONTROL else "api_read_token or api_token"
    return (
        f"refused: the API listens on {settings.api_host}, not a loopback address, and no {token} "
        "is set; set it (or its _file), or set api_allow_unauthenticated=true to serve this "
        "without a token (docs/api.md, Authentication)"
    )
