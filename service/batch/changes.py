"""Executor side of `replay`: one range of a binlog file (service.batch.ranges) -> the change log's
Parquet files, written with pyarrow straight from the decoded values: no raw stage, no value text,
no per-value conversion for the types Arrow takes as the decoder gives them (service.batch.arrowlog).

Each task writes its own part files (`part-<file>-<range>.parquet`) under

    changes/<schema>/<table>/   one row per row change (the table's union columns, `table_schema`)
    ddl/                        one row per DDL statement (QUERY event outside a transaction)
    transactions/               one row per committed transaction

and returns a `RangeResult` (counts, the table versions it saw with their seq, its last resume
point) for the driver's `_replay.json`. A retried task writes the same files again.

`seq` is the global order: file index << FILE_SHIFT | range index << RANGE_SHIFT | rank in the
range, so ordering by `seq` orders every change of every file.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from service.batch.arrowlog import ImageColumns, column_array, image_array, key_array, names_array
from service.batch.outputs import output_root, pyarrow_writes
from service.batch.ranges import FileRange
from service.batch.tableversion import table_version
from service.binlog import BinlogDecoder, scan_binlog_file
from service.binlog.decoder import DecodeOptions
from service.binlog.events import (
    ColumnarRowsEvent,
    GtidListEvent,
    QueryEvent,
    RowsEvent,
    TableMapEvent,
    TransactionPayloadEvent,
)
from service.binlog.rowchange import RowChange, RowColumns
from service.checkpoint import BinlogPosition, CheckpointTracker, statement_kind
from service.errors import DecodeError
from service.gtids import parse_gtid_set
from service.sink.values import json_document
from service.transactions import TableFilter, TransactionAssembler, parse_ddl

__all__ = [
    "FILE_SHIFT",
    "RANGE_SHIFT",
    "DDL_SCHEMA",
    "TXN_SCHEMA",
    "PARQUET_OPTIONS",
    "LogTable",
    "RangeResult",
    "RangeTask",
    "decode_options",
    "decode_range",
    "output_root",
    "pyarrow_writes",
    "table_schema",
    "write_empty",
]

FILE_SHIFT = 40  # up to 2^23 files
RANGE_SHIFT = 30  # up to 1024 ranges per file, 2^30 records per range
_BATCH_ROWS = 16384  # rows per table buffered before they become one Arrow batch (a row group)
# How the change log's Parquet is written: dictionary pages only for the columns of few distinct
# values (a batch's file names, ops, GTIDs): on the image columns a dictionary was a third of the
# write's time and made the files larger (a 250,000-change range: 1.34 -> 0.93 µs a change,
# 16.6 -> 11.4 MB); LZ4 (LZ4_RAW, which Spark's Parquet reader knows) as fast as snappy, smaller
# (docs/BENCHMARKS.md, "Replay: the tasks' cost per change", issue 42)
PARQUET_OPTIONS: dict[str, Any] = {"compression": "lz4", "use_dictionary": ["file", "end_file", "op", "gtid"]}

DDL_SCHEMA = pa.schema(
    [("seq", pa.int64()), ("file", pa.string()), ("pos", pa.int64()), ("end_pos", pa.int64()),
     ("ts", pa.int64()), ("server_id", pa.int64()), ("default_schema", pa.string()),
     ("kind", pa.string()), ("tables", pa.list_(pa.string())), ("sql", pa.string())]
)  # fmt: skip
TXN_SCHEMA = pa.schema(
    [("seq", pa.int64()), ("file", pa.string()), ("end_file", pa.string()), ("end_pos", pa.int64()),
     ("commit_ts", pa.int64()), ("gtid", pa.string()), ("gtid_set", pa.string())]
)  # fmt: skip
_META = (
    ("seq", pa.int64()), ("file", pa.string()), ("pos", pa.int64()), ("end_file", pa.string()),
    ("end_pos", pa.int64()), ("ts", pa.int64()), ("commit_ts", pa.int64()), ("server_id", pa.int64()),
    ("gtid", pa.string()), ("op", pa.string()),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LogTable:
    """What a task needs of a table: its union columns (name, kind) and its key columns."""

    schema: str
    table: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]


def table_schema(t: LogTable, canonical: bool) -> pa.Schema:
    """The Arrow schema of `changes/<schema>/<table>/` (docs/pipeline.md lists the columns)."""
    from service.batch.arrowlog import arrow_type

    kinds = dict(t.columns)
    image = pa.struct([pa.field(n, arrow_type(k)) for n, k in t.columns])
    key = pa.struct([pa.field(c, arrow_type(kinds.get(c, "text"))) for c in t.key]) if t.key else pa.string()
    names = pa.list_(pa.string())
    fields = [*_META, ("key", key), ("before", image), ("after", image),
              ("before_columns", names), ("after_columns", names)]  # fmt: skip
    if canonical:
        fields += [("before_json", pa.string()), ("after_json", pa.string())]
    return pa.schema(fields)


@dataclass(frozen=True, slots=True)
class RangeTask:
    range: FileRange
    out: str  # the output root: a local path or a URI pyarrow knows (else via_spark)
    tables: TableFilter
    log_tables: tuple[LogTable, ...]
    canonical: bool = False  # also the canonical JSON images
    schema_file: str | None = None  # `binlog-mirror schema export` doc for binlogs without names
    # an output pyarrow cannot write (s3a://, viewfs://, ...): the batches go back to Spark, as
    # Arrow IPC blobs in the result, and Spark's Hadoop writers write them (service.batch.spark_output)
    via_spark: bool = False


@dataclass(slots=True)
class RangeResult:
    index: int
    part: int
    changes: dict[tuple[str, str], int] = field(default_factory=dict)
    ddl: int = 0
    transactions: int = 0
    versions: list[tuple[int, str, str, str]] = field(default_factory=list)  # seq, schema, table, version
    end: dict[str, Any] | None = None  # the last resume point in the range
    blobs: list[tuple[str, bytes]] = field(default_factory=list)  # via_spark: (output, IPC batch)


def write_empty(out: str, relative: str, schema: pa.Schema) -> None:
    """An empty dataset (one file with the schema), so readers find the schema."""
    fs, root = output_root(out)
    fs.create_dir(f"{root}/{relative}", recursive=True)
    pq.write_table(
        schema.empty_table(),
        f"{root}/{relative}/part-empty.parquet",
        filesystem=fs,
        **PARQUET_OPTIONS,
    )


def decode_options(schema_file: str | None, columnar: bool = False) -> DecodeOptions:
    """The replay's decoder options. Columnar (the change log without its canonical JSON images):
    also DecodeOptions.stored_text, DECIMAL (scale <= 6) and the temporal values as their text,
    which Arrow parses a column at a time (arrowlog.column_array): no Decimal, date or datetime
    built per value, and none converted by pyarrow one by one."""
    if schema_file is None:
        return DecodeOptions(columnar=columnar, stored_text=columnar)
    from service.transport.columns import ColumnNames  # pure: reads the export document only

    with open(schema_file, "rb") as fh:
        names = ColumnNames.from_export(orjson.loads(fh.read()))
    return DecodeOptions(
        column_names=names,
        column_charsets=names.charsets,
        column_members=names.members,
        columnar=columnar,
        stored_text=columnar,
    )


class _TableBuffer:
    """A table's row changes of one version, column by column, until they become an Arrow batch."""

    def __init__(self, t: LogTable, canonical: bool, writer: pq.ParquetWriter | _BlobWriter) -> None:
        self.t, self.canonical, self.writer = t, canonical, writer
        self.version: tuple[str, ...] = ()
        self.meta: tuple[list[Any], ...] = tuple([] for _ in _META)
        self.before: list[dict[str, Any] | None] = []
        self.after: list[dict[str, Any] | None] = []
        self.rows = 0

    def extend(
        self, chs: Sequence[RowChange], seq: int, file: str, end: tuple[str, int, int, str | None]
    ) -> None:
        """Changes of one table in one transaction: a list per column, C loops, no per-row tuple."""
        n = len(chs)
        end_file, end_pos, commit_ts, gtid = end
        seqs, files, pos, end_files, end_poss, ts, commit_tss, server_ids, gtids, ops = self.meta
        seqs.extend(range(seq, seq + n))
        files.extend([file] * n)
        pos.extend([ch.position.start for ch in chs])
        end_files.extend([end_file] * n)
        end_poss.extend([end_pos] * n)
        ts.extend([ch.ts for ch in chs])
        commit_tss.extend([commit_ts] * n)
        server_ids.extend([ch.server_id for ch in chs])
        gtids.extend([ch.gtid or gtid for ch in chs])
        ops.extend([ch.op for ch in chs])  # a StrEnum: Arrow takes it as the str it is
        self.before.extend([ch.before for ch in chs])
        self.after.extend([ch.after for ch in chs])

    def flush(self) -> None:
        if not self.before:
            return
        t = self.t
        arrays = [pa.array(c, type=ty) for c, (_, ty) in zip(self.meta, _META, strict=True)]
        before = image_array(self.before, t.columns, self.version)
        after = image_array(self.after, t.columns, self.version)
        arrays += [
            self._key(before, after),
            before,
            after,
            names_array(self.before, self.version, before.is_valid()),
            names_array(self.after, self.version, after.is_valid()),
        ]
        if self.canonical:
            arrays += [
                pa.array(
                    [None if i is None else json_document(i).decode() for i in self.before], pa.string()
                ),
                pa.array([None if i is None else json_document(i).decode() for i in self.after], pa.string()),
            ]
        self.writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.writer.schema))
        self.rows += len(self.before)
        self.meta = tuple([] for _ in _META)
        self.before, self.after = [], []

    def _key(self, before: pa.StructArray, after: pa.StructArray) -> pa.Array:
        """The after image's key, else the before image's (a delete): from the images' columns."""
        t = self.t
        if not t.key:
            return pa.nulls(len(self.before), pa.string())
        kinds = dict(t.columns)
        if all(c in kinds for c in t.key):  # the images' columns, with their nulls where no image
            return _key(t, before, after)
        arrays = []
        for c in t.key:  # the after image's key, else the before image's (a delete)
            values = [
                a[c] if a is not None and a.get(c) is not None else (b.get(c) if b is not None else None)
                for b, a in zip(self.before, self.after, strict=True)
            ]
            arrays.append(column_array(values, kinds.get(c, "text")))
        return pa.StructArray.from_arrays(arrays, names=list(t.key))


