"""binlog-mirror's Replicator in a process of its own (for benchmarks.e2e and benchmarks.fanout).

    python -m benchmarks.ours_e2e replay MYSQL REDIS PREFIX FILE START END [MAX_ROWS]
    python -m benchmarks.ours_e2e live MYSQL REDIS PREFIX TABLES [--expect N] [--record FILE] [--api]
                                         [--ws-queue N]

replay: mirror the `bench.*` tables from FILE:START with `start = "FILE:START"` (the way
`binlog-mirror run --config` chooses a start with no stored checkpoint) until the stored checkpoint
reaches END (or MAX_ROWS row changes were applied: a slice of a workload, for profiling); prints
{"rows", "transactions", "seconds", "checkpoint"}. The prefix is fresh, and its
`__tables` set is seeded with the bench tables first: without that the first session would
copy the tables from the source (docs/mirror.md, "No checkpoint yet") while replaying, and this
benchmark measures binlog -> Redis only. BINLOG_MIRROR_VALUE_MODE=json: the json layout (one
string per row) instead of the default hash per row.

live: start at the source's current position (on_no_checkpoint = now), print
{"ready": true, "pid", "port"} once streaming, then run until SIGTERM/SIGINT or until --expect row
changes were applied. --record FILE writes, for every applied change, the CLOCK_MONOTONIC time its
transaction was applied (Redis EXEC returned, before the websocket hand-off), indexed by the
row's `id` column. --api serves the HTTP API + websocket in the same event loop on a free port.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from redis.asyncio import Redis

from benchmarks.harness import clock
from service.checkpoint import BinlogPosition
from service.cli.runtime import tune_gc
from service.pipeline.replicator import Replicator
from service.pipeline.status import State
from service.settings import Settings
from service.shaping import Shapes
from service.sink.keys import KeyLayout
from service.transactions import Transaction

REPLAY_TABLES = (("bench", "t_insert"), ("bench", "t_small"))


def shaped_tables() -> dict[str, dict[str, object]]:
    """BENCH_SHAPE=indexed: the bench tables with a key template, `exclude` and a unique and a set
    index (issue 40's benchmark; the updates change no indexed column); BENCH_SHAPE=moving: the
    set index on `flag`, which every update changes (each update moves the row between sets)."""
    kind = os.environ.get("BENCH_SHAPE", "")
    if not kind:
        return {}
    column = {"indexed": "state", "moving": "flag"}[kind]
    return {
        f"{schema}.{table}": {  # a section each: one glob's templates would name one key space
            "key": f"{table}:{{id}}",
            "exclude": ["body"],
            "index": [
                {"kind": "unique", "key": f"{table}-by-id:{{id}}"},  # the only UNIQUE index is the key
                {"kind": "set", "key": f"{table}-by-{column}:{{{column}}}"},
            ],
        }
        for schema, table in REPLAY_TABLES
    }


async def replay(
    mysql: str, redis: str, prefix: str, file: str, start: int, end: int, max_rows: int = 0
) -> None:
    settings = Settings(
        mysql=mysql,
        redis=redis,
        tables=["bench.*"],
        key_prefix=prefix,
        start=f"{file}:{start}",
        # One replica id per binlog file: the workloads run back to back, and with one id each
        # process's preflight would wait (up to a heartbeat, 5 s) for the previous process's dump
        # thread to leave the server's replica list (a live twin guard; the peer's library has
        # none). A restart of the real service pays that wait once.
        server_id=10_000 + int(file.rsplit(".", 1)[-1]) % 10_000,
        # Settings() alone reads no environment (the service's load_settings does): the layout
        # is taken from it here so that BINLOG_MIRROR_VALUE_MODE=json measures the json layout.
        value_mode=os.environ.get("BINLOG_MIRROR_VALUE_MODE") or "hash",
        # BINLOG_MIRROR_PLAIN_INSERTS=false: every call as the apply script (docs/BENCHMARKS.md)
        plain_inserts=os.environ.get("BINLOG_MIRROR_PLAIN_INSERTS", "true").lower() not in ("false", "0"),
        table=shaped_tables(),
    )
    layout = KeyLayout(prefix)
    client = Redis.from_url(redis)
    await client.sadd(layout.tables_key, *(layout.table_id(s, t) for s, t in REPLAY_TABLES))
    if settings.table:  # written in this shape already: no copy at start
        shapes = Shapes(settings.table_sections(), prefix)
        fingerprints = {layout.table_id(s, t): shapes.fingerprint(s, t) for s, t in REPLAY_TABLES}
        await client.hset(layout.shapes_key, mapping=fingerprints)
    target = BinlogPosition(file, end)
    replicator = Replicator(settings)
    rows = txns = 0
    done_at = 0.0

    def on_applied(txn: Transaction, first_seq: int) -> None:
        nonlocal rows, txns, done_at
        if done_at:
            return  # stop() lets the batch in flight finish: transactions past END are not counted
        rows += len(txn.changes)
        txns += 1
        if txn.end.position >= target or max_rows and rows >= max_rows:
            done_at = time.perf_counter()
            replicator.stop()

    replicator.add_applied_hook(on_applied)
    t0 = time.perf_counter()
    tune_gc()  # as `binlog-mirror run` does (service/cli/run.py)
    await replicator.run()
    stored = {k.decode(): v.decode() for k, v in (await client.hgetall(layout.checkpoint_key)).items()}
    await client.aclose()
    if not done_at:
        raise SystemExit(f"replicator stopped before {target}: {replicator.status().errors}")
    print(
        json.dumps(
            {"rows": rows, "transactions": txns, "seconds": done_at - t0, "checkpoint": stored.get("id")}
        )
    )


async def live(args: argparse.Namespace) -> None:
    settings = Settings(
        mysql=args.mysql,
        redis=args.redis,
        tables=[args.tables],
        key_prefix=args.prefix,
        start="now",
        on_no_checkpoint="now",
        server_id=9906,
        api_port=0,
        **({"ws_queue_events": args.ws_queue} if args.ws_queue else {}),
    )
    replicator = Replicator(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, replicator.stop)
    # Preallocated (RSS stays honest), and only when recorded: 8 bytes per expected row.
    applied_at = array.array("d", bytes(8 * (args.expect + 1) if args.record else 0))
    count = 0

    def on_applied(txn: Transaction, first_seq: int) -> None:
        nonlocal count
        now = clock()
        if args.record:
            for change in txn.changes:
                row = change.after or change.before or {}
                i = row.get("id")
                if isinstance(i, int) and 0 < i <= args.expect:
                    applied_at[i] = now
        count += len(txn.changes)
        if args.expect and count >= args.expect:
            replicator.stop()

    replicator.add_applied_hook(on_applied)
    tune_gc()  # as `binlog-mirror run` does (service/cli/run.py)
    tasks = [asyncio.create_task(replicator.run(), name="replicator")]
    server = None
    if args.api:
        from api.main import create_app
        from api.server import ApiServer

        server = ApiServer(create_app(settings, replicator), settings)
        tasks.append(asyncio.create_task(server.serve(), name="api"))
        await server.started.wait()
    while replicator.status().state not in (State.STREAMING, State.FAILED):
        await asyncio.sleep(0.05)
    port = server.port if server else None
    print(json.dumps({"ready": True, "port": port}), flush=True)
    await tasks[0]
    if server is not None:
        server.request_exit()
        await tasks[1]
    if args.record:
        Path(args.record).write_bytes(applied_at.tobytes())
    print(json.dumps({"applied": count, "status": replicator.status().state}))


def main() -> None:
    logging.basicConfig(level=os.environ.get("BENCH_LOG", "WARNING"), stream=sys.stderr)
    if sys.argv[1] == "replay":
        a = sys.argv[2:]
        asyncio.run(replay(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6]) if len(a) > 6 else 0))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("mysql")
    parser.add_argument("redis")
    parser.add_argument("prefix")
    parser.add_argument("tables")
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--record", default="")
    parser.add_argument("--api", action="store_true")
    parser.add_argument("--ws-queue", type=int, default=0, help="ws_queue_events (default: the setting's)")
    asyncio.run(live(parser.parse_args()))


if __name__ == "__main__":
    main()
