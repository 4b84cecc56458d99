"""Count the row changes binlog-mirror's decoder produces from a binlog file (for benchmarks.decode).

    python -m benchmarks.ours_file FILE START END

Reads from offset 4 (the FORMAT_DESCRIPTION event must be decoded first); times the whole
read + decode loop and counts rows of events that start in [START, END).
"""

from __future__ import annotations

import json
import sys
import time

from service.binlog import BinlogDecoder, RowsEvent, scan_binlog_file


def main(path: str, start: int, end: int) -> None:
    decoder = BinlogDecoder(file=path)
    rows = 0
    t0 = time.perf_counter()
    for offset, data in scan_binlog_file(path, 4, end):
        event = decoder.feed(data, offset)
        if type(event) is RowsEvent and offset >= start:
            rows += len(event.changes)
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
