"""Every row change of the real binlogs in tests/fixtures/binlog (every column type, NULLs,
several tables), decoded once: the vectors of the sink's pure tests."""

from __future__ import annotations

import contextlib
from functools import cache
from pathlib import Path

from service.binlog import BinlogDecoder, RowChange, RowsEvent, read_binlog_file
from service.errors import DecodeError

ROOT = Path(__file__).resolve().parent / "fixtures" / "binlog"


@cache
def fixture_changes() -> tuple[RowChange, ...]:
    out: list[RowChange] = []
    for path in sorted(p for p in ROOT.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".py")):
        decoder = BinlogDecoder(file=path.name)
        with contextlib.suppress(DecodeError):  # a fixture that ends in bad bytes: what comes before
            for raw in read_binlog_file(path):
                for ev in decoder.decode_events(raw):
                    if isinstance(ev, RowsEvent):
                        out += [c for c in ev.changes if c.after or c.before]
    return tuple(out)
