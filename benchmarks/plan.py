"""Apply-planner micro-benchmark: µs per row change to turn decoded rows into Lua instructions.

    .venv/bin/python -m benchmarks.plan [ROWS]

Decodes the first ROWS (default 50,000) row changes of the `inserts` workload's binlog (written by
`python -m benchmarks.decode`) and times `service.sink.plan.Planner.change` over them (CPU time),
best of 5.
Pure CPU, no server: the part of the binlog -> Redis path that runs in our process per row.
"""

from __future__ import annotations

import json
import sys
import time

from benchmarks.workload import WORK
from service.binlog import BinlogDecoder, RowChange, RowsEvent, read_binlog_file
from service.sink.keys import KeyLayout
from service.sink.plan import Planner


def main() -> None:
    want = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    manifest = json.loads((WORK / "workloads-1000000.json").read_text())
    inserts = next(w for w in manifest if w["name"] == "inserts")
    path = WORK / "stack" / "mariadb" / "binlog" / inserts["file"]
    decoder = BinlogDecoder(file=path.name)
    changes: list[RowChange] = []
    for raw in read_binlog_file(path):
        for ev in decoder.decode_events(raw):
            if isinstance(ev, RowsEvent):
                changes.extend(ev.changes)
        if len(changes) >= want:
            break
    planner = Planner(KeyLayout("bench"), lambda schema, table: ("id",))
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()  # CPU time: the benchmark machine is shared
        args = sum(len(planner.change(ch) or ()) for ch in changes)
        best = min(best, time.process_time() - t0)
    print(
        f"{len(changes):,} changes: {best / len(changes) * 1e6:.2f} µs/change, {args / len(changes):.1f} args"
    )


if __name__ == "__main__":
    main()
