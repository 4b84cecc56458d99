"""Stream FILE from START to END from the server with binlog-mirror's transport (for benchmarks.stream).

    python -m benchmarks.ours_stream MYSQL_URL FILE START END

`service.transport.BinlogSource` with a start of BinlogPosition(FILE, START); counts the row
changes of the Transactions it yields until one ends at or after END. A concurrent task measures
event-loop lag (how late `asyncio.sleep(0.01)` wakes up) the whole time, on the wall clock and on
the process's CPU clock: CPU time used while the probe slept, minus 10 ms. The reader is busy the
whole time, so the CPU-clock figure is the lag an otherwise idle machine would show; on a shared
machine the wall clock adds the time other processes had the cores. Prints one JSON line:
{"rows", "transactions", "seconds", "cpu_seconds", "lag_p50_ms", "lag_p99_ms", "lag_max_ms",
"lag_cpu_p99_ms", "lag_samples"}; cpu_seconds is the process's CPU time over the same span (start-up
and imports excluded: the figure to compare two versions with).
The timer covers connect + preflight + dump + all transactions (the peers time from their
first event; the difference is a few milliseconds).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from benchmarks.harness import percentile
from service.checkpoint import BinlogPosition
from service.cli.runtime import tune_gc
from service.settings import Settings
from service.transport.source import BinlogSource

SERVER_ID = 9903
PROBE = 0.01


async def _probe(lags: list[float], cpu_lags: list[float]) -> None:
    while True:
        t, cpu = time.perf_counter(), time.process_time()
        await asyncio.sleep(PROBE)
        lags.append(time.perf_counter() - t - PROBE)
        cpu_lags.append(max(0.0, time.process_time() - cpu - PROBE))


async def main(url: str, file: str, start: int, end: int) -> None:
    settings = Settings(mysql=url, server_id=SERVER_ID)
    target = BinlogPosition(file, end)
    lags: list[float] = []
    cpu_lags: list[float] = []
    rows = txns = 0
    t0, cpu0 = time.perf_counter(), time.process_time()
    probe = asyncio.create_task(_probe(lags, cpu_lags))
    async with BinlogSource(settings, BinlogPosition(file, start)) as source:
        tune_gc()  # as `binlog-mirror stream` does once started (service/cli/stream.py)
        async for txn in source:
            rows += len(txn.changes)
            txns += 1
            if txn.end.position >= target:
                break
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
    probe.cancel()
    ms = [x * 1000 for x in lags]
    print(
        json.dumps(
            {
                "rows": rows,
                "transactions": txns,
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "lag_p50_ms": percentile(ms, 50),
                "lag_p99_ms": percentile(ms, 99),
                "lag_max_ms": max(ms, default=0.0),
                "lag_cpu_p99_ms": percentile([x * 1000 for x in cpu_lags], 99),
                "lag_samples": len(ms),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
