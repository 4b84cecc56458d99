"""Row-decoding throughput: `.venv/bin/python tests/unit/binlog/bench_decode.py`.

Takes the real TABLE_MAP + single-row WRITE_ROWS of the 12-column `folder` table (INT,
2x VARCHAR, 6x BIGINT, 2x TINYINT, 2x TIMESTAMP2) from the MySQL 5.7 vector and repeats the row image to
make 1000-row events, as a bulk INSERT would. Reports rows/s for the decode alone.
"""

from __future__ import annotations

import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from service.binlog import BinlogDecoder, DecodeOptions, RowsEvent, read_binlog_file  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "fixtures/binlog/vectors/mysql-5.7/mysql-bin.checksum-crc32"
ROWS_PER_EVENT = 1000


def build() -> tuple[bytes, bytes, bytes]:
    evs = [bytes(r) for r in read_binlog_file(SRC)]
    fde = evs[0]
    i = next(k for k, e in enumerate(evs) if e[4] == 30)
    tmap, rows = evs[i - 1], evs[i]
    body = rows[19:]
    # post-header 10 bytes (table id 6, flags 2, extra len 2), width 1 byte, bitmap 2 bytes
    head_len = 10 + 1 + 2
    row = body[head_len:-4]
    new_body = body[:head_len] + row * ROWS_PER_EVENT
    size = 19 + len(new_body) + 4
    header = rows[:9] + size.to_bytes(4, "little") + (0).to_bytes(4, "little") + rows[17:19]
    event = header + new_body
    return fde, tmap, event + zlib.crc32(event).to_bytes(4, "little")


def main() -> None:
    fde, tmap, rows = build()
    decoder = BinlogDecoder(DecodeOptions())
    decoder.feed(fde)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 3:
        decoder.feed(tmap)
        ev = decoder.feed(rows)
        assert isinstance(ev, RowsEvent)
        n += len(ev.changes)
    dt = time.perf_counter() - t0
    print(f"{n / dt:,.0f} rows/s ({len(ev.table.columns)} columns)")  # noqa: T201


if __name__ == "__main__":
    main()
