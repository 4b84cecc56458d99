"""Executor side of `replay`: one binlog file -> Arrow record batches (pure decoding, no Spark).

Every record has one shape (RAW_SCHEMA) and a `kind`:

    row    one row change; its images as JSON objects of column -> value text (`before`/`after`,
           the text `typed_column` casts back), optionally the canonical JSON (`before_json`...)
    ddl    one DDL statement (QUERY event outside a transaction): its SQL in `sql`, its kind
           (create, alter, drop, rename, truncate, other) in `op`, the tables it names in `version`
    table  a table version: the column list of a TABLE_MAP not seen before in this file (`sql`
           holds its JSON: name, kind, MySQL type, key columns)
    txn    one committed transaction: its end position, commit timestamp, GTID and GTID set
    end    the file's last resume point (`sql` holds the checkpoint as JSON)

`seq` is the global order: the file's index in the replayed list << 32 | the record's rank in
the file, so ordering by `seq` orders every change of every file.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from service.binlog import BinlogDecoder, scan_binlog_file
from service.binlog.canonical import naive_text, row_to_json
from service.binlog.constants import ColumnType as T
from service.binlog.decoder import DecodeOptions
from service.binlog.events import GtidListEvent, QueryEvent, RowsEvent, TableMapEvent, TransactionPayloadEvent
from service.binlog.schema import Column, TableSchema
from service.checkpoint import BinlogPosition, Checkpoint, CheckpointTracker, statement_kind
from service.errors import DecodeError
from service.gtids import parse_gtid_set
from service.sink.values import TEXT_FORMS, text_value
from service.transactions import TableFilter, TransactionAssembler, parse_ddl

__all__ = ["RAW_COLUMNS", "FileTask", "column_kind", "file_records", "value_text"]

# name, Spark SQL type: the raw records' columns, in the order file_records yields them
RAW_COLUMNS = (
    ("kind", "string"),
    ("seq", "bigint"),
    ("file", "string"),
    ("pos", "bigint"),  # offset of the rows / query event
    ("end_file", "string"),  # the resume point after the transaction (a ROTATE's: the next file)
    ("end_pos", "bigint"),
    ("ts", "bigint"),  # event timestamp
    ("commit_ts", "bigint"),  # the transaction's commit (XID / COMMIT) timestamp
    ("server_id", "bigint"),
    ("gtid", "string"),
    ("gtid_set", "string"),  # txn/end: executed GTID set after it
    ("schema", "string"),
    ("table", "string"),
    ("op", "string"),
    ("version", "string"),  # row: the table version (a `table` record's `sql`) it was logged with
    ("before", "string"),
    ("after", "string"),
    ("before_json", "string"),
    ("after_json", "string"),
    ("sql", "string"),
)

SEQ_SHIFT = 32


@dataclass(frozen=True, slots=True)
class FileTask:
    """One Spark task: a binlog file and its index in the replayed (ordered) list."""

    path: str
    index: int
    tables: TableFilter
    canonical: bool = False  # also emit the canonical JSON images
    schema_file: str | None = None  # `binlog-mirror schema export` doc for binlogs without names


def column_kind(c: Column) -> str:
    """The Spark type a column's values are stored with in the change log; `text` is the mirror's
    text form (docs/mirror.md, "Values") for what Spark has no lossless type for."""
    t = c.type
    if t in (T.TINY, T.SHORT, T.INT24, T.LONG, T.YEAR):
        return "bigint"
    if t == T.LONGLONG:
        return "decimal(20,0)" if c.unsigned else "bigint"
    if t == T.BIT:
        return "decimal(20,0)"
    if t in (T.FLOAT, T.DOUBLE):
        return "double"
    if t == T.NEWDECIMAL:
        precision, scale = c.meta >> 8, c.meta & 0xFF
        return f"decimal({precision},{scale})" if precision <= 38 else "text"
    if t in (T.DATE, T.NEWDATE):
        return "date"
    if t in (T.DATETIME, T.DATETIME2):
        return "timestamp_ntz"
    if t in (T.TIMESTAMP, T.TIMESTAMP2):
        return "timestamp_utc"  # stored as timestamp_ntz: the UTC wall time, as the mirror has it
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING, T.VARCHAR_COMPRESSED):
        return "binary" if c.charset == 63 else "string"
    if t in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.BLOB_COMPRESSED):
        return "binary" if c.charset in (63, None) else "string"
    return "text"  # TIME, JSON, ENUM, SET, GEOMETRY, VECTOR, ...


def value_text(kind: str, value: Any) -> str | None:
    """A value as the text `typed_column` casts to `kind` (None for SQL NULL)."""
    if value is None:
        return None
    if kind == "binary":
        if not isinstance(value, bytes | bytearray):
            raise DecodeError(f"a binary column holds a {type(value).__name__}: {value!r}")
        return base64.b64encode(value).decode()
    if kind == "timestamp_utc" and isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return naive_text(value, " ")
    if kind == "timestamp_ntz" and isinstance(value, dt.datetime):
        return naive_text(value, " ")
    if kind == "string" and not isinstance(value, str):
        raise DecodeError(f"a text column holds a {type(value).__name__}: {value!r}")
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()  # binary in a `text` column (GEOMETRY & co.)
    if isinstance(value, Decimal) or isinstance(value, int | float | str):
        return text_value(value)
    return text_value(value)


def _version(table: TableSchema) -> str:
    cols = [
        {"name": c.name, "kind": column_kind(c), "type": c.type.name, "unsigned": c.unsigned}
        for c in table.columns
    ]
    key = [table.columns[i].name for i in table.primary_key]
    return orjson.dumps({"columns": cols, "key": key}).decode()


def _options(task: FileTask) -> DecodeOptions:
    if task.schema_file is None:
        return DecodeOptions()
    from service.transport.columns import ColumnNames  # pure: reads the export document only

    with open(task.schema_file, "rb") as fh:
        names = ColumnNames.from_export(orjson.loads(fh.read()))
    return DecodeOptions(column_names=names, column_charsets=names.charsets, column_members=names.members)


def file_records(task: FileTask) -> Iterator[tuple[Any, ...]]:
    """Every record of one file in file order (RAW_COLUMNS tuples)."""
    name = os.path.basename(task.path)
    decoder = BinlogDecoder(_options(task), file=name)
    tracker = CheckpointTracker(BinlogPosition(name, 4))
    assembler = TransactionAssembler(tracker, task.tables)
    base = task.index << SEQ_SHIFT
    rank = 0
    versions: dict[tuple[str, str], str] = {}  # the current TABLE_MAP's version per table
    emitted: set[str] = set()
    txn_versions: dict[tuple[str, str], str] = {}
    last: Checkpoint | None = None
    for offset, data in scan_binlog_file(task.path):
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
                    v = _version(t)
                    versions[(t.schema, t.table)] = v
                    if v not in emitted:
                        emitted.add(v)
                        h = ev.header
                        yield ("table", base | rank, name, h.offset, None, None, h.timestamp, None,
                               h.server_id, None, None, t.schema, t.table, None, None, None, None,
                               None, None, v)  # fmt: skip
                        rank += 1
            elif isinstance(ev, RowsEvent):
                key = (ev.table.schema, ev.table.table)
                if key in versions:
                    txn_versions[key] = versions[key]
            elif isinstance(ev, QueryEvent) and statement_kind(ev.sql) == "ddl":
                if not tracker.in_transaction:
                    ddl = parse_ddl(ev.schema, ev.sql)
                    touched = orjson.dumps([f"{s}.{t}" for s, t in ddl.tables]).decode()
                    h = ev.header
                    yield ("ddl", base | rank, name, h.offset, name, h.offset + h.event_size,
                           h.timestamp, h.timestamp, h.server_id, None, None,
                           ev.schema, None, ddl.kind, touched, None, None, None, None, ev.sql)  # fmt: skip
                    rank += 1
            txn = assembler.feed(ev)
            if txn is None:
                continue
            end_file, end_pos, cts, gtid = txn.end.position.file, txn.end.position.pos, txn.ts, txn.gtid
            for ch in txn.changes:
                ver = txn_versions.get((ch.schema, ch.table))
                if ver is None:
                    continue  # a table the filter dropped
                convs = _converters(ver)
                yield ("row", base | rank, name, ch.position.start, end_file, end_pos, ch.ts, cts,
                       ch.server_id, ch.gtid or gtid, None, ch.schema, ch.table, ch.op.value, ver,
                       _image(ch.before, convs), _image(ch.after, convs),
                       _canonical(ch.before) if task.canonical else None,
                       _canonical(ch.after) if task.canonical else None, None)  # fmt: skip
                rank += 1
            yield ("txn", base | rank, name, None, end_file, end_pos, cts, cts, None, gtid,
                   txn.end.gtid_set, None, None, None, None, None, None, None, None, None)  # fmt: skip
            rank += 1
            txn_versions.clear()
            last = txn.end
    if last is not None:
        doc = {"file": last.position.file, "pos": last.position.pos, "gtid_set": last.gtid_set, "ts": last.ts}
        yield ("end", base | rank, name, None, last.position.file, last.position.pos, last.ts, last.ts,
               None, None, last.gtid_set, None, None, None, None, None, None, None, None,
               orjson.dumps(doc).decode())  # fmt: skip


Converter = Callable[[Any], str]
_CONVERTERS: dict[str, dict[str, Converter]] = {}


def _b64(value: Any) -> str:
    return value_text("binary", value) or ""  # never None: NULL is handled before


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    return value_text("string", value) or ""


def _converter(kind: str) -> Converter:
    """value_text for one kind, without its checks where the type says it all."""
    if kind == "binary":
        return _b64
    if kind == "string":
        return _text
    if kind in ("timestamp_utc", "timestamp_ntz"):
        return lambda v: value_text(kind, v) or ""
    return lambda v: text_value(v) if type(v) in TEXT_FORMS else value_text(kind, v) or ""


def _converters(version: str) -> dict[str, Converter]:
    convs = _CONVERTERS.get(version)
    if convs is None:
        cols = orjson.loads(version)["columns"]
        convs = _CONVERTERS[version] = {c["name"]: _converter(c["kind"]) for c in cols}
    return convs


def _image(row: dict[str, Any] | None, convs: dict[str, Converter]) -> str | None:
    if row is None:
        return None
    return orjson.dumps({k: None if v is None else convs[k](v) for k, v in row.items()}).decode()


def _canonical(row: dict[str, Any] | None) -> str | None:
    return None if row is None else orjson.dumps(row_to_json(row)).decode()
