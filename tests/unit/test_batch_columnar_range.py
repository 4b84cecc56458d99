"""A replay range decoded column by column (service.batch.changes, DecodeOptions.columnar) writes
the change log the RowChange path writes (the canonical output's path): pure, no Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from service.batch.changes import RangeTask, decode_options, decode_range
from service.batch.ranges import scan_file
from service.batch.replay import _catalog, _log_table
from service.transactions import TableFilter

BINLOGS = Path(__file__).resolve().parents[1] / "fixtures" / "binlog"
FILES = [
    *sorted((BINLOGS / "mariadb-10.11").glob("[0-9]*")),
    *sorted((BINLOGS / "vectors" / "mysql-5.7").iterdir()),
    *sorted(p for p in (BINLOGS / "vectors" / "mysql-8").iterdir() if p.name != "README.md"),
]


def _replay(path: Path, out: Path, canonical: bool, split: int) -> list[tuple[str, object]]:
    tables = TableFilter()
    scan = scan_file(str(path), 0, tables, decode_options(None), split)
    log_tables = tuple(_log_table(c) for c in _catalog([scan], []))
    results = []
    for r in scan.ranges:
        try:
            res = decode_range(RangeTask(r, str(out), tables, log_tables, canonical))
        except Exception as exc:  # an undecodable fixture: both paths fail alike
            results.append(("error", type(exc).__name__))
            continue
        results.append(("result", (res.changes, res.ddl, res.transactions, res.versions, res.end)))
    return results


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("split", [1 << 30, 2000])
def test_columnar_range_writes_what_the_row_changes_write(path: Path, split: int, tmp_path: Path) -> None:
    plain, rows = tmp_path / "plain", tmp_path / "canonical"
    assert _replay(path, plain, False, split) == _replay(path, rows, True, split)
    files = sorted(p.relative_to(plain) for p in plain.rglob("*.parquet"))
    assert files == sorted(p.relative_to(rows) for p in rows.rglob("*.parquet"))
    for f in files:
        got, want = pq.read_table(plain / f), pq.read_table(rows / f)
        want = want.drop_columns([c for c in ("before_json", "after_json") if c in want.column_names])
        assert got.schema == want.schema, f
        assert got.equals(want), f
        assert (
            pq.ParquetFile(plain / f).metadata.num_row_groups
            == pq.ParquetFile(rows / f).metadata.num_row_groups
        )


def test_the_change_log_is_lz4_with_dictionaries_only_on_the_few_valued_columns(tmp_path: Path) -> None:
    """changes.PARQUET_OPTIONS on a real binlog's change log (Spark reads it: tests/spark)."""
    path = BINLOGS / "mariadb-10.11" / "02-full.000002"
    _replay(path, tmp_path, False, 1 << 30)
    files = sorted((tmp_path / "changes").rglob("*.parquet"))
    assert files
    for f in files:
        meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            for i in range(meta.num_columns):
                column = meta.row_group(g).column(i)
                assert column.compression == "LZ4", (f, column.path_in_schema)  # the file says LZ4_RAW
                top = column.path_in_schema.split(".")[0]
                dictionary = any("DICTIONARY" in e for e in column.encodings)
                assert dictionary == (top in ("file", "end_file", "op", "gtid")), (f, column.path_in_schema)
