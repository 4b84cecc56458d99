"""Replay archived binlog files into Parquet: one row per row change, partitioned by schema/table.

Each binlog file is one Spark task: a file is self-contained (it starts with its own
FORMAT_DESCRIPTION and every transaction carries its TABLE_MAPs), so files decode independently
and in parallel. Executors open the files by path: with `local[*]` that is the local disk; on a
cluster every executor must see the same path (a shared mount).

Columns (docs/pipeline.md): file, seq (the change's rank in its file: (file, seq) orders all
changes), pos (offset of its rows event), ts, server_id, gtid, op, before, after (the canonical
JSON of docs/row-format.md, as text), and the partition columns schema, table.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from service.binlog import BinlogDecoder, RowsEvent, TransactionPayloadEvent, scan_binlog_file
from service.binlog.canonical import row_to_json
from service.errors import ConfigError
from service.transactions import TableFilter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["COLUMNS", "ReplaySummary", "binlog_paths", "file_changes", "replay_to_parquet"]

# name, Spark SQL type; the order of file_changes' tuples
COLUMNS = (
    ("file", "string"),
    ("seq", "bigint"),
    ("pos", "bigint"),
    ("ts", "bigint"),
    ("server_id", "bigint"),
    ("gtid", "string"),
    ("schema", "string"),
    ("table", "string"),
    ("op", "string"),
    ("before", "string"),
    ("after", "string"),
)

Change = tuple[str, int, int, int, int, str | None, str, str, str, str | None, str | None]


def _json(row: Any) -> str | None:
    return None if row is None else orjson.dumps(row_to_json(row)).decode()


def file_changes(path: str, tables: TableFilter) -> Iterator[Change]:
    """Every wanted row change of one binlog file, in file order (pure decoding, no Spark)."""
    decoder = BinlogDecoder(file=os.path.basename(path))
    name = os.path.basename(path)
    seq = 0
    for offset, data in scan_binlog_file(path):
        event = decoder.feed(data, offset)
        if event is None:
            continue
        inner = event.events if isinstance(event, TransactionPayloadEvent) else (event,)
        for ev in inner:
            if not isinstance(ev, RowsEvent):
                continue
            for ch in ev.changes:
                if tables.wants(ch.schema, ch.table):
                    where = (name, seq, ev.header.offset, ch.ts, ch.server_id, ch.gtid)
                    yield (*where, ch.schema, ch.table, ch.op.value, _json(ch.before), _json(ch.after))
                seq += 1


def binlog_paths(inputs: Iterable[str]) -> list[str]:
    """Files, directories (their `*.[0-9]*` binlogs) and globs -> sorted absolute paths."""
    out: set[str] = set()
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = [str(f) for f in p.iterdir() if f.suffix[1:].isdigit() and f.is_file()]
        else:
            found = glob.glob(item)
        if not found:
            raise ConfigError(f"no binlog files at {item}")
        out.update(os.path.abspath(f) for f in found)
    return sorted(out)


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    files: int
    changes: int
    by_table: dict[tuple[str, str], int]


def replay_to_parquet(
    spark: SparkSession, paths: list[str], out: str, tables: TableFilter, *, overwrite: bool = False
) -> ReplaySummary:
    """Decode `paths` (one task each) and write their row changes to Parquet at `out`."""
    schema = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)
    rdd = spark.sparkContext.parallelize(paths, max(1, len(paths)))
    changes = rdd.flatMap(lambda path: file_changes(path, tables))
    frame = spark.createDataFrame(changes, schema)
    mode = "overwrite" if overwrite else "errorifexists"
    frame.write.mode(mode).partitionBy("schema", "table").parquet(out)
    counts = spark.read.parquet(out).groupBy("schema", "table").count().collect()
    by_table = {(r["schema"], r["table"]): int(r["count"]) for r in counts}
    return ReplaySummary(files=len(paths), changes=sum(by_table.values()), by_table=by_table)