class _ColumnBuffer:
    """_TableBuffer's columnar twin (DecodeOptions.columnar): rows events' RowColumns, their
    values appended per column (no dict per image), until they become an Arrow batch."""

    def __init__(self, t: LogTable, writer: pq.ParquetWriter | _BlobWriter) -> None:
        self.t, self.writer = t, writer
        self.version: tuple[str, ...] = ()
        self.meta: tuple[list[Any], ...] = tuple([] for _ in _META)
        self.before, self.after = ImageColumns(t.columns), ImageColumns(t.columns)
        self.counts: list[int] = []  # rows per event (meta holds a value per event)
        self.pending = 0  # rows buffered
        self.rows = 0  # rows written

    def extend(self, c: RowColumns, seq: int, file: str, end: tuple[str, int, int, str | None]) -> None:
        """One rows event's rows: its metadata once (the same for each of its rows: expanded
        by a `take` per batch), its values appended per column."""
        n = c.count
        end_file, end_pos, commit_ts, gtid = end
        seqs, files, pos, end_files, end_poss, ts, commit_tss, server_ids, gtids, ops = self.meta
        seqs.append(seq)  # the event's first row's; its rows' follow one by one
        files.append(file)
        pos.append(c.position.start)
        end_files.append(end_file)
        end_poss.append(end_pos)
        ts.append(c.ts)
        commit_tss.append(commit_ts)
        server_ids.append(c.server_id)
        gtids.append(c.gtid or gtid)
        ops.append(c.op)
        self.counts.append(n)
        self.before.extend(n, c.before_names, c.before)
        self.after.extend(n, c.after_names, c.after)
        self.pending += n

    def _meta(self) -> list[pa.Array]:
        """The metadata columns, a value per row, from the events' values and row counts."""
        import numpy as np

        counts = np.array(self.counts, dtype=np.int64)
        event = np.repeat(np.arange(len(counts)), counts)  # each row's event
        first = np.repeat(np.cumsum(counts) - counts, counts)  # each row's event's first row
        seq = np.array(self.meta[0], dtype=np.int64)[event] + (np.arange(self.pending) - first)
        take = pa.array(event)
        arrays = [pa.array(seq, type=pa.int64())]
        for values, (_, ty) in zip(self.meta[1:], _META[1:], strict=True):
            arrays.append(pa.array(values, type=ty).take(take))
        return arrays

    def flush(self) -> None:
        if not self.pending:
            return
        t = self.t
        arrays = self._meta()
        before, after = self.before.array(t.columns), self.after.array(t.columns)
        arrays += [
            _key(t, before, after),
            before,
            after,
            self.before.names_array(self.version, before.is_valid()),
            self.after.names_array(self.version, after.is_valid()),
        ]
        self.writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.writer.schema))
        self.rows += self.pending
        self.pending = 0
        self.meta = tuple([] for _ in _META)
        self.counts = []
        self.before, self.after = ImageColumns(t.columns), ImageColumns(t.columns)


