"""Compact a change log (the output of `replay`) into the latest image of each row, as of a
position (docs/pipeline.md, "compact").

Per table, every change becomes an event on a key: an insert or update writes its after image to
its key, a delete removes its key, and an update that changes the key also removes the old one.
The events of one key are folded in log order (`seq`) in the JVM (Spark's `aggregate` over the
sorted events): a partial (MINIMAL/NOBLOB) image merges only the columns it carries, an insert
starts a new row, a delete ends it. Keys whose last event is a delete are dropped. A TRUNCATE,
DROP or CREATE of the table discards everything before it.

Each row also gets `_since`: the seq of the oldest image its values may come from (the last image
that carried every column of the table's latest version). A row with `_since` before the table's
latest version (an ALTER in the replayed files) is stale: the binlog does not say what the ALTER
made of it (a column added with a default, renamed, retyped); `load` leaves such tables to the
service, which copies them again, as it does itself after an ALTER.

Output (a temporary path renamed at the end):
    <schema>/<table>/   the table's rows: `_seq` (the last change applied), `_since`, the union columns
    _compact.json       the checkpoint the state is at, the tables' columns and keys, row counts,
                        stale row counts
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from service.batch.replay import META, TableColumns
from service.batch.session import JobSummary, job_progress, path_exists, read_text, staged_output, write_text
from service.checkpoint import BinlogPosition
from service.errors import ConfigError
from service.transactions import TableFilter

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["COMPACT_META", "CompactSummary", "compact", "parse_until"]

COMPACT_META = "_compact.json"


@dataclass(frozen=True, slots=True)
class CompactSummary:
    by_table: dict[tuple[str, str], int]  # rows per table
    skipped: list[tuple[str, str]]  # tables the binlog names no primary key for
    checkpoint: dict[str, Any] | None
    changes: int
    seconds: float
    stale: dict[str, int]  # "schema.table" -> rows older than the table's last ALTER (see `load`)

    def job(self, out: str, files: int) -> JobSummary:
        return JobSummary(
            "compact", sum(self.by_table.values()), files, len(self.by_table), self.seconds, out
        )


def parse_until(text: str) -> BinlogPosition:
    file, sep, pos = text.rpartition(":")
    if not sep or not file or not pos.isdigit():
        raise ConfigError(f"--until {text!r}: expected FILE:POS, e.g. mysql-bin.000042:1234")
    return BinlogPosition(file, int(pos))


def _until_filter(files: list[str], until: BinlogPosition, shift: int, *, end_file: bool = True) -> Column:
    """Rows of transactions that end at or before `until`. A transaction's end is in its own file,
    except the ROTATE at a file's end, whose resume point is the next file (`end_file`), offset 4:
    its `end_pos` must not be compared with a position in its own file."""
    from pyspark.sql import functions as F

    if until.file not in files:
        raise ConfigError(f"--until {until}: {until.file} is not one of the replayed files")
    index = files.index(until.file)
    end_index = F.shiftright(F.col("seq"), shift)
    if end_file:  # ddl/ has no end_file: a statement ends in its own file
        end_index = end_index + F.when(F.col("end_file") != F.col("file"), 1).otherwise(0)
    return (end_index < index) | ((end_index == index) & (F.col("end_pos") <= until.pos))


def _events(changes: DataFrame, cols: TableColumns) -> DataFrame:
    """(key, seq, sub, kind, after, after_columns) per key event."""
    from pyspark.sql import functions as F

    def key_of(image: str) -> Column:
        return F.struct(*[F.col(f"{image}.{c}").alias(c) for c in cols.key])

    after_type = changes.schema["after"].dataType
    ups = changes.where(F.col("after").isNotNull()).select(
        key_of("after").alias("key"),
        "seq",
        F.lit(1).alias("sub"),
        F.when(F.col("op") == "insert", "insert").otherwise("update").alias("kind"),
        "after",
        "after_columns",
    )
    gone = changes.where(
        F.col("before").isNotNull() & ((F.col("op") == "delete") | (key_of("before") != key_of("after")))
    ).select(
        key_of("before").alias("key"),
        "seq",
        F.lit(0).alias("sub"),
        F.lit("delete").alias("kind"),
        F.lit(None).cast(after_type).alias("after"),
        F.lit(None).cast("array<string>").alias("after_columns"),
    )
    return ups.unionByName(gone)


def _fold(events: DataFrame, cols: TableColumns, after_type: Any) -> DataFrame:
    """The last state of each key: events folded in (seq, sub) order."""
    from pyspark.sql import functions as F

    names = [n for n, _, _ in cols.columns]
    grouped = events.groupBy("key").agg(
        F.array_sort(F.collect_list(F.struct("seq", "sub", "kind", "after", "after_columns"))).alias("evs")
    )
    init = F.struct(
        F.lit(True).alias("gone"),
        F.lit(None).cast("bigint").alias("seq"),
        F.lit(None).cast("bigint").alias("since"),
        F.lit(None).cast(after_type).alias("row"),
    )
    latest = F.array(*[F.lit(n) for n in cols.latest]) if cols.latest else F.array().cast("array<string>")

    def merge(acc: Column, x: Column) -> Column:
        row = F.struct(
            *[
                F.when(F.array_contains(x["after_columns"], n), x["after"][n])
                .when(x["kind"] == "insert", F.lit(None))
                .otherwise(acc["row"][n])
                .alias(n)
                for n in names
            ]
        )
        # the oldest image the row's values may come from: the last one that carried every column
        # of the table's latest version (an insert always starts the row anew)
        whole = F.size(F.array_except(latest, x["after_columns"])) == 0
        since = F.when((x["kind"] == "insert") | whole, x["seq"]).otherwise(acc["since"])
        return F.struct(
            (x["kind"] == "delete").alias("gone"),
            x["seq"].alias("seq"),
            since.alias("since"),
            F.when(x["kind"] == "delete", F.lit(None).cast(after_type)).otherwise(row).alias("row"),
        )

    state = grouped.select(F.aggregate("evs", init, merge).alias("s"))
    return state.where(~F.col("s.gone")).select(
        F.col("s.seq").alias("_seq"), F.col("s.since").alias("_since"), "s.row.*"
    )


def _whole_images(changes: DataFrame, cols: TableColumns) -> bool:
    """Every after image carries every column of the table (FULL images, no column that only
    some versions have): then a key's state is its last event alone (`_last`). One job that
    reads only `after_columns`."""
    from pyspark.sql import functions as F

    union = F.array(*[F.lit(n) for n, _, _ in cols.columns])
    narrower = changes.where(
        F.col("after").isNotNull() & (F.size(F.array_except(union, "after_columns")) > 0)
    )
    return not narrower.select("seq").limit(1).collect()


def _last(events: DataFrame) -> DataFrame:
    """`_fold` where every image is whole: the key's last event by (seq, sub) is its state, found
    by a hash aggregate (max of a struct) instead of collecting and folding each key's events.
    The same result: a whole image replaces the row, and is the oldest image its values come
    from (`_since`)."""
    from pyspark.sql import functions as F

    last = events.groupBy("key").agg(F.max(F.struct("seq", "sub", "kind", "after")).alias("e"))
    return last.where(F.col("e.kind") != "delete").select(
        F.col("e.seq").alias("_seq"), F.col("e.seq").alias("_since"), "e.after.*"
    )


def _checkpoint(spark: SparkSession, log: str, meta: dict[str, Any], until: BinlogPosition | None) -> Any:
    if until is None:
        return meta["end"]
    from pyspark.sql import functions as F

    txns = spark.read.parquet(f"{log}/transactions")
    last = (
        txns.where(_until_filter(meta["files"], until, meta["seq_shift"]))
        .orderBy(F.col("seq").desc())
        .limit(1)
        .collect()
    )
    if not last:
        raise ConfigError(f"--until {until}: no transaction of the change log ends there or before")
    t = last[0]
    return {
        "file": t["end_file"],
        "pos": int(t["end_pos"]),
        "gtid_set": t["gtid_set"] or "",
        "ts": int(t["commit_ts"]),
    }


def compact(
    spark: SparkSession,
    log: str,
    out: str,
    *,
    until: BinlogPosition | None = None,
    tables: TableFilter | None = None,
    overwrite: bool = False,
) -> CompactSummary:
    """The latest row per key of each table of the change log at `log`, as of `until` (default:
    the end of the replayed files), written to `out`."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    meta = orjson.loads(read_text(spark, f"{log}/{META}"))
    catalog = [TableColumns.from_json(t) for t in meta["tables"]]
    if tables is not None:
        catalog = [c for c in catalog if tables.wants(c.schema, c.table)]
    shift = int(meta["seq_shift"])
    checkpoint = _checkpoint(spark, log, meta, until)
    ddl = spark.read.parquet(f"{log}/ddl") if path_exists(spark, f"{log}/ddl") else None
    by_table: dict[tuple[str, str], int] = {}
    stale: dict[str, int] = {}
    skipped: list[tuple[str, str]] = []
    with staged_output(spark, out, overwrite=overwrite) as tmp, job_progress(spark, "compact"):
        for cols in catalog:
            if not cols.key:
                skipped.append((cols.schema, cols.table))
                continue
            changes = spark.read.parquet(f"{log}/changes/{cols.schema}/{cols.table}")
            if until is not None:
                changes = changes.where(_until_filter(meta["files"], until, shift))
            if ddl is not None:  # a TRUNCATE / DROP / CREATE of the table resets it
                resets = ddl.where(
                    F.col("kind").isin("truncate", "drop", "create")
                    & F.array_contains("tables", f"{cols.schema}.{cols.table}")
                )
                if until is not None:
                    resets = resets.where(_until_filter(meta["files"], until, shift, end_file=False))
                last_reset = resets.agg(F.max("seq")).collect()[0][0]
                if last_reset is not None:
                    changes = changes.where(F.col("seq") > last_reset)
            after_type = changes.schema["after"].dataType
            events = _events(changes, cols)
            state = _last(events) if _whole_images(changes, cols) else _fold(events, cols, after_type)
            path = f"{tmp}/{cols.schema}/{cols.table}"
            state.write.parquet(path)
            # rows whose values come (in part) from images logged before the table's latest
            # version (an ALTER): the binlog does not say what the ALTER made of them; counted
            # with the rows in one job over the written files
            old = F.col("_since").isNull() | (F.col("_since") < cols.since)
            counted = (
                spark.read.parquet(path)
                .agg(F.count(F.lit(1)), F.coalesce(F.sum(F.when(old, 1).otherwise(0)), F.lit(0)))
                .first()
            )
            assert counted is not None  # an aggregate has one row
            n, n_stale = counted[0], counted[1]
            by_table[(cols.schema, cols.table)] = int(n)
            stale[f"{cols.schema}.{cols.table}"] = int(n_stale)
        doc = {
            "files": meta["files"],
            "checkpoint": checkpoint,
            "tables": [c.to_json() for c in catalog if c.key],
            "rows": {f"{s}.{t}": n for (s, t), n in by_table.items()},
            "stale": stale,
        }
        write_text(spark, f"{tmp}/{COMPACT_META}", orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    seconds = time.monotonic() - started
    return CompactSummary(by_table, skipped, checkpoint, int(meta.get("changes", 0)), seconds, stale)
