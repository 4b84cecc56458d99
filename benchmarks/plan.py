"""Apply-planner micro-benchmark: µs per row change to turn decoded rows into the apply IR and
encode it as the apply script's ARGV (service/sink/plan.py, codec.py).

    .venv/bin/python -m benchmarks.plan [ROWS]

Decodes the first ROWS (default 50,000) row changes of the `inserts` workload's binlog (written by
`python -m benchmarks.decode`) and times planning them in calls of 1,000 changes
(`Planner.transaction`) and encoding each call (`CallEncoder.body`), CPU time, best of 5.
Pure CPU, no server: the part of the binlog -> Redis path that runs in our process per row.
"""

from __future__ import annotations

import json
import sys
import time

from benchmarks.workload import WORK
from service.binlog import BinlogDecoder, RowChange, RowsEvent, read_binlog_file
from service.checkpoint import BinlogPosition, Checkpoint
from service.sink.codec import CallEncoder
from service.sink.ir import Op
from service.sink.keys import KeyLayout
from service.sink.plan import Planner
from service.transactions import Transaction


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
    encoder = CallEncoder(planner.layout)
    end = Checkpoint(BinlogPosition("bench-bin.000001", 4))
    calls = [
        Transaction(changes=tuple(changes[at : at + 1000]), ddl=(), gtid="", ts=0, end=end)
        for at in range(0, len(changes), 1000)
    ]
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()  # CPU time: the benchmark machine is shared
        args = 0
        for txn in calls:
            planner.begin_call()
            ops: list[Op] = []
            planner.transaction(ops, txn, ())
            args += len(encoder.body(ops))
        best = min(best, time.process_time() - t0)
    print(
        f"{len(changes):,} changes: {best / len(changes) * 1e6:.2f} µs/change, {args / len(changes):.1f} args"
    )


if __name__ == "__main__":
    main()
