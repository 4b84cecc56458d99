"""Replay archived binlog files into a typed change log (docs/pipeline.md, "replay").

Two rounds of tasks (`run_replay`, the driver; the tasks run where its `Engine` puts them: Spark
jobs, `SparkEngine`, or worker processes on this machine without a JVM for a local master,
service.batch.replay_local). The first scans each file's event headers (service.batch.ranges, one task per
file): its table versions, and cuts at transaction boundaries that split a big file into ranges of
about `split_bytes`. The driver builds each table's union schema across its versions (schema
evolution: an ALTER adds, drops, renames or retypes columns). The second decodes each range (one
task per range, all cores busy even on one file) and writes its part of every output straight
from the decoded values as typed Arrow columns (service.batch.changes): one pass, no raw stage, no
conversion in the JVM. Output, all under a temporary path renamed at the end:

    changes/<schema>/<table>/   one row per row change (service.batch.changes.table_schema)
    ddl/                        one row per DDL statement
    transactions/               one row per committed transaction (end position, GTID, GTID set)
    _replay.json                files in order, the end checkpoint, each table's columns and key

The executors write the Parquet files with pyarrow where it can (a local path, or a shared mount
on a cluster; s3://, gs://, hdfs:// with libhdfs). Any other Hadoop path (s3a://, viewfs://,
abfs://, ...) is written by Spark from the tasks' Arrow batches (service.batch.spark_output).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import struct
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import pyarrow as pa

from service.batch.changes import (
    DDL_SCHEMA,
    FILE_SHIFT,
    TXN_SCHEMA,
    LogTable,
    RangeResult,
    RangeTask,
    decode_options,
    decode_range,
    pyarrow_writes,
    table_schema,
    write_empty,
)
from service.batch.ranges import FileRange, FileScan, scan_file
from service.batch.session import JobSummary, job_progress, staged_output, write_text
from service.batch.spark_output import write_blobs, write_empty_via_spark
from service.binlog.constants import BINLOG_MAGIC
from service.errors import ConfigError
from service.transactions import TableFilter

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

__all__ = [
    "META",
    "Engine",
    "FileScanner",
    "ReplaySummary",
    "SparkEngine",
    "TableColumns",
    "binlog_paths",
    "replay_to_parquet",
    "run_replay",
    "union_columns",
]

META = "_replay.json"
SPLIT_BYTES = 64 << 20  # a file bigger than this is decoded in ranges of about this size


@dataclass(frozen=True, slots=True)
class TableColumns:
    """A table's columns across all its versions in the replayed files (the union, by name)."""

    schema: str
    table: str
    columns: tuple[tuple[str, str, str], ...]  # name, kind (tableversion.column_kind), MySQL type
    key: tuple[str, ...]  # of the latest version; () when the binlog names no primary key
    versions: int
    latest: tuple[str, ...] = ()  # the columns of the latest version (the table as it is now)
    since: int = 0  # seq of the first TABLE_MAP of the latest version: images before it are older

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "table": self.table,
            "columns": [{"name": n, "kind": k, "type": t} for n, k, t in self.columns],
            "key": list(self.key),
            "versions": self.versions,
            "latest": list(self.latest),
            "since": self.since,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TableColumns:
        cols = tuple((c["name"], c["kind"], c["type"]) for c in doc["columns"])
        return cls(
            doc["schema"], doc["table"], cols, tuple(doc["key"]), int(doc["versions"]),
            tuple(doc.get("latest", ())), int(doc.get("since", 0)),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    files: int
    changes: int
    by_table: dict[tuple[str, str], int]
    ddl: int
    transactions: int
    end: dict[str, Any] | None  # the checkpoint after the last transaction of the last file
    seconds: float

    def job(self, out: str) -> JobSummary:
        return JobSummary("replay", self.changes, self.files, len(self.by_table), self.seconds, out)


# -- inputs -----------------------------------------------------------------------------------------
def _first_timestamp(path: str) -> int:
    """The timestamp of the file's first event (its FORMAT_DESCRIPTION), or -1: not a binlog."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or head[:4] != BINLOG_MAGIC:
        return -1
    return int(struct.unpack_from("<I", head, 4)[0])


def _numbered(path: str) -> tuple[str, int] | None:
    stem, dot, suffix = os.path.basename(path).rpartition(".")
    return (stem, int(suffix)) if dot and suffix.isdigit() else None


def binlog_paths(inputs: Iterable[str]) -> list[str]:
    """Files, directories and globs -> absolute paths in binlog order.

    A directory contributes every file that starts with the binlog magic (an index file or
    anything else is skipped). Order: by the numeric suffix (`mysql-bin.000042`) when every file
    has one; otherwise by the timestamp of each file's first event (when the server opened it),
    then by name."""
    out: set[str] = set()
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = [str(f) for f in sorted(p.iterdir()) if f.is_file() and _first_timestamp(str(f)) >= 0]
        else:
            found = glob.glob(item)
        if not found:
            raise ConfigError(f"no binlog files at {item}")
        out.update(os.path.abspath(f) for f in found)
    paths = sorted(out)
    numbered = [_numbered(f) for f in paths]
    if all(n is not None for n in numbered):
        return sorted(paths, key=lambda f: _numbered(f) or ("", 0))
    stamps = {f: _first_timestamp(f) for f in paths}
    bad = [f for f, ts in stamps.items() if ts < 0]
    if bad:
        raise ConfigError(f"{bad[0]} at offset 0: not a binlog file (bad magic)")
    return sorted(paths, key=lambda f: (stamps[f], os.path.basename(f)))


# -- executor side (functions shipped to the Python workers) ---------------------------------------
@dataclass(frozen=True, slots=True)
class FileScanner:
    """The header scan of one (index, path): a picklable function for Spark's and the local
    engine's workers alike."""

    tables: TableFilter
    schema_file: str | None
    split_bytes: int

    def __call__(self, item: tuple[int, str]) -> FileScan:
        index, path = item
        return scan_file(path, index, self.tables, decode_options(self.schema_file), self.split_bytes)


# -- driver side ------------------------------------------------------------------------------------
_INTEGERS = ("bigint", "decimal(20,0)")


def _merge_kinds(kinds: list[str]) -> str:
    """One Spark kind for a column whose versions had `kinds` (an ALTER ... MODIFY)."""
    distinct = list(dict.fromkeys(kinds))
    if len(distinct) == 1:
        return distinct[0]
    if all(k in _INTEGERS for k in distinct):
        return "decimal(20,0)"
    if all(k.startswith("decimal(") or k == "bigint" for k in distinct):
        scale = whole = 0
        for k in distinct:
            p, s = (19, 0) if k == "bigint" else map(int, k[8:-1].split(","))
            scale, whole = max(scale, s), max(whole, p - s)
        return f"decimal({whole + scale},{scale})" if whole + scale <= 38 else "text"
    if set(distinct) <= {"bigint", "double"}:
        return "double"
    if set(distinct) <= {"string", "text"}:
        return "string"
    return "text"  # the mirror's text form carries every type


def union_columns(schema: str, table: str, seen: list[tuple[int, str]]) -> TableColumns:
    """The union of a table's versions, from its TABLE_MAPs (seq, version) in binlog order:
    columns by name, in the order they first appear; a column whose type changed gets a type that
    holds every version's values."""
    order: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    key: tuple[str, ...] = ()
    latest, since, versions = "", 0, 0
    for seq, v in seen:
        if v == latest:
            continue
        latest, since, versions = v, seq, versions + 1
        doc = orjson.loads(v)
        for c in doc["columns"]:
            order.setdefault(c["name"], []).append(c["kind"])
            types[c["name"]] = c["type"]
        key = tuple(doc["key"])
    cols = tuple((n, _merge_kinds(k), types[n]) for n, k in order.items())
    names = tuple(c["name"] for c in orjson.loads(latest)["columns"]) if latest else ()
    return TableColumns(schema, table, cols, key, versions, names, since)


def _catalog(scans: list[FileScan], results: list[RangeResult]) -> list[TableColumns]:
    """Each table's union across its versions, with `since` and `latest` from the versions' seqs
    as the decoding tasks saw them."""
    planned: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for scan in scans:
        for s, t, v in scan.versions:
            planned.setdefault((s, t), []).append((len(planned.get((s, t), ())), v))
    seen: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for seq, s, t, v in sorted(v for r in results for v in r.versions):
        seen.setdefault((s, t), []).append((seq, v))
    catalog = []
    for (s, t), versions in sorted(planned.items()):
        cols = union_columns(s, t, seen.get((s, t)) or versions)
        if cols.columns != union_columns(s, t, versions).columns:
            raise ConfigError(f"{s}.{t}: the files changed while they were replayed")
        catalog.append(cols)
    return catalog


def _log_table(cols: TableColumns) -> LogTable:
    return LogTable(cols.schema, cols.table, tuple((n, k) for n, k, _ in cols.columns), cols.key)


def _without_blobs(result: RangeResult) -> RangeResult:
    """What the driver collects of a range: its counts, not its batches (via_spark)."""
    return dataclasses.replace(result, blobs=[]) if result.blobs else result


class Engine(Protocol):
    """Where replay's tasks run and how its driver writes: Spark (`SparkEngine`: any master, any
    path Spark writes) or worker processes on this machine (service.batch.replay_local: a local
    master and a path pyarrow writes, no JVM). `run_replay` is the same driver for both."""

    def staged(self, out: str, *, overwrite: bool) -> AbstractContextManager[str]:
        """A temporary path to write `out` under, renamed to `out` at the end (session.staged_output)."""
        ...

    def map(self, label: str, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """`fn` over `items`, one task each, in parallel; the results in the items' order."""
        ...

    def decode(self, tasks: list[RangeTask]) -> list[RangeResult]:
        """decode_range over the tasks (their results without blobs: see `write_outputs`)."""
        ...

    def write_outputs(self, tmp: str, outputs: dict[str, pa.Schema], empty: set[str]) -> None:
        """After `decode`: the datasets the tasks did not write themselves (the `empty` ones, and
        all of them when the tasks handed their batches back: `RangeTask.via_spark`)."""
        ...

    def write_text(self, path: str, text: str) -> None: ...


class SparkEngine:
    """replay's tasks as Spark jobs (one task per file, then per range)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.decoded: RDD[RangeResult] | None = None  # persisted: the tasks' batches for Spark to write

    def staged(self, out: str, *, overwrite: bool) -> AbstractContextManager[str]:
        return staged_output(self.spark, out, overwrite=overwrite)

    def map(self, label: str, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        with job_progress(self.spark, label):
            return self.spark.sparkContext.parallelize(items, max(1, len(items))).map(fn).collect()

    def decode(self, tasks: list[RangeTask]) -> list[RangeResult]:
        decoded = self.spark.sparkContext.parallelize(tasks, max(1, len(tasks))).map(decode_range)
        if any(t.via_spark for t in tasks):
            from pyspark import StorageLevel

            decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)  # decoded once, read per output
            self.decoded = decoded
        with job_progress(self.spark, "replay: decoding"):
            results: list[RangeResult] = decoded.map(_without_blobs).collect()
        return results

    def write_outputs(self, tmp: str, outputs: dict[str, pa.Schema], empty: set[str]) -> None:
        if self.decoded is not None:
            with job_progress(self.spark, "replay: writing"):
                written = {n: s for n, s in outputs.items() if n not in empty}
                write_blobs(self.spark, self.decoded, tmp, written)
            self.decoded.unpersist()
        for name in sorted(empty):  # no rows (a table's all dropped): an empty dataset, not none
            if self.decoded is not None:
                write_empty_via_spark(self.spark, f"{tmp}/{name}", outputs[name])
            else:
                write_empty(tmp, name, outputs[name])

    def write_text(self, path: str, text: str) -> None:
        write_text(self.spark, path, text)


def replay_to_parquet(
    spark: SparkSession,
    paths: list[str],
    out: str,
    tables: TableFilter,
    *,
    overwrite: bool = False,
    canonical: bool = False,
    schema_file: str | None = None,
    split_bytes: int = SPLIT_BYTES,
) -> ReplaySummary:
    """Decode `paths` (in this order; a file bigger than `split_bytes` in ranges) into the change
    log at `out`, in Spark jobs."""
    return run_replay(
        SparkEngine(spark), paths, out, tables,
        overwrite=overwrite, canonical=canonical, schema_file=schema_file, split_bytes=split_bytes,
    )  # fmt: skip


def run_replay(
    engine: Engine,
    paths: list[str],
    out: str,
    tables: TableFilter,
    *,
    overwrite: bool = False,
    canonical: bool = False,
    schema_file: str | None = None,
    split_bytes: int = SPLIT_BYTES,
) -> ReplaySummary:
    """The driver: scan each file, plan the union schemas and the ranges, decode the ranges, then
    write `_replay.json`; the tasks run where `engine` puts them."""
    started = time.monotonic()
    with engine.staged(out, overwrite=overwrite) as tmp:
        scans: list[FileScan] = engine.map(
            "replay: scanning", FileScanner(tables, schema_file, split_bytes), list(enumerate(paths))
        )
        planned = _catalog(scans, [])
        log_tables = tuple(_log_table(c) for c in planned)
        ranges: list[FileRange] = sorted((r for s in scans for r in s.ranges), key=lambda r: -r.size)
        via_spark = not pyarrow_writes(out)
        tasks = [RangeTask(r, tmp, tables, log_tables, canonical, schema_file, via_spark) for r in ranges]
        results = engine.decode(tasks)
        results.sort(key=lambda r: (r.index, r.part))
        catalog = _catalog(scans, results)
        by_table: dict[tuple[str, str], int] = {}
        for r in results:
            for key, n in r.changes.items():
                by_table[key] = by_table.get(key, 0) + n
        ddl = sum(r.ddl for r in results)
        txns = sum(r.transactions for r in results)
        outputs = {f"changes/{t.schema}/{t.table}": table_schema(t, canonical) for t in log_tables}
        outputs |= {"ddl": DDL_SCHEMA, "transactions": TXN_SCHEMA}
        rows = {f"changes/{s}/{t}": n for (s, t), n in by_table.items()} | {"ddl": ddl, "transactions": txns}
        engine.write_outputs(tmp, outputs, {name for name in outputs if not rows.get(name)})
        end = next((r.end for r in reversed(results) if r.end is not None), None)
        by_table = {k: n for k, n in by_table.items() if n}
        meta = {
            "files": [os.path.basename(p) for p in paths],
            "seq_shift": FILE_SHIFT,
            "end": end,
            "tables": [c.to_json() for c in catalog],
            "changes": sum(by_table.values()),
            "canonical": canonical,
            "ranges": len(ranges),
        }
        engine.write_text(f"{tmp}/{META}", orjson.dumps(meta, option=orjson.OPT_INDENT_2).decode())
    return ReplaySummary(
        len(paths), sum(by_table.values()), by_table, ddl, txns, end, time.monotonic() - started
    )
