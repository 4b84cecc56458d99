"""Replay archived binlog files into a typed change log (docs/pipeline.md, "replay").

Each binlog file is one Spark task: a file is self-contained (it starts with its own
FORMAT_DESCRIPTION and every transaction carries its TABLE_MAPs), so files decode independently
and in parallel. Executors open the files by path: with `local[*]` that is the local disk; on a
cluster every executor must see the same path (a shared mount).

Two stages. The executors decode their file into Arrow record batches (`mapInArrow`) of raw
records (service.batch.changes): row images as column -> value text, table versions, DDL,
transactions. The driver then reads the table versions (a few rows), builds each table's union
schema across its versions (schema evolution: an ALTER adds, drops, renames or retypes columns),
and writes one Parquet dataset per table whose before/after images are typed Spark structs, cast
from the text in the JVM. Output, all under a temporary path renamed at the end:

    changes/<schema>/<table>/   one row per row change (CHANGE_COLUMNS)
    ddl/                        one row per DDL statement
    transactions/               one row per committed transaction (end position, GTID, GTID set)
    _replay.json                files in order, the end checkpoint, each table's columns and key
"""

from __future__ import annotations

import glob
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from service.batch.changes import RAW_COLUMNS, SEQ_SHIFT, FileTask, file_records
from service.batch.session import JobSummary, job_progress, staged_output, write_text
from service.binlog.constants import BINLOG_MAGIC
from service.errors import ConfigError
from service.transactions import TableFilter

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["META", "ReplaySummary", "TableColumns", "binlog_paths", "replay_to_parquet", "union_columns"]

META = "_replay.json"
_BATCH_ROWS = 4096


@dataclass(frozen=True, slots=True)
class TableColumns:
    """A table's columns across all its versions in the replayed files (the union, by name)."""

    schema: str
    table: str
    columns: tuple[tuple[str, str, str], ...]  # name, kind (service.batch.changes.column_kind), MySQL type
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


# -- executor side ----------------------------------------------------------------------------------
def _decode_batches(tables: TableFilter, canonical: bool, schema_file: str | None) -> Callable[..., Any]:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        schema = pa.schema([(n, pa.string() if t == "string" else pa.int64()) for n, t in RAW_COLUMNS])

        def batch(rows: list[tuple[Any, ...]]) -> Any:
            cols = list(zip(*rows, strict=True))
            return pa.RecordBatch.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
            )

        for b in batches:
            for path, index in zip(b.column("path").to_pylist(), b.column("index").to_pylist(), strict=True):
                rows: list[tuple[Any, ...]] = []
                for rec in file_records(FileTask(path, index, tables, canonical, schema_file)):
                    rows.append(rec)
                    if len(rows) >= _BATCH_ROWS:
                        yield batch(rows)
                        rows = []
                if rows:
                    yield batch(rows)

    return run


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


def _spark_type(kind: str) -> str:
    if kind in ("timestamp_utc", "timestamp_ntz"):
        return "timestamp_ntz"
    return "string" if kind == "text" else kind


def typed_column(text: Column, kind: str) -> Column:
    """A value text (service.batch.changes.value_text) cast to its Spark type, in the JVM."""
    from pyspark.sql import functions as F

    if kind in ("string", "text"):
        return text
    if kind == "binary":
        return F.unbase64(text)
    return text.cast(_spark_type(kind))


def _image(image: str, cols: TableColumns) -> Column:
    """The typed struct of an image, from its parsed map column (`_<image>`)."""
    from pyspark.sql import functions as F

    m = F.col(f"_{image}")
    fields = [typed_column(m[name], kind).alias(name) for name, kind, _ in cols.columns]
    return F.when(m.isNotNull(), F.struct(*fields))


