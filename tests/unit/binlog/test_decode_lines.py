"""`decode`'s JSON lines (service/jsonlines.py `row_change_lines`, written straight from the decoded
values) are byte for byte the canonical form, orjson.dumps(row_change_to_dict(change)), on every
real binlog the tests hold: the shared vectors and the MariaDB fixtures. `decode` decodes with
DecodeOptions(text_values=True) (DECIMAL and temporal columns straight to their canonical text):
its lines are compared with the canonical form of the typed values, the reference, and its
converters with the typed ones on random bytes (errors included)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from binlog_text import FIXTURES

from service.binlog import (
    BinlogDecoder,
    Column,
    ColumnType,
    DecodeOptions,
    RowChange,
    RowsEvent,
    read_binlog_file,
)
from service.binlog.canonical import row_change_to_dict, value_to_json
from service.binlog.decimal import _layout
from service.binlog.jsonb import JSON_NULL
from service.binlog.rowchange import EventSpan, Op
from service.binlog.stats import DecoderStats
from service.binlog.values import FixedSpec, column_spec
from service.errors import DecodeError
from service.jsonlines import has_documents, row_change_lines

FILES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".py"))


def _canonical(changes: list[RowChange]) -> bytes:
    return b"".join(orjson.dumps(row_change_to_dict(c)) + b"\n" for c in changes)


def _decode(path: Path, text_values: bool = False) -> tuple[list[RowsEvent], str | None]:
    """The rows events of a file, and the error that ended it (undecodable-old-hires), if any."""
    decoder = BinlogDecoder(DecodeOptions(text_values=text_values), file=path.name)
    out: list[RowsEvent] = []
    try:
        for raw in read_binlog_file(path):
            out += [e for e in decoder.decode_events(raw) if isinstance(e, RowsEvent)]
    except DecodeError as exc:  # compare what comes before the error, and the error
        return out, f"{type(exc).__name__}: {exc}"
    return out, None


def _events(path: Path) -> list[RowsEvent]:
    return _decode(path)[0]


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
    no_documents = [changes[2], RowChange(Op.UPDATE, "s", "t", rows[2], rows[3], span, 1, 2, None)]
    assert row_change_lines(no_documents, documents=False) == _canonical(no_documents)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_text_values_give_the_canonical_form_of_the_typed_values_on_every_fixture(path: Path) -> None:
    typed, typed_error = _decode(path)
    text, text_error = _decode(path, text_values=True)
    assert text_error == typed_error
    assert len(text) == len(typed)
    for t, e in zip(text, typed, strict=True):
        expected = _canonical(list(e.changes))
        documents = has_documents(t.table)
        assert row_change_lines(t.changes, documents) == expected, e.header  # as `decode` calls it
        assert row_change_lines(t.changes) == expected, e.header
        assert row_change_lines(e.changes, documents) == expected, e.header
        assert [row_change_to_dict(c) for c in t.changes] == [row_change_to_dict(c) for c in e.changes]
        if not documents:  # the promise row_change_lines(documents=False) relies on
            values = [v for c in t.changes for r in (c.before, c.after) if r for v in r.values()]
            assert not any(isinstance(v, (dict, list)) for v in values)


_FSP_TYPES = (ColumnType.DATETIME2, ColumnType.TIMESTAMP2, ColumnType.TIME2)
_TEXT_TYPES = {ColumnType.NEWDECIMAL, ColumnType.DATE, *_FSP_TYPES}


def test_the_fixtures_cover_the_text_values() -> None:
    """What the comparison above covers: every fsp of the three fractional types, DECIMALs of
    several precisions and scales with negative values and zeros, zero and partial dates; and
    text_values leaves no Decimal, date, datetime or timedelta from those columns."""
    covered: dict[tuple[ColumnType, int], set[str]] = {}
    for path in FILES:
        for event in _decode(path, text_values=True)[0]:
            for col in event.table.columns:
                if col.type not in _TEXT_TYPES:
                    continue
                for c in event.changes:
                    for row in (c.before, c.after):
                        if row and row.get(col.name) is not None:
                            value = row[col.name]
                            assert type(value) is str, (path, col, value)
                            covered.setdefault((col.type, col.meta), set()).add(value)
    for t in _FSP_TYPES:
        assert {meta for typ, meta in covered if typ == t} >= set(range(7)), t
    decimals = {meta: v for (typ, meta), v in covered.items() if typ == ColumnType.NEWDECIMAL}
    assert len(decimals) >= 5
    texts = set().union(*decimals.values())
    assert {"0.00", "-0.01", "-0.99999", "99999999999999999999"} <= texts
    assert any(len(v) > 60 for v in texts)  # DECIMAL(65,30)
    dates = covered[(ColumnType.DATE, 0)]
    assert {"0000-00-00", "2020-02-00", "2024-02-29"} <= dates
    assert "0000-00-00 00:00:00" in covered[(ColumnType.DATETIME2, 0)]
    assert any(v.startswith("-") for v in covered[(ColumnType.TIME2, 0)])


def _outcome(convert: Callable[..., Any], *args: Any, canonical: bool = False) -> tuple[str, Any]:
    try:
        value = convert(*args)
    except DecodeError as exc:
        return type(exc).__name__, str(exc)
    return "ok", value_to_json(value) if canonical else value


# Makers of a column's bytes from random field values, a few out of range: mostly values that
# exist, which random bytes seldom are. (rnd, TABLE_MAP meta, size) -> bytes
def _datetime2(rnd: random.Random, meta: int, size: int) -> bytes:
    y = rnd.choice((0, 1, 999, 1000, 2024, 9999, 10000, rnd.randrange(10083)))
    m, d = rnd.randrange(14), rnd.randrange(32)
    h, mi, s = rnd.choice((0, 23, 24, rnd.randrange(32))), rnd.randrange(64), rnd.randrange(64)
    intpart = ((y * 13 + m) << 5 | d) << 17 | h << 12 | mi << 6 | s
    return (intpart + 0x8000000000).to_bytes(5, "big") + rnd.randbytes(size - 5)


def _date(rnd: random.Random, meta: int, size: int) -> bytes:
    y = rnd.choice((0, 1, 4, 100, 400, 1900, 2000, 2024, 9999, 10000, rnd.randrange(1 << 15)))
    m, d = rnd.randrange(16), rnd.randrange(32)
    return (y << 9 | m << 5 | d).to_bytes(3, "little")


def _decimal(rnd: random.Random, meta: int, size: int) -> bytes:
    """decimal2bin of random digit groups (now and then one out of range), as decimal.py reads it."""
    value = 0
    for shift, _, limit, _, _ in _layout(meta >> 8, meta & 0xFF):
        group = rnd.choice((0, limit, limit + 1, rnd.randrange(limit + 1), rnd.randrange(limit + 1)))
        value |= group << shift
    sign_bit = 1 << (size * 8 - 1)
    if rnd.randrange(2):  # negative: the sign bit clear, the rest inverted
        value ^= sign_bit ^ ((1 << size * 8) - 1)
    else:
        value |= sign_bit
    return value.to_bytes(size, "big")


Maker = Callable[[random.Random, int, int], bytes]
_DECIMALS = [(1, 0), (5, 5), (9, 0), (10, 2), (12, 2), (18, 9), (19, 10), (20, 0), (30, 30)]
_DECIMALS += [(65, 0), (65, 30)]  # (precision, scale)
_CASES: list[tuple[ColumnType, int, Maker | None]] = [
    *[(ColumnType.NEWDECIMAL, p << 8 | s, make) for p, s in _DECIMALS for make in (None, _decimal)],
    *[(t, fsp, None) for t in _FSP_TYPES for fsp in range(7)],
    *[(ColumnType.DATETIME2, fsp, _datetime2) for fsp in range(7)],
    (ColumnType.DATE, 0, None),
    (ColumnType.DATE, 0, _date),
]


@pytest.mark.parametrize(("type_", "meta", "make"), _CASES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_text_converters_equal_the_typed_ones_on_random_bytes(
    type_: ColumnType, meta: int, make: Maker | None
) -> None:
    """The same text as value_to_json of the typed value, and the same error, for any bytes:
    random ones (mostly out-of-range fields: the errors and MySQL's zero/partial-date text) and
    ones packed from random field values (mostly dates that exist, leap days, years < 1000)."""
    col = Column(0, "c", type_, meta, True)
    typed = column_spec(col, DecoderStats())
    text = column_spec(col, DecoderStats(), text=True)
    assert isinstance(typed, FixedSpec) and isinstance(text, FixedSpec) and text.in_place is not None
    assert (text.code, text.size) == (typed.code, typed.size)
    to_typed, to_text, in_place = typed.convert, text.convert, text.in_place
    assert to_typed is not None and to_text is not None
    rnd = random.Random(f"{type_}-{meta}-{make is None}")
    kinds = set()
    for _ in range(3000):
        raw = rnd.randbytes(text.size) if make is None else make(rnd, meta, text.size)
        expected = _outcome(to_typed, raw, canonical=True)
        assert _outcome(to_text, raw) == expected, raw.hex()
        padded = b"\xff" * 3 + raw + b"\x00"  # read in place in a row image
        assert _outcome(in_place, padded, 3) == expected, raw.hex()
        kinds.add(expected[0])
    # random bytes of a wide DECIMAL hardly ever hold nine-digit groups: _decimal covers those
    assert "ok" in kinds or (make is None and type_ == ColumnType.NEWDECIMAL and meta >> 8 > 20)
