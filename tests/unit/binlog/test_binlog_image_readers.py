"""Both row-image readers (generated Python, compiled-build StepReader) decode every real
binlog vector to the same row changes."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from binlog_text import FIXTURES, VECTORS

from service.binlog import BinlogDecoder, RowChange, RowsEvent, read_binlog_file, rows
from service.binlog.imagereader import StepReader

FILES = sorted(p for p in [*VECTORS.glob("mysql-*/*"), *(FIXTURES / "mariadb-10.11").glob("[0-9]*")])


def _changes(path: Path) -> tuple[list[RowChange], set[type]]:
    decoder = BinlogDecoder(file=path.name)
    out = [
        change
        for raw in read_binlog_file(path)
        for event in decoder.decode_events(raw)
        if isinstance(event, RowsEvent)
        for change in event.changes
    ]
    readers = {type(r) for plan in decoder._plans.values() for r in plan._cache.values()}
    return out, readers


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix != ".md"], ids=lambda p: p.name)
def test_step_readers_match_generated_readers(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "USE_STEP_READERS", False)
    generated, generated_kinds = _changes(path)
    monkeypatch.setattr(rows, "USE_STEP_READERS", True)
    stepped, stepped_kinds = _changes(path)
    assert stepped == generated
    assert StepReader not in generated_kinds
    assert stepped_kinds <= {StepReader}


def test_update_reuses_unchanged_values_of_the_before_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """StepReader converts a value once when an UPDATE leaves it unchanged: the after image
    holds the before image's object (the real vectors' UPDATEs change few columns)."""
    monkeypatch.setattr(rows, "USE_STEP_READERS", True)
    shared = 0
    for path in FILES:
        if path.suffix == ".md":
            continue
        for change in _changes(path)[0]:
            before, after = change.before, change.after
            if before is None or after is None or before.keys() != after.keys():
                continue
            for name, value in after.items():
                if isinstance(value, str | Decimal | datetime) and before[name] == value:
                    assert before[name] is value, (path.name, change.table, name)
                    shared += 1
    assert shared > 100