def _table_frame(raw: DataFrame, cols: TableColumns, canonical: bool) -> DataFrame:
    from pyspark.sql import functions as F

    rows = raw.where(
        (F.col("kind") == "row") & (F.col("schema") == cols.schema) & (F.col("table") == cols.table)
    )
    # each image's JSON parsed once, in a projection of its own (Spark does not eliminate a
    # common subexpression inside the branches of a `when`)
    parsed = rows.select(
        "*",
        F.from_json("before", "map<string,string>").alias("_before"),
        F.from_json("after", "map<string,string>").alias("_after"),
    )
    kinds = {n: k for n, k, _ in cols.columns}
    key = F.struct(
        *[
            typed_column(F.coalesce(F.col("_after")[c], F.col("_before")[c]), kinds.get(c, "text")).alias(c)
            for c in cols.key
        ]
    )
    select: list[Column | str] = [
        "seq", "file", "pos", "end_file", "end_pos", "ts", "commit_ts", "server_id", "gtid", "op",
        (key if cols.key else F.lit(None).cast("string")).alias("key"),
        _image("before", cols).alias("before"),
        _image("after", cols).alias("after"),
        F.map_keys("_before").alias("before_columns"),
        F.map_keys("_after").alias("after_columns"),
    ]  # fmt: skip
    if canonical:
        select += ["before_json", "after_json"]
    frame: DataFrame = parsed.select(*select)
    return frame


def replay_to_parquet(
    spark: SparkSession,
    paths: list[str],
    out: str,
    tables: TableFilter,
    *,
    overwrite: bool = False,
    canonical: bool = False,
    schema_file: str | None = None,
) -> ReplaySummary:
    """Decode `paths` (one task each, in this order) into the change log at `out`."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    schema = ", ".join(f"`{n}` {t}" for n, t in RAW_COLUMNS)
    with staged_output(spark, out, overwrite=overwrite) as tmp:
        inputs = spark.sparkContext.parallelize(
            [(p, i) for i, p in enumerate(paths)], max(1, len(paths))
        ).toDF("path string, index int")
        raw_path = f"{tmp}/_raw"
        with job_progress(spark, "replay: decoding"):
            inputs.mapInArrow(_decode_batches(tables, canonical, schema_file), schema).write.parquet(raw_path)
        raw = spark.read.parquet(raw_path)
        versions: dict[tuple[str, str], list[tuple[int, str]]] = {}
        tables_seen = raw.where(F.col("kind") == "table").select("schema", "table", "sql", "seq")
        for r in tables_seen.orderBy("seq").collect():
            versions.setdefault((r["schema"], r["table"]), []).append((int(r["seq"]), r["sql"]))
        catalog = [union_columns(s, t, v) for (s, t), v in sorted(versions.items())]
        ends = raw.where(F.col("kind") == "end").orderBy(F.col("seq").desc()).select("sql").limit(1).collect()
        end = orjson.loads(ends[0]["sql"]) if ends else None
        with job_progress(spark, "replay: writing"):
            raw.where(F.col("kind") == "ddl").select(
                "seq",
                "file",
                "pos",
                "end_pos",
                "ts",
                "server_id",
                F.col("schema").alias("default_schema"),
                F.col("op").alias("kind"),
                F.from_json("version", "array<string>").alias("tables"),
                "sql",
            ).write.parquet(f"{tmp}/ddl")
            raw.where(F.col("kind") == "txn").select(
                "seq", "file", "end_file", "end_pos", "commit_ts", "gtid", "gtid_set"
            ).write.parquet(f"{tmp}/transactions")
            for cols in catalog:
                _table_frame(raw, cols, canonical).write.parquet(f"{tmp}/changes/{cols.schema}/{cols.table}")
        counts = raw.where(F.col("kind").isin("row", "ddl", "txn")).groupBy("kind", "schema", "table").count()
        by_table: dict[tuple[str, str], int] = {}
        ddl = txns = 0
        for r in counts.collect():
            if r["kind"] == "row":
                by_table[(r["schema"], r["table"])] = int(r["count"])
            elif r["kind"] == "ddl":
                ddl += int(r["count"])
            else:
                txns += int(r["count"])
        meta = {
            "files": [os.path.basename(p) for p in paths],
            "seq_shift": SEQ_SHIFT,
            "end": end,
            "tables": [c.to_json() for c in catalog],
            "changes": sum(by_table.values()),
            "canonical": canonical,
        }
        write_text(spark, f"{tmp}/{META}", orjson.dumps(meta, option=orjson.OPT_INDENT_2).decode())
        from service.batch.session import delete_path

        delete_path(spark, raw_path)
    return ReplaySummary(
        len(paths), sum(by_table.values()), by_table, ddl, txns, end, time.monotonic() - started
    )