def _key(t: LogTable, before: pa.StructArray, after: pa.StructArray) -> pa.Array:
    if not t.key:
        return pa.nulls(len(before), pa.string())
    return key_array(t.columns, t.key, before, after)


def _one_change(ch: RowChange) -> RowColumns:
    """A RowChange as a one-row RowColumns (a rows event the columnar decoder leaves as changes)."""
    b, a = ch.before, ch.after
    return RowColumns(
        ch.op, ch.schema, ch.table, 1,
        None if b is None else list(b), None if b is None else [[v] for v in b.values()],
        None if a is None else list(a), None if a is None else [[v] for v in a.values()],
        ch.position, ch.ts, ch.server_id, ch.gtid,
    )  # fmt: skip


class _BlobWriter:
    """A ParquetWriter's stand-in when Spark writes the output: each batch as one Arrow IPC
    stream, kept with the output's path (bounded: a batch is at most _BATCH_ROWS rows)."""

    def __init__(self, relative: str, schema: pa.Schema, blobs: list[tuple[str, bytes]]) -> None:
        self.relative, self.schema, self.blobs = relative, schema, blobs

    def write_batch(self, batch: pa.RecordBatch) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema) as stream:
            stream.write_batch(batch)
        self.blobs.append((self.relative, sink.getvalue().to_pybytes()))

    def close(self) -> None:
        pass


