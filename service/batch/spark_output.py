"""Replay's output where pyarrow cannot write it (Hadoop's s3a://, viewfs://, abfs://, ...).

The range tasks keep their Arrow batches as IPC blobs (service.batch.changes, `via_spark`); the
decoded ranges are persisted, and each output (a table's changes, ddl, transactions) becomes a
DataFrame of its batches (mapInArrow: no per-row Python) that Spark's own Parquet writer writes
through Hadoop's FileSystem, as any Spark job writes to such a path. One Spark job per output, and
the blobs pass through Spark's storage: slower than the tasks writing with pyarrow, which replay
uses wherever pyarrow can (docs/pipeline.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

__all__ = ["write_blobs", "write_empty_via_spark"]


def _batches(blobs: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The record batches of a column of IPC streams (one batch each)."""
    for chunk in blobs:
        for blob in chunk.column(0).to_pylist():
            yield from pa.ipc.open_stream(blob)


def _blobs_of(relative: str) -> Callable[[Any], list[tuple[bytes]]]:
    def rows(result: Any) -> list[tuple[bytes]]:  # a RangeResult
        return [(blob,) for name, blob in result.blobs if name == relative]

    return rows


def write_blobs(spark: SparkSession, decoded: RDD[Any], root: str, outputs: dict[str, pa.Schema]) -> None:
    """Write each output's batches (the `blobs` of the RangeResults in `decoded`) as Parquet under
    `root/<output>`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    for relative, schema in outputs.items():
        rows = decoded.flatMap(_blobs_of(relative))
        frame = spark.createDataFrame(rows, "data binary")
        frame.mapInArrow(_batches, from_arrow_schema(schema)).write.parquet(f"{root}/{relative}")


def write_empty_via_spark(spark: SparkSession, path: str, schema: pa.Schema) -> None:
    """An empty dataset with the schema, written by Spark."""
    from pyspark.sql.pandas.types import from_arrow_schema

    spark.createDataFrame([], from_arrow_schema(schema)).write.parquet(path)
