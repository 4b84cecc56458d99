"""`binlog-mirror ctl`: control a running mirror through its API, and clear a prefix safely.

    ctl status | pause | resume | resync SCHEMA.TABLE    talk to `binlog-mirror run`'s API
    ctl clear --prefix P --yes                          delete a mirror's keys (refused while a
                                                        writer holds the lease)

The API's address and token come from --api/--api-token, else from the settings (api_host,
api_port, api_token or api_token_file; for `status`, api_read_token will do: env BINLOG_MIRROR_*,
--config), as `run` reads them.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from service.errors import ReplicatorError

if TYPE_CHECKING:
    from service.settings import Settings

__all__ = ["ctl_app"]

ctl_app = typer.Typer(
    no_args_is_help=True, help="Control a running mirror (pause, resume, resync, status, clear)."
)

Api = Annotated[str | None, typer.Option("--api", help="The API's URL (default http://api_host:api_port).")]
Token = Annotated[
    str | None, typer.Option("--api-token", help="Bearer token (default BINLOG_MIRROR_API_TOKEN / config).")
]
Config = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]
TIMEOUT = 10.0


def _settings(config: Path | None, **overrides: Any) -> Settings:
    from service.cli.common import fail
    from service.settings import load_settings

    try:
        return load_settings(config, **overrides)
    except ReplicatorError as exc:
        raise fail(str(exc)) from None


def _call(method: str, path: str, api: str | None, token: str | None, config: Path | None) -> Any:
    from service.cli.common import fail

    settings = _settings(config)
    base = (api or f"http://{settings.api_host}:{settings.api_port}").rstrip("/")
    # the control token does everything; with only the read token set, `ctl status` still reads
    configured = settings.api_token or (settings.api_read_token if method == "GET" else None)
    secret = token or (configured.get_secret_value() if configured else None)
    request = urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None)
    if secret:
        request.add_header("Authorization", f"Bearer {secret}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read())
        except ValueError:
            body = None
        if exc.code == 503 and path == "/health/ready" and isinstance(body, dict):
            return body  # not ready: the body says why
        detail = body.get("detail") if isinstance(body, dict) else None
        raise fail(f"api: {method} {path}: {exc.code} {detail or exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise fail(
            f"api: cannot reach {base}: {reason} (is `binlog-mirror run` running? check --api or "
            "BINLOG_MIRROR_API_HOST / BINLOG_MIRROR_API_PORT)"
        ) from None


def _echo(body: Any) -> None:
    typer.echo(json.dumps(body, indent=2, default=str))


@ctl_app.command("status")
def status(api: Api = None, token: Token = None, config: Config = None) -> None:
    """State, readiness (with reasons), pause, applied position, lag."""
    ready = _call("GET", "/health/ready", api, token, config)
    position = _call("GET", "/position", api, token, config)
    lag = _call("GET", "/lag", api, token, config)
    _echo({"ready": ready, "position": position, "lag": lag})
    if not ready.get("ready"):
        raise typer.Exit(1)


@ctl_app.command("pause")
def pause(api: Api = None, token: Token = None, config: Config = None) -> None:
    """Stop applying after the batch in flight (the mirror stays at its checkpoint)."""
    _echo(_call("POST", "/control/pause", api, token, config))


@ctl_app.command("resume")
def resume(api: Api = None, token: Token = None, config: Config = None) -> None:
    """Apply again."""
    _echo(_call("POST", "/control/resume", api, token, config))


@ctl_app.command("resync")
def resync(
    table: Annotated[str, typer.Argument(help="schema.table, a mirrored table")],
    api: Api = None,
    token: Token = None,
    config: Config = None,
) -> None:
    """Copy one mirrored table again from the source, ordered with the stream."""
    from service.cli.common import fail

    schema, dot, name = table.partition(".")
    if not (schema and dot and name):
        raise fail(f"table {table!r} must be schema.table")
    _echo(_call("POST", f"/control/resync/{schema}/{name}", api, token, config))


@ctl_app.command("clear")
def clear(
    redis: Annotated[str | None, typer.Option("--redis", help="redis://host:port/db")] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis key prefix (default mirror).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Really delete every key of the prefix.")] = False,
    config: Config = None,
) -> None:
    """Delete every key of a mirror (refused while a writer holds the lease)."""
    from service.cli.common import fail
    from service.sink.clear import clear_prefix

    settings = _settings(config, redis=redis, key_prefix=prefix)
    if settings.redis is None:
        raise fail("no Redis URL: --redis or BINLOG_MIRROR_REDIS")
    if not yes:
        raise fail(f"this deletes every key under {settings.key_prefix}:* in {settings.redis}: add --yes")
    try:
        deleted = asyncio.run(clear_prefix(settings.redis.url.get_secret_value(), settings.key_prefix))
    except ReplicatorError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"deleted {deleted} key(s) under {settings.key_prefix}:*")
