"""DecodeOptions.columnar (the replay's rows column by column): the same rows as RowChanges."""

from __future__ import annotations

from pathlib import Path

import pytest
from binlog_text import FIXTURES, VECTORS

from service.binlog import BinlogDecoder, DecodeOptions, RowsEvent, read_binlog_file
from service.binlog.events import ColumnarRowsEvent
from service.errors import DecodeError

FILES = [
    *sorted((FIXTURES / "mariadb-10.11").glob("[0-9]*")),
    *sorted((VECTORS / "mysql-5.7").iterdir()),
    *sorted(p for p in (VECTORS / "mysql-8").iterdir() if p.name != "README.md"),
]


def _events(path: Path, columnar: bool) -> list[RowsEvent]:
    decoder = BinlogDecoder(DecodeOptions(columnar=columnar), file=path.name)
    out = []
    try:
        for raw in read_binlog_file(path):
            out += [e for e in decoder.decode_events(raw) if isinstance(e, RowsEvent)]
    except DecodeError:
        pass  # a fixture that ends in an undecodable row: both modes stop at the same event
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_columnar_rows_equal_the_row_changes(path: Path) -> None:
    plain, columnar = _events(path, False), _events(path, True)
    assert len(plain) == len(columnar)
    rows = 0
    for p, c in zip(plain, columnar, strict=True):
        assert not isinstance(p, ColumnarRowsEvent)
        if not isinstance(c, ColumnarRowsEvent):  # PARTIAL_UPDATE_ROWS stay RowChanges
            assert c.partial and c.changes == p.changes
            continue
        assert c.changes == [] and c.columns is not None
        cols = c.columns
        assert cols.count == len(p.changes)
        for i, ch in enumerate(p.changes):
            assert (cols.op, cols.schema, cols.table) == (ch.op, ch.schema, ch.table)
            assert (cols.position, cols.ts, cols.server_id, cols.gtid) == (
                ch.position,
                ch.ts,
                ch.server_id,
                ch.gtid,
            )
            for names, values, image in (
                (cols.before_names, cols.before, ch.before),
                (cols.after_names, cols.after, ch.after),
            ):
                if image is None:
                    assert names is None and values is None
                else:
                    assert names is not None and values is not None
                    assert dict(zip(names, (v[i] for v in values), strict=True)) == image
                    assert list(image) == names
        rows += cols.count
    assert rows or not any(p.changes for p in plain)


def test_rows_events_print_as_before() -> None:
    """`decode --events` prints every field of an event: a RowsEvent has no field more."""
    import dataclasses

    from service.cli.decode import event_to_dict

    names = {f.name for f in dataclasses.fields(RowsEvent)}
    assert "columns" not in names
    (event,) = [e for e in _events(FILES[1], False) if e.changes][:1]
    assert "columns" not in event_to_dict(event)
