"""DecodeOptions(stored_text=True), what the mirror's stream decodes with: DATE, DATETIME2, TIME2
and DECIMAL of scale <= 6 come as their canonical text, which must also be their text in Redis;
TIMESTAMP2 as a UtcText (its canonical text, stored in Redis as its UTC wall time).
On every fixture and vector, each value the mirror writes is compared with what the typed
values give today: hash fields, keys, foreign-key set members (both layouts), json-layout
documents, the websocket's and `stream`'s canonical form."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from binlog_text import FIXTURES

from service.binlog import BinlogDecoder, ColumnType, DecodeOptions, RowsEvent, read_binlog_file
from service.binlog.canonical import row_change_to_dict
from service.binlog.utctext import UtcText
from service.errors import DecodeError
from service.jsonlines import row_change_lines
from service.sink.fks import fk_text
from service.sink.values import hash_text, json_document, key_text

FILES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".py"))
TEXT_TYPES = {ColumnType.NEWDECIMAL, ColumnType.DATE, ColumnType.DATETIME2, ColumnType.TIME2}


def _decode(path: Path, stored_text: bool) -> tuple[list[RowsEvent], str | None]:
    decoder = BinlogDecoder(DecodeOptions(stored_text=stored_text), file=path.name)
    out: list[RowsEvent] = []
    try:
        for raw in read_binlog_file(path):
            out += [e for e in decoder.decode_events(raw) if isinstance(e, RowsEvent)]
    except DecodeError as exc:
        return out, f"{type(exc).__name__}: {exc}"
    return out, None


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_stored_text_writes_the_bytes_the_typed_values_write(path: Path) -> None:
    typed, typed_error = _decode(path, stored_text=False)
    text, text_error = _decode(path, stored_text=True)
    assert text_error == typed_error
    assert len(text) == len(typed)
    for t, e in zip(text, typed, strict=True):
        assert row_change_lines(t.changes) == row_change_lines(e.changes), e.header
        assert [row_change_to_dict(c) for c in t.changes] == [row_change_to_dict(c) for c in e.changes]
        for tc, ec in zip(t.changes, e.changes, strict=True):
            for trow, erow in ((tc.before, ec.before), (tc.after, ec.after)):
                assert json_document(trow) == json_document(erow)
                if not erow:
                    continue
                assert trow is not None and trow.keys() == erow.keys()
                for name, ev in erow.items():
                    tv = trow[name]
                    if ev is None:
                        assert tv is None
                        continue
                    assert hash_text(tv) == hash_text(ev), (path, name, ev)
                    assert key_text(tv) == key_text(ev), (path, name, ev)
                    assert fk_text(tv, False) == fk_text(ev, False) and fk_text(tv, True) == fk_text(ev, True)


def test_stored_text_covers_the_fixtures_text_columns_and_leaves_the_others_typed() -> None:
    kinds: dict[tuple[ColumnType, int], set[type]] = {}
    for path in FILES:
        for event in _decode(path, stored_text=True)[0]:
            for col in event.table.columns:
                for c in event.changes:
                    for row in (c.before, c.after):
                        if row and row.get(col.name) is not None:
                            kinds.setdefault((col.type, col.meta), set()).add(type(row[col.name]))
    for (typ, meta), types in kinds.items():
        if typ == ColumnType.NEWDECIMAL:
            assert types <= ({str} if meta & 0xFF <= 6 else {Decimal}), (meta >> 8, meta & 0xFF, types)
        elif typ in TEXT_TYPES:
            assert types == {str}, (typ, meta, types)
        elif typ == ColumnType.TIMESTAMP2:
            assert types <= {UtcText, str}, types  # str: the zero TIMESTAMP, as typed
    decimal_scales = {meta & 0xFF for typ, meta in kinds if typ == ColumnType.NEWDECIMAL}
    assert {0, 2, 5} <= decimal_scales and max(decimal_scales) > 6, decimal_scales
    assert UtcText in kinds[(ColumnType.TIMESTAMP2, 0)] and UtcText in kinds[(ColumnType.TIMESTAMP2, 6)]


def test_up_to_scale_6_a_decimal_prints_without_an_exponent() -> None:
    """Why DECIMAL(p, s <= 6) may be text: the typed path's Decimal has exponent -s, and its str
    (the hash and key text) is then format(v, "f") (its canonical text); from scale 7 it is not."""
    rnd = random.Random(7)
    for scale in range(7):
        for _ in range(2000):
            v = Decimal(rnd.choice((0, 1, -1, rnd.randrange(-(10**20), 10**20)))).scaleb(-scale)
            assert str(v) == format(v, "f"), v
    assert str(Decimal(0).scaleb(-7)) != format(Decimal(0).scaleb(-7), "f")
    assert orjson.dumps(format(Decimal(1).scaleb(-2), "f")) == b'"0.01"'
