"""Row-for-row comparison with mariadb-binlog -vv on real MySQL 5.7 and MariaDB 10.11 binlogs."""

from __future__ import annotations

from pathlib import Path

import pytest
from binlog_text import FIXTURES, VECTORS, mariadb_rows, render

from service.binlog import BinlogDecoder, Column, RowsEvent, read_binlog_file

FILES = [
    VECTORS / "mysql-5.7" / "mysql-bin.checksum-crc32",
    VECTORS / "mysql-5.7" / "mysql-bin.checksum-none",
    *sorted((FIXTURES / "mariadb-10.11").glob("[0-9]*")),
]


def _image(cols: dict[str, Column], row: dict[str, object] | None) -> dict[str, bytes] | None:
    if row is None:
        return None
    return {f"@{cols[k].index + 1}": render(cols[k], v) for k, v in row.items()}


def _ours(path: Path) -> list[tuple[str, str, str, dict[str, bytes] | None, dict[str, bytes] | None]]:
    decoder = BinlogDecoder(file=path.name)
    out = []
    for raw in read_binlog_file(path):
        for event in decoder.decode_events(raw):
            if not isinstance(event, RowsEvent):
                continue
            cols = {c.name: c for c in event.table.columns}
            for ch in event.changes:
                before, after = _image(cols, ch.before), _image(cols, ch.after)
                out.append((ch.op.value, ch.schema, ch.table, before, after))
    assert decoder.stats.invalid_text_values == 0
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_rows_match_mariadb_binlog(path: Path) -> None:
    expected = mariadb_rows(path)
    ours = _ours(path)
    assert len(ours) == len(expected)
    for i, (mine, theirs) in enumerate(zip(ours, expected, strict=True)):
        assert mine == theirs, f"row change #{i}"
    assert expected or "setup" in path.name, "the vector holds row changes"


@pytest.mark.parametrize(
    ("name", "types", "row_changes"),
    [
        ("mysql-bin.checksum-crc32", {2, 4, 15, 16, 19, 30, 31, 32, 34, 35}, 63),
        ("mysql-bin.checksum-none", {2, 3, 15, 16, 19, 30, 31, 34, 35}, 36),
    ],
)
def test_mysql57_vectors_hold_what_their_readme_says(name: str, types: set[int], row_changes: int) -> None:
    """tests/fixtures/binlog/vectors/README.md: event types present (no IGNORABLE 28 or
    ROWS_QUERY 29) and the number of row changes."""
    path = VECTORS / "mysql-5.7" / name
    assert {raw[4] for raw in read_binlog_file(path)} == types
    assert len(_ours(path)) == row_changes