class _Output:
    """The part files of one range: a ParquetWriter per table, opened at its first row (or, for an
    output Spark writes, a _BlobWriter)."""

    def __init__(self, task: RangeTask, blobs: list[tuple[str, bytes]]) -> None:
        self.task = task
        self.blobs = blobs
        self.fs: pafs.FileSystem | None = None
        self.root = task.out
        if not task.via_spark:
            self.fs, self.root = output_root(task.out)
        r = task.range
        self.part = f"part-{r.index:05d}-{r.part:04d}.parquet"
        self.tables = {(t.schema, t.table): t for t in task.log_tables}
        self.buffers: dict[tuple[str, str], _TableBuffer] = {}
        self.columns: dict[tuple[str, str], _ColumnBuffer] = {}

    def _writer(self, relative: str, schema: pa.Schema) -> pq.ParquetWriter | _BlobWriter:
        if self.fs is None:
            return _BlobWriter(relative, schema, self.blobs)
        self.fs.create_dir(f"{self.root}/{relative}", recursive=True)
        path = f"{self.root}/{relative}/{self.part}"
        return pq.ParquetWriter(path, schema, filesystem=self.fs, **PARQUET_OPTIONS)

    def _version(self, schema: str, table: str, where: str) -> LogTable:
        t = self.tables.get((schema, table))
        if t is None:  # the scan saw every TABLE_MAP: only a changed file gets here
            raise DecodeError(f"{where}: {schema}.{table} has no table version from the scan")
        return t

    def buffer(self, schema: str, table: str, where: str) -> _TableBuffer:
        buf = self.buffers.get((schema, table))
        if buf is None:
            t = self._version(schema, table, where)
            writer = self._writer(f"changes/{schema}/{table}", table_schema(t, self.task.canonical))
            buf = self.buffers[(schema, table)] = _TableBuffer(t, self.task.canonical, writer)
        return buf

    def column_buffer(self, schema: str, table: str, where: str) -> _ColumnBuffer:
        buf = self.columns.get((schema, table))
        if buf is None:
            t = self._version(schema, table, where)
            writer = self._writer(f"changes/{schema}/{table}", table_schema(t, False))
            buf = self.columns[(schema, table)] = _ColumnBuffer(t, writer)
        return buf

    def write(self, relative: str, schema: pa.Schema, columns: list[list[Any]]) -> None:
        if columns[0]:
            writer = self._writer(relative, schema)
            arrays = [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
            writer.close()

    def _all(self) -> dict[tuple[str, str], _TableBuffer | _ColumnBuffer]:
        return {**self.buffers, **self.columns}  # a range uses one kind (columnar or not)

    def close(self) -> dict[tuple[str, str], int]:
        for buf in self._all().values():
            buf.flush()
            buf.writer.close()
        return {k: b.rows for k, b in self._all().items()}

    def abort(self) -> None:
        """Close without the buffered rows (the job fails: its staged output is deleted)."""
        for buf in self._all().values():
            with contextlib.suppress(Exception):
                buf.writer.close()


_VERSION_COLUMNS: dict[str, tuple[str, ...]] = {}


def _write_columns(
    out: _Output,
    pending: list[RowColumns],
    txn_versions: dict[tuple[str, str], str],
    base: int,
    rank: int,
    name: str,
    end: tuple[str, int, int, str | None],
) -> int:
    """A committed transaction's rows (columnar) into their tables' buffers, in runs of one table
    as decode_range does with a transaction's RowChanges; returns the rank after them."""
    i, n = 0, len(pending)
    while i < n:
        first = pending[i]
        j = i + 1
        while j < n and pending[j].table == first.table and pending[j].schema == first.schema:
            j += 1
        ver = txn_versions.get((first.schema, first.table))
        if ver is not None:  # else a table the filter dropped
            buf = out.column_buffer(first.schema, first.table, f"{name} at offset {first.position.start}")
            if buf.version != (cols := _columns_of(ver)):
                buf.flush()  # a batch holds one version
                buf.version = cols
            for c in pending[i:j]:
                buf.extend(c, base | rank, name, end)
                rank += c.count
            if buf.pending >= _BATCH_ROWS:
                buf.flush()
        i = j
    return rank


def _columns_of(version: str) -> tuple[str, ...]:
    cols = _VERSION_COLUMNS.get(version)
    if cols is None:
        cols = _VERSION_COLUMNS[version] = tuple(c["name"] for c in orjson.loads(version)["columns"])
    return cols


def decode_range(task: RangeTask) -> RangeResult:
    """Decode one range and write its part files; see the module doc.

    Without the cyclic GC while it runs: a range keeps up to _BATCH_ROWS row changes (their
    images, values and RowChange objects, none in a cycle) per table alive until they become a
    batch, and every full collection walked them all again: 2-3 µs per change, measured
    (benchmarks/replay_range.py). Collected as usual once the range is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode_range(task)
    finally:
        if enabled:
            gc.enable()


def _decode_range(task: RangeTask) -> RangeResult:
    r = task.range
    name = os.path.basename(r.path)
    # Rows column by column, straight into the Arrow batches' lists; the canonical JSON images
    # are made from each image's dict (json_document), so that output decodes RowChanges.
    columnar = not task.canonical
    decoder = BinlogDecoder(decode_options(task.schema_file, columnar), file=name)
    if r.start > 4:  # the file's FORMAT_DESCRIPTION first: how to read every event after it
        for offset, data in scan_binlog_file(r.path, 4, 5):
            decoder.feed(data, offset)
    gtids = parse_gtid_set(r.gtids) if r.gtids is not None else None
    tracker = CheckpointTracker(BinlogPosition(name, r.start), gtids)
    assembler = TransactionAssembler(tracker, task.tables)
    result = RangeResult(r.index, r.part)
    out = _Output(task, result.blobs)
    base = r.index << FILE_SHIFT | r.part << RANGE_SHIFT
    rank = 0
    versions: dict[tuple[str, str], str] = {}  # the current TABLE_MAP's version per table
    emitted: set[str] = set()
    txn_versions: dict[tuple[str, str], str] = {}
    ddl: list[list[Any]] = [[] for _ in DDL_SCHEMA]
    txns: list[list[Any]] = [[] for _ in TXN_SCHEMA]
    pending: list[RowColumns] = []  # columnar: the open transaction's rows, event by event
    try:
        for offset, data in scan_binlog_file(r.path, r.start, r.stop):
            event = decoder.feed(data, offset)
            if event is None:
                continue
            inner = event.events if isinstance(event, TransactionPayloadEvent) else (event,)
            for ev in inner:
                if isinstance(ev, GtidListEvent) and tracker.gtids is None and ev.gtids:
                    tracker.gtids = parse_gtid_set(",".join(ev.gtids))  # MariaDB: the state at file start
                elif isinstance(ev, TableMapEvent):
                    t = ev.table
                    if task.tables.wants(t.schema, t.table):
                        v = table_version(t)
                        versions[(t.schema, t.table)] = v
                        if v not in emitted:
                            emitted.add(v)
                            result.versions.append((base | rank, t.schema, t.table, v))
                            rank += 1
                elif isinstance(ev, RowsEvent):
                    key = (ev.table.schema, ev.table.table)
                    if key in versions:
                        txn_versions[key] = versions[key]
                    if columnar and not ev.skipped and task.tables.wants(*key):  # as the assembler
                        if isinstance(ev, ColumnarRowsEvent):
                            if ev.columns is not None and ev.columns.count:
                                pending.append(ev.columns)
                        else:  # PARTIAL_UPDATE_ROWS: decoded as RowChanges
                            pending.extend(_one_change(ch) for ch in ev.changes)
                elif isinstance(ev, QueryEvent) and statement_kind(ev.sql) == "ddl":
                    if not tracker.in_transaction:
                        parsed = parse_ddl(ev.schema, ev.sql)
                        h = ev.header
                        row = (base | rank, name, h.offset, h.offset + h.event_size, h.timestamp,
                               h.server_id, ev.schema, parsed.kind, [f"{s}.{t}" for s, t in parsed.tables],
                               ev.sql)  # fmt: skip
                        for column, value in zip(ddl, row, strict=True):
                            column.append(value)
                        rank += 1
                dropped = assembler.dropped
                txn = assembler.feed(ev)
                if assembler.dropped != dropped:  # rolled back: its rows are not written
                    pending = []
                if txn is None:
                    continue
                end_file, end_pos, cts, gtid = txn.end.position.file, txn.end.position.pos, txn.ts, txn.gtid
                if columnar:
                    rank = _write_columns(
                        out, pending, txn_versions, base, rank, name, (end_file, end_pos, cts, gtid)
                    )
                    pending = []
                changes = () if columnar else txn.changes
                i, n = 0, len(changes)
                while i < n:  # runs of one table: one extend each
                    first = changes[i]
                    j = i + 1
                    while j < n and changes[j].table == first.table and changes[j].schema == first.schema:
                        j += 1
                    ver = txn_versions.get((first.schema, first.table))
                    if ver is not None:  # else a table the filter dropped
                        buf = out.buffer(
                            first.schema, first.table, f"{name} at offset {first.position.start}"
                        )
                        if buf.version != (cols := _columns_of(ver)):
                            buf.flush()  # a batch holds one version: its images transpose in one go
                            buf.version = cols
                        buf.extend(changes[i:j], base | rank, name, (end_file, end_pos, cts, gtid))
                        rank += j - i
                        if len(buf.before) >= _BATCH_ROWS:
                            buf.flush()
                    i = j
                for column, value in zip(
                    txns, (base | rank, name, end_file, end_pos, cts, gtid, txn.end.gtid_set), strict=True
                ):
                    column.append(value)
                rank += 1
                txn_versions.clear()
                last = txn.end
                result.end = {"file": last.position.file, "pos": last.position.pos,
                              "gtid_set": last.gtid_set, "ts": last.ts}  # fmt: skip
        out.write("ddl", DDL_SCHEMA, ddl)
        out.write("transactions", TXN_SCHEMA, txns)
    except BaseException:
        out.abort()
        raise
    result.changes = out.close()
    result.ddl, result.transactions = len(ddl[0]), len(txns[0])
    if rank >= 1 << RANGE_SHIFT:
        raise DecodeError(f"{name}: more than 2^{RANGE_SHIFT} records in one range: split it smaller")
    return result
