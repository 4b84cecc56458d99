"""`decode`'s JSON lines (service/jsonlines.py `row_change_lines`, written straight from the decoded
values) are byte for byte the canonical form, orjson.dumps(row_change_to_dict(change)), on every
real binlog the tests hold: the shared vectors and the MariaDB fixtures."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from binlog_text import FIXTURES

from service.binlog import BinlogDecoder, RowChange, RowsEvent, read_binlog_file
from service.binlog.canonical import row_change_to_dict
from service.binlog.jsonb import JSON_NULL
from service.binlog.rowchange import EventSpan, Op
from service.errors import DecodeError
from service.jsonlines import row_change_lines

FILES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".py"))


def _canonical(changes: list[RowChange]) -> bytes:
    return b"".join(orjson.dumps(row_change_to_dict(c)) + b"\n" for c in changes)


def _events(path: Path) -> list[RowsEvent]:
    decoder = BinlogDecoder(file=path.name)
    out: list[RowsEvent] = []
    try:
        for raw in read_binlog_file(path):
            out += [e for e in decoder.decode_events(raw) if isinstance(e, RowsEvent)]
    except DecodeError:  # undecodable-old-hires: compare what comes before the error
        pass
    return out


def test_the_fixtures_cover_every_value_type_the_fast_path_hands_on() -> None:
    kinds = {
        type(v)
        for path in FILES
        for event in _events(path)
        for c in event.changes
        for row in (c.before, c.after)
        if row
        for v in row.values()
    }
    assert {int, str, float, bytes, Decimal, datetime, date, timedelta, dict} <= kinds, kinds
    assert len(FILES) > 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_decode_lines_equal_the_canonical_form_on_every_fixture(path: Path) -> None:
    events = _events(path)
    for event in events:
        assert row_change_lines(event.changes) == _canonical(list(event.changes)), event.header
    # All of a file's changes in one call: the frame changes from one rows event to the next.
    every = [c for e in events for c in e.changes]
    assert row_change_lines(every) == _canonical(every)


def test_awkward_names_and_values_keep_the_canonical_bytes() -> None:
    """Values no fixture holds: names that contain the keys the frame is cut at, JSON documents
    with reserved keys and nested values whose canonical form differs from orjson's own."""
    span = EventSpan('f"before":{}', 4, 400)
    rows = [
        {"id": 1, '"after":{}': '"before":{}', "j": {"json": None}, "d": {"a": Decimal("1.5")}},
        {"id": 2, "j": [Decimal("0.1"), datetime(2024, 1, 2, 3, 4, 5)], "n": JSON_NULL},
        {"ts": datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC), "t": timedelta(hours=-1, microseconds=7)},
        {"dt": datetime(9, 1, 1), "b": b"\x00\xff", "x": Decimal("0E-30"), "v": (1.5, 2.0)},
        {},
    ]
    changes = [
        RowChange(Op.INSERT, 's"before":{}', "t{}", None, rows[0], span, 1, 2, "0-1-2"),
        RowChange(Op.UPDATE, 's"before":{}', "t{}", rows[1], rows[2], span, 1, 2, "0-1-2"),
        RowChange(Op.DELETE, "s", "t", rows[3], None, EventSpan("f", 1, 2), 3, 4, None),
        RowChange(Op.UPDATE, "s", "t", rows[4], rows[4], EventSpan("f", 1, 2), 3, 4, None),
    ]
    assert row_change_lines(changes) == _canonical(changes)
    assert row_change_lines([]) == b""
