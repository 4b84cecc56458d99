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
from typing import Annotated, Any

import typer

from service.batch_cli import split_globs
from service.errors import ConfigError, ReplicatorError
from service.settings import MySQLUrl, Settings, load_settings

__all__ = ["demo", "run"]

log = logging.getLogger(__name__)


def run(
    mysql: Annotated[
        str | None, typer.Option("--mysql", help="mysql://user:pass@host:port (replication user).")
    ] = None,
    redis: Annotated[str | None, typer.Option("--redis", help="redis://host:port/db")] = None,
    tables: Annotated[
        list[str] | None,
        typer.Option("--tables", help="schema.table globs to mirror (repeatable; a,b works)."),
    ] = None,
    exclude_tables: Annotated[
        list[str] | None,
        typer.Option("--exclude-tables", help="schema.table globs to leave out; wins over --tables."),
    ] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis key prefix (default mirror).")] = None,
    on_no_checkpoint: Annotated[
        str | None, typer.Option("--on-no-checkpoint", help="now | start | refuse (first start only).")
    ] = None,
    value_mode: Annotated[str | None, typer.Option("--value-mode", help="hash | json")] = None,
    changelog: Annotated[
        int | None, typer.Option("--changelog-maxlen", help="Keep a change-log stream of ~N entries.")
    ] = None,
    server_id: Annotated[int | None, typer.Option("--server-id", help="Replica server id.")] = None,
    api: Annotated[bool, typer.Option("--api/--no-api", help="Serve the HTTP API too.")] = True,
    api_port: Annotated[int | None, typer.Option("--api-port")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.")] = None,
) -> None:
    """Mirror the selected tables into Redis until SIGTERM/SIGINT."""
    from service.cli import fail  # the CLI module registers this command; import lazily

    try:
        settings = load_settings(
            config,
            mysql=mysql,
            redis=redis,
            tables=split_globs(tables),
            exclude_tables=split_globs(exclude_tables),
            key_prefix=prefix,
            on_no_checkpoint=on_no_checkpoint,
            value_mode=value_mode,
            changelog_maxlen=changelog,
            server_id=server_id,
            api_port=api_port,
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
    except ReplicatorError as exc:
        raise fail(str(exc)) from None


def demo(
    api_port: Annotated[int | None, typer.Option("--api-port")] = None,
) -> None:
    """Start a throwaway local MariaDB + Redis (.stack/) and mirror a trickle of demo writes."""
    from service.cli import fail

    try:
        settings = load_settings(None, api_port=api_port)
        settings, demo_admin = _demo_settings(settings)
        asyncio.run(_main(settings, api=True, demo_admin=demo_admin))
    except ReplicatorError as exc:
        raise fail(str(exc)) from None


def _demo_settings(settings: Settings) -> tuple[Settings, MySQLUrl]:
    from service.pipeline.demo import DEMO_SCHEMA
    from service.stack import LocalStack

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
    from service.pipeline.replicator import Replicator
    from service.runtime import tune_gc

    demo_task: asyncio.Task[None] | None = None
    if demo_admin is not None:
        from service.pipeline.demo import create_demo_schema, demo_writes

        await create_demo_schema(demo_admin)
        demo_task = asyncio.create_task(demo_writes(demo_admin), name="demo-writes")
    replicator = Replicator(settings)
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        log.info("%s received: stopping after the transactions in flight", sig.name)
        replicator.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    api_task: asyncio.Task[None] | None = None
    if api:
        from api.main import create_app
        from api.server import serve

        api_task = asyncio.create_task(serve(create_app(settings, replicator), settings), name="api")
    tune_gc()
    try:
        await replicator.run()
    finally:
        for task in (demo_task, api_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
