"""`binlog-mirror run`: the replicator (+ the HTTP API in the same event loop).

`run` needs both servers (flags, env vars or config) and names the missing settings otherwise.
`binlog-mirror demo` starts the local stack and a trickle of demo writes: the README's demo
command. Demo mode is never a fallback: in a container a forgotten setting must not install
MariaDB.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from service.cli.common import fail, split_globs
from service.errors import ConfigError, ReplicatorError

if TYPE_CHECKING:
    from service.settings import MySQLUrl, Settings

__all__ = ["demo", "run"]

log = logging.getLogger(__name__)

# After SIGTERM/SIGINT the replicator finishes the batch in flight; if it has not stopped this
# long after the signal (a source or Redis gone silent mid-call), it is cancelled: the mirror
# stays consistent (an apply call is atomic in Redis; the next start resumes from the stored
# checkpoint). Cleanup after that is bounded too (docs/mirror.md, "Stopping").
STOP_GRACE_SECONDS = 10.0


def run(
    mysql: Annotated[
        str | None,
        typer.Option(
            "--mysql",
            help="mysql://user@host:port (replication user). Keep the password out of argv (`ps` shows "
            "it): BINLOG_MIRROR_MYSQL, the config file, or --mysql-password-file.",
        ),
    ] = None,
    redis: Annotated[str | None, typer.Option("--redis", help="redis://host:port/db")] = None,
    mysql_password_file: Annotated[
        Path | None, typer.Option("--mysql-password-file", help="Read the MySQL password from this file.")
    ] = None,
    redis_password_file: Annotated[
        Path | None, typer.Option("--redis-password-file", help="Read the Redis password from this file.")
    ] = None,
    redis_tls_ca_file: Annotated[
        Path | None, typer.Option("--redis-tls-ca-file", help="rediss://: the CA of Redis' certificate.")
    ] = None,
    redis_tls_cert_file: Annotated[
        Path | None, typer.Option("--redis-tls-cert-file", help="rediss://: a client certificate (PEM).")
    ] = None,
    redis_tls_key_file: Annotated[
        Path | None, typer.Option("--redis-tls-key-file", help="rediss://: the client certificate's key.")
    ] = None,
    start: Annotated[
        str | None,
        typer.Option("--from", help="Without a checkpoint: now | start | FILE:POS | GTID set (default now)."),
    ] = None,
    tables: Annotated[
        list[str] | None,
        typer.Option("--tables", help="schema.table globs to mirror (repeatable; a,b works)."),
    ] = None,
    exclude_tables: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude-tables", "--exclude", help="schema.table globs to leave out; wins over --tables."
        ),
    ] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis key prefix (default mirror).")] = None,
    on_no_checkpoint: Annotated[
        str | None, typer.Option("--on-no-checkpoint", help="now | start | refuse (first start only).")
    ] = None,
    on_history_mismatch: Annotated[
        str | None,
        typer.Option(
            "--on-history-mismatch",
            help="stop | recopy: when the source's event at the checkpoint is another one (default stop).",
        ),
    ] = None,
    verify_rows_per_second: Annotated[
        float | None,
        typer.Option(
            "--verify-rows-per-second",
            help="Background verifier: compare this many rows/s with the source (default 0: off).",
        ),
    ] = None,
    verify_repair: Annotated[
        bool | None,
        typer.Option(
            "--verify-repair/--no-verify-repair", help="The verifier rewrites the rows it finds wrong."
        ),
    ] = None,
    value_mode: Annotated[str | None, typer.Option("--value-mode", help="hash | json")] = None,
    changelog: Annotated[
        int | None, typer.Option("--changelog-maxlen", help="Keep a change-log stream of ~N entries.")
    ] = None,
    server_id: Annotated[int | None, typer.Option("--server-id", help="Replica server id.")] = None,
    api: Annotated[bool, typer.Option("--api/--no-api", help="Serve the HTTP API too.")] = True,
    api_host: Annotated[str | None, typer.Option("--api-host", help="Address to listen on.")] = None,
    api_port: Annotated[int | None, typer.Option("--api-port")] = None,
    api_token: Annotated[
        str | None,
        typer.Option("--api-token", help="Bearer token for the API (prefer BINLOG_MIRROR_API_TOKEN)."),
    ] = None,
    api_token_file: Annotated[
        Path | None,
        typer.Option("--api-token-file", help="The control token: the first line of this file."),
    ] = None,
    api_read_token_file: Annotated[
        Path | None,
        typer.Option("--api-read-token-file", help="The read-only token: the first line of this file."),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.")] = None,
) -> None:
    """Mirror the selected tables into Redis until SIGTERM/SIGINT."""
    from service.settings import load_settings

    try:
        settings = load_settings(
            config,
            mysql=mysql,
            redis=redis,
            tables=split_globs(tables),
            exclude_tables=split_globs(exclude_tables),
            key_prefix=prefix,
            on_no_checkpoint=on_no_checkpoint,
            on_history_mismatch=on_history_mismatch,
            verify_rows_per_second=verify_rows_per_second,
            verify_repair=verify_repair,
            value_mode=value_mode,
            changelog_maxlen=changelog,
            server_id=server_id,
            api_host=api_host,
            api_port=api_port,
            api_token=api_token,
            api_token_file=api_token_file,
            api_read_token_file=api_read_token_file,
            start=start,
            mysql_password_file=mysql_password_file,
            redis_password_file=redis_password_file,
            redis_tls_ca_file=redis_tls_ca_file,
            redis_tls_cert_file=redis_tls_cert_file,
            redis_tls_key_file=redis_tls_key_file,
        )
        missing = [
            f"BINLOG_MIRROR_{name.upper()}" for name in ("mysql", "redis") if getattr(settings, name) is None
        ]
        if missing:
            raise ConfigError(
                f"no server configured: set {' and '.join(missing)} (or --mysql/--redis, or mysql/redis"
                " in --config FILE); `binlog-mirror demo` runs against a throwaway local stack"
            )
        asyncio.run(_main(settings, api=api, demo_admin=None))
    except _Logged:
        raise typer.Exit(1) from None  # the replicator logged its error: printed once
    except ReplicatorError as exc:
        raise fail(str(exc)) from None


def demo(
    api_port: Annotated[int | None, typer.Option("--api-port")] = None,
) -> None:
    """Start a throwaway local MariaDB + Redis (.stack/) and mirror a trickle of demo writes."""
    from service.settings import load_settings

    try:
        settings = load_settings(None, api_port=api_port)
        settings, demo_admin = _demo_settings(settings)
        asyncio.run(_main(settings, api=True, demo_admin=demo_admin))
    except _Logged:
        raise typer.Exit(1) from None
    except ReplicatorError as exc:
        raise fail(str(exc)) from None


class _Logged(Exception):
    """The replicator stopped with an error it has logged already."""


def _demo_settings(settings: Settings) -> tuple[Settings, MySQLUrl]:
    from service.devtools.demo import DEMO_SCHEMA
    from service.devtools.stack import LocalStack
    from service.settings import MySQLUrl, load_settings

    info = LocalStack().up()
    log.info(
        "demo: local stack up (%s, %s); mirroring %s.*",
        info.mysql_url.split("@")[1],
        info.redis_url,
        DEMO_SCHEMA,
    )
    values: dict[str, Any] = settings.model_dump(exclude_unset=True)
    values.update(mysql=info.mysql_url, redis=info.redis_url)
    values.setdefault("tables", [f"{DEMO_SCHEMA}.*"])
    return load_settings(None, **values), MySQLUrl.parse(info.admin_url)


async def _main(settings: Settings, *, api: bool, demo_admin: MySQLUrl | None) -> None:
    from service.cli.runtime import tune_gc
    from service.pipeline.replicator import Replicator
    from service.startup import bind_api_socket, check_access
    from service.version import compiled, version

    if compiled():
        log.info("binlog-mirror %s, compiled decoder", version())
    else:  # installed without a C compiler (or BINLOG_MIRROR_COMPILE=0): about half the speed
        log.warning(
            "binlog-mirror %s runs the pure-Python decoder (not compiled): about half the speed", version()
        )
    await check_access(settings)  # a wrong password or grant stops here, with one line
    sock = bind_api_socket(settings) if api else None  # a busy port stops the process here
    demo_task: asyncio.Task[None] | None = None
    if demo_admin is not None:
        from service.devtools.demo import create_demo_schema, demo_writes

        await create_demo_schema(demo_admin)
        demo_task = asyncio.create_task(demo_writes(demo_admin), name="demo-writes")
    replicator = Replicator(settings)
    loop = asyncio.get_running_loop()
    run_task = asyncio.create_task(replicator.run(), name="replicator")
    forced: list[asyncio.TimerHandle] = []

    def force_stop() -> None:
        if not run_task.done():
            log.warning("not stopped %gs after the signal: cancelling the replicator", STOP_GRACE_SECONDS)
            run_task.cancel()

    def on_signal(sig: signal.Signals) -> None:
        log.info("%s received: stopping after the transactions in flight", sig.name)
        replicator.stop()
        if not forced:
            forced.append(loop.call_later(STOP_GRACE_SECONDS, force_stop))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    api_task: asyncio.Task[None] | None = None
    hub: Any = None
    if sock is not None:
        from api.main import create_app
        from api.server import ApiServer

        app = create_app(settings, replicator)
        hub = app.state.hub
        api_task = asyncio.create_task(ApiServer(app, settings, sock).serve(), name="api")
        api_task.add_done_callback(lambda _: replicator.stop())  # no API, no mirror: stop both
    tune_gc()
    try:
        try:
            await run_task
        except ReplicatorError as exc:
            raise _Logged() from exc
        except asyncio.CancelledError:
            if not forced or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise  # not our force_stop: someone cancelled this command
    finally:
        for handle in forced:
            handle.cancel()
        if hub is not None:  # before uvicorn stops: subscribers get the last changes, then 1001
            from api.server import close_subscribers

            await close_subscribers(hub)
        for task in (demo_task, api_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    if api_task is not None and api_task.done() and not api_task.cancelled():
        error = api_task.exception()
        if error is not None:
            raise error
