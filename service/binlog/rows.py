"""Rows events (WRITE/UPDATE/DELETE v0/v1/v2, PARTIAL_UPDATE_ROWS, MariaDB compressed).

Decoding speed comes from a `TablePlan` cached per TableSchema: each column's decoder is
built once, and for every (columns-present, NULL bitmap) pattern seen we build an image
reader: interpreted, generated straight-line Python where runs of adjacent fixed-width
columns unpack with one struct call; in the compiled build, an imagereader.StepReader.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from service.binlog.compress import mariadb_uncompress
from service.binlog.constants import HEADER_LEN
from service.binlog.constants import ColumnType as T
from service.binlog.constants import EventType as E
from service.binlog.fde import StreamFormat
from service.binlog.imagereader import COMPILED, ColumnStep, StepReader
from service.binlog.reader import ByteReader
from service.binlog.rowchange import EventSpan, Op, Row, RowChange, RowColumns
from service.binlog.schema import TableSchema
from service.binlog.stats import DecoderStats
from service.binlog.values import FixedSpec, VarSpec, column_spec
from service.errors import DecodeError, InvalidValue, TruncatedEvent

__all__ = [
    "ROWS_EVENTS",
    "RowsKind",
    "TablePlan",
    "decode_rows",
    "decode_rows_columns",
    "parse_extra_row_info",
    "parse_rows_header",
    "rows_header_layout",
]

ImageReader = Callable[[bytes, int], tuple[Row, int]]

# Row-image readers: StepReader loops in the compiled build; generated straight-line Python
# when interpreted (each is the faster of the two there). A plain global, so tests can run
# either kind in either build.
USE_STEP_READERS = COMPILED


class RowsKind:
    __slots__ = ("op", "version", "compressed", "partial", "is_insert", "is_update")

    def __init__(self, op: Op, version: int, compressed: bool = False, partial: bool = False) -> None:
        self.op, self.version, self.compressed, self.partial = op, version, compressed, partial
        # StrEnum comparisons cost ~60 ns each: the row loops test these bools instead
        self.is_insert, self.is_update = op == Op.INSERT, op == Op.UPDATE


ROWS_EVENTS: dict[int, RowsKind] = {
    E.PRE_GA_WRITE_ROWS: RowsKind(Op.INSERT, 0),
    E.PRE_GA_UPDATE_ROWS: RowsKind(Op.UPDATE, 0),
    E.PRE_GA_DELETE_ROWS: RowsKind(Op.DELETE, 0),
    E.WRITE_ROWS_V1: RowsKind(Op.INSERT, 1),
    E.UPDATE_ROWS_V1: RowsKind(Op.UPDATE, 1),
    E.DELETE_ROWS_V1: RowsKind(Op.DELETE, 1),
    E.WRITE_ROWS: RowsKind(Op.INSERT, 2),
    E.UPDATE_ROWS: RowsKind(Op.UPDATE, 2),
    E.DELETE_ROWS: RowsKind(Op.DELETE, 2),
    E.PARTIAL_UPDATE_ROWS: RowsKind(Op.UPDATE, 2, partial=True),
    E.MARIA_WRITE_ROWS_COMPRESSED_V1: RowsKind(Op.INSERT, 1, compressed=True),
    E.MARIA_UPDATE_ROWS_COMPRESSED_V1: RowsKind(Op.UPDATE, 1, compressed=True),
    E.MARIA_DELETE_ROWS_COMPRESSED_V1: RowsKind(Op.DELETE, 1, compressed=True),
    E.MARIA_WRITE_ROWS_COMPRESSED: RowsKind(Op.INSERT, 2, compressed=True),
    E.MARIA_UPDATE_ROWS_COMPRESSED: RowsKind(Op.UPDATE, 2, compressed=True),
    E.MARIA_DELETE_ROWS_COMPRESSED: RowsKind(Op.DELETE, 2, compressed=True),
}


class TablePlan:
    """Column decoders for one TableSchema plus compiled readers per row-image pattern."""

    __slots__ = ("schema", "_specs", "_json_specs", "_json_cols", "_cache", "_by_present")

    def __init__(
        self, schema: TableSchema, stats: DecoderStats, text_values: bool = False, stored_text: bool = False
    ) -> None:
        self.schema = schema
        self._specs = [
            column_spec(c, stats, text=text_values, stored_text=stored_text) for c in schema.columns
        ]
        self._json_cols = [c.index for c in schema.columns if c.type == T.JSON]
        self._json_specs = {
            i: column_spec(schema.columns[i], stats, partial_json=True) for i in self._json_cols
        }
        self._cache: dict[tuple[int, int, int], ImageReader] = {}
        self._by_present: dict[int, dict[int, ImageReader]] = {}

    @property
    def json_column_count(self) -> int:
        return len(self._json_cols)

    def readers_by_nulls(self, present: int) -> dict[int, ImageReader]:
        """NULL bitmap -> compiled reader, for one columns-present bitmap and no partial JSON.
        The row loops look readers up here directly: one dict lookup per row image, even
        when NULLs alternate from row to row (a nullable column in an UPDATE)."""
        readers = self._by_present.get(present)
        if readers is None or len(readers) > 4096:  # pathological NULL patterns: keep memory bounded
            readers = self._by_present[present] = {}
        return readers

    def image_reader(self, present: int, nulls: int, partial: int = 0) -> ImageReader:
        key = (present, nulls, partial)
        reader = self._cache.get(key)
        if reader is None:
            if len(self._cache) > 4096:  # pathological NULL patterns: keep memory bounded
                self._cache.clear()
            reader = self._cache[key] = self._compile(present, nulls, partial)
        if not partial:
            self.readers_by_nulls(present)[nulls] = reader
        return reader

    def _compile(self, present: int, nulls: int, partial: int) -> ImageReader:
        """The reader of one pattern: a StepReader in the compiled build, else generated Python."""
        partial_cols = {self._json_cols[k] for k in range(len(self._json_cols)) if partial >> k & 1}
        names: list[str] = []
        specs: list[FixedSpec | VarSpec | None] = []  # None: NULL in this pattern
        k = 0
        for col in self.schema.columns:
            if not present >> col.index & 1:
                continue
            names.append(col.name)
            is_null = nulls >> k & 1
            k += 1
            if is_null:
                specs.append(None)
            elif col.index in partial_cols:
                specs.append(self._json_specs[col.index])
            else:
                specs.append(self._specs[col.index])
        if USE_STEP_READERS:
            return StepReader([ColumnStep(name, spec) for name, spec in zip(names, specs, strict=True)])
        return _make_reader(tuple(names), _steps(specs))


def _steps(specs: list[FixedSpec | VarSpec | None]) -> tuple[tuple[int, Any, int, Any], ...]:
    """Group a pattern's columns for _make_reader: (0, Struct, size, converters) for each run
    of adjacent fixed-width columns, (1, VarSpec, 0, None) per variable-length column and
    (2, None, 0, None) per NULL."""
    steps: list[tuple[int, Any, int, Any]] = []
    codes: list[str] = []
    convs: list[Callable[[Any], Any] | None] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if codes:
            packed = tuple(convs) if any(c is not None for c in convs) else None
            steps.append((0, struct.Struct("<" + "".join(codes)), size, packed))
            codes.clear()
            convs.clear()
            size = 0

    for spec in specs:
        if isinstance(spec, FixedSpec):
            codes.append(spec.code)
            convs.append(spec.convert)
            size += spec.size
            continue
        flush()
        steps.append((2, None, 0, None) if spec is None else (1, spec, 0, None))
    flush()
    return tuple(steps)


def _make_reader(names: tuple[str, ...], steps: tuple[tuple[int, Any, int, Any], ...]) -> ImageReader:
    """Generate straight-line Python for one row-image pattern.

    Column names reach the source only through repr() of str (always a safe literal);
    everything else is referenced through the namespace. No bounds checks here: callers
    map IndexError/struct.error to TruncatedEvent and check the row end."""
    ns: dict[str, Any] = {}
    lines = ["def read(buf, pos):"]
    k = 0
    for i, (kind, a, size, extra) in enumerate(steps):
        if kind == 0:  # run of fixed-width columns: one struct call
            count = len(a.unpack(bytes(a.size)))
            targets = [f"v{k + j}" for j in range(count)]
            ns[f"S{i}"] = a
            lines.append(f"    {', '.join(targets)}{',' if count == 1 else ''} = S{i}.unpack_from(buf, pos)")
            lines.append(f"    pos += {size}")
            if extra is not None:
                for j, conv in enumerate(extra):
                    if conv is not None:
                        ns[f"C{k + j}"] = conv
                        lines.append(f"    v{k + j} = C{k + j}(v{k + j})")
            k += count
        elif kind == 1:  # variable-length column
            spec: VarSpec = a
            v = f"v{k}"
            if spec.prefix == 1:
                lines += ["    s = pos + 1", "    pos = s + buf[pos]"]
            elif spec.prefix == 2:
                lines += ["    s = pos + 2", "    pos = s + (buf[pos] | buf[pos + 1] << 8)"]
            else:
                ns[f"R{k}"] = spec.read
                lines.append(f"    {v}, pos = R{k}(buf, pos)")
                k += 1
                continue
            if spec.codec is not None:
                ns[f"D{k}"] = spec.convert
                lines += [
                    "    try:",
                    f"        {v} = buf[s:pos].decode({spec.codec!r})",
                    "    except UnicodeDecodeError:",
                    f"        {v} = D{k}(buf[s:pos])",
                ]
            elif spec.convert is not None:
                ns[f"D{k}"] = spec.convert
                lines.append(f"    {v} = D{k}(buf[s:pos])")
            else:
                lines.append(f"    {v} = buf[s:pos]")
            k += 1
        else:
            lines.append(f"    v{k} = None")
            k += 1
    items = ", ".join(f"{name!r}: v{j}" for j, name in enumerate(names))
    lines.append(f"    return {{{items}}}, pos")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from our own plan, see docstring
    reader: ImageReader = ns["read"]
    return reader


def rows_header_layout(fmt: StreamFormat, type_code: int) -> tuple[int, int, bool]:
    """(table-id width, post-header length, has v2 extra data) of a rows event type: the same
    for every event of a stream, so the decoder computes it once per type and FDE."""
    width = fmt.table_id_width
    post = fmt.post_header_len(type_code, width + 2)
    has_extra = post == width + 4 or (post == 0 and ROWS_EVENTS[type_code].version == 2)
    return width, post, has_extra


def parse_rows_header(
    body: bytes, fmt: StreamFormat, type_code: int, layout: tuple[int, int, bool] | None = None
) -> tuple[int, int, bytes, int]:
    """(table_id, flags, extra_info, offset of the column count) of a rows event body."""
    width, post, has_extra = layout or rows_header_layout(fmt, type_code)
    r = ByteReader(body, base=HEADER_LEN)
    table_id = r.uint(width)
    flags = r.uint(2)
    extra = b""
    if has_extra:
        extra_len = r.uint(2)
        if extra_len < 2:
            raise InvalidValue(f"rows event extra-data length {extra_len} < 2")
        extra = r.take(extra_len - 2)
    elif post > width + 2:
        r.skip(post - width - 2)
    return table_id, flags, extra, r.pos


_EXTRA_NDB, _EXTRA_PART = 0, 1  # enum_extra_row_info_typecode (libbinlogevents rows_event.h)


def parse_extra_row_info(extra: bytes, kind: RowsKind) -> tuple[int | None, int | None, bytes | None]:
    """(partition_id, source_partition_id, ndb_info) of a v2 rows event's extra row info, as
    MySQL's Rows_event constructor reads it (libbinlogevents/src/rows_event.cpp): a sequence of
    typecode:1 entries. NDB (0): length:1 (counting itself) + format:1 + data. PART (1):
    partition_id:2, and for UPDATE/PARTIAL_UPDATE also source_partition_id:2. An unknown
    typecode ends the parse (the server itself does not read past one either)."""
    part: int | None = None
    source: int | None = None
    ndb: bytes | None = None
    r = ByteReader(extra, base=HEADER_LEN + 10)
    while not r.at_end():
        code = r.u8()
        if code == _EXTRA_NDB:
            length = r.u8()
            if length < 2:
                raise InvalidValue(f"NDB extra row info of length {length}")
            r.pos -= 1  # the length byte is part of the block
            block = r.take(length)
            ndb = block if ndb is None else ndb  # the server keeps the first one
        elif code == _EXTRA_PART:
            part = r.uint(2)
            if kind.is_update:
                source = r.uint(2)
        else:
            break
    return part, source, ndb


def decode_rows(
    body: bytes,
    start: int,
    kind: RowsKind,
    plan: TablePlan,
    span: EventSpan,
    ts: int,
    server_id: int,
    gtid: str | None,
) -> list[RowChange]:
    schema = plan.schema
    present_bi, present_ai, buf = _rows_body(body, start, kind, schema)
    try:
        return _rows(buf, kind, plan, present_bi, present_ai, span, ts, server_id, gtid)
    except (IndexError, struct.error) as exc:
        raise TruncatedEvent(
            f"row data of {schema.qualified_name} ends early ({exc}){_old_format_hint(schema)}"
        ) from None
    except DecodeError as exc:  # e.g. InvalidValue from a converter: add the hint, if any
        hint = _old_format_hint(schema)
        if not hint:
            raise
        raise type(exc)(f"{exc}{hint}") from None
    except (ValueError, OverflowError) as exc:
        raise InvalidValue(f"bad value in {schema.qualified_name}: {exc}{_old_format_hint(schema)}") from None


def _rows_body(body: bytes, start: int, kind: RowsKind, schema: TableSchema) -> tuple[int, int, bytes]:
    """A rows event's column bitmaps (before, after image) and its row data (uncompressed)."""
    r = ByteReader(body, start, base=HEADER_LEN)
    ncols = r.lenenc()
    if ncols != len(schema.columns):
        raise InvalidValue(
            f"rows event has {ncols} columns, TABLE_MAP of {schema.qualified_name} has {len(schema.columns)}"
        )
    present_bi = r.bitmap(ncols)
    present_ai = present_bi
    if kind.is_update and kind.version > 0:
        present_ai = r.bitmap(ncols)
    buf = body[r.pos :]
    if kind.compressed:
        buf = mariadb_uncompress(buf)
    return present_bi, present_ai, buf


def decode_rows_columns(
    body: bytes,
    start: int,
    kind: RowsKind,
    plan: TablePlan,
    span: EventSpan,
    ts: int,
    server_id: int,
    gtid: str | None,
) -> RowColumns:
    """decode_rows' rows column by column (DecodeOptions.columnar). Not for PARTIAL_UPDATE."""
    schema = plan.schema
    present_bi, present_ai, buf = _rows_body(body, start, kind, schema)
    out = RowColumns(
        kind.op, schema.schema, schema.table, 0, None, None, None, None, span, ts, server_id, gtid
    )
    try:
        _columns(buf, kind, plan, present_bi, present_ai, out)
    except (IndexError, struct.error) as exc:
        raise TruncatedEvent(
            f"row data of {schema.qualified_name} ends early ({exc}){_old_format_hint(schema)}"
        ) from None
    except DecodeError as exc:
        hint = _old_format_hint(schema)
        if not hint:
            raise
        raise type(exc)(f"{exc}{hint}") from None
    except (ValueError, OverflowError) as exc:
        raise InvalidValue(f"bad value in {schema.qualified_name}: {exc}{_old_format_hint(schema)}") from None
    return out


def _append(row: Row, columns: list[list[Any]]) -> list[list[Any]]:
    """Append an image's values to its columns' lists (made at the event's first row)."""
    if not columns:
        columns = [[] for _ in range(len(row))]
    k = 0
    for value in row.values():
        columns[k].append(value)
        k += 1
    return columns


def _columns(
    buf: bytes, kind: RowsKind, plan: TablePlan, present_bi: int, present_ai: int, out: RowColumns
) -> None:
    """_rows' loops, each image's values appended to its columns instead of a RowChange."""
    schema = plan.schema
    db, tbl = schema.schema, schema.table
    end = len(buf)
    nb_bi = (bin(present_bi).count("1") + 7) // 8
    nb_ai = (bin(present_ai).count("1") + 7) // 8
    pos = 0
    count = 0
    image = plan.image_reader
    befores: list[list[Any]] = []
    afters: list[list[Any]] = []
    row: Row = {}
    before: Row = {}
    if not kind.is_update:
        is_insert = kind.is_insert
        present, nb = (present_ai, nb_ai) if is_insert else (present_bi, nb_bi)
        readers = plan.readers_by_nulls(present)
        values: list[list[Any]] = []
        while pos < end:
            start = pos + nb
            nulls = _bitmap(buf, pos, nb)
            read = readers.get(nulls) or image(present, nulls)
            row, pos = read(buf, start)
            if pos > end or pos == start - nb:
                _bad_row(pos, end, db, tbl)
            values = _append(row, values)
            count += 1
        if is_insert:
            out.after_names, out.after = list(row), values
        else:
            out.before_names, out.before = list(row), values
        out.count = count
        return
    readers_bi = plan.readers_by_nulls(present_bi)
    readers_ai = plan.readers_by_nulls(present_ai)
    steps = USE_STEP_READERS and present_bi == present_ai
    while pos < end:
        row_start = pos
        nulls = _bitmap(buf, pos, nb_bi)
        if steps:  # unchanged values converted once, as in _rows
            keys: list[object] = []
            reader = readers_bi.get(nulls) or image(present_bi, nulls)
            assert isinstance(reader, StepReader)
            before, pos = reader.read(buf, pos + nb_bi, keys, None, None)
            nulls = _bitmap(buf, pos, nb_ai)
            reader = readers_ai.get(nulls) or image(present_ai, nulls)
            assert isinstance(reader, StepReader)
            row, pos = reader.read(buf, pos + nb_ai, None, keys, before)
        else:
            before, pos = (readers_bi.get(nulls) or image(present_bi, nulls))(buf, pos + nb_bi)
            nulls = _bitmap(buf, pos, nb_ai)
            row, pos = (readers_ai.get(nulls) or image(present_ai, nulls))(buf, pos + nb_ai)
        if pos > end or pos == row_start:
            _bad_row(pos, end, db, tbl)
        befores = _append(before, befores)
        afters = _append(row, afters)
        count += 1
    out.before_names, out.before = list(before), befores
    out.after_names, out.after = list(row), afters
    out.count = count


_OLD_TEMPORALS = frozenset({T.TIME, T.DATETIME, T.TIMESTAMP})


def _old_format_hint(schema: TableSchema) -> str:
    """The usual cause of an unreadable row in a table with pre-5.6.4 temporal columns: MariaDB
    logs its 5.3-format TIME/DATETIME/TIMESTAMP columns *with fractional seconds* under the same
    type codes and metadata as the old format, in a longer layout the binlog does not describe
    (mariadb-binlog cannot read those rows either)."""
    if not any(c.type in _OLD_TEMPORALS for c in schema.columns):
        return ""
    return (
        f"; {schema.qualified_name} has pre-5.6.4 temporal columns: if one is a MariaDB 5.3-format"
        " column with fractional seconds (COLUMN_TYPE '... /* mariadb-5.3 */'), its rows cannot be"
        " decoded: ALTER TABLE ... FORCE rewrites the table in the current format"
    )


def _rows(
    buf: bytes,
    kind: RowsKind,
    plan: TablePlan,
    present_bi: int,
    present_ai: int,
    span: EventSpan,
    ts: int,
    server_id: int,
    gtid: str | None,
) -> list[RowChange]:
    schema = plan.schema
    db, tbl = schema.schema, schema.table
    end = len(buf)
    nb_bi = (bin(present_bi).count("1") + 7) // 8
    nb_ai = (bin(present_ai).count("1") + 7) // 8
    json_bytes = (plan.json_column_count + 7) // 8
    op = kind.op
    out: list[RowChange] = []
    append = out.append
    pos = 0
    image = plan.image_reader
    is_insert = kind.is_insert
    if not kind.is_update:  # one image per row: the hot path of bulk inserts/deletes
        present, nb = (present_ai, nb_ai) if is_insert else (present_bi, nb_bi)
        readers = plan.readers_by_nulls(present)
        while pos < end:
            start = pos + nb
            nulls = _bitmap(buf, pos, nb)
            read = readers.get(nulls) or image(present, nulls)
            if isinstance(read, StepReader):  # compiled: a native call, no argument tuple
                row, pos = read.read(buf, start, None, None, None)
            else:
                row, pos = read(buf, start)
            if pos > end or pos == start - nb:
                _bad_row(pos, end, db, tbl)
            if is_insert:
                append(RowChange(op, db, tbl, None, row, span, ts, server_id, gtid))
            else:
                append(RowChange(op, db, tbl, row, None, span, ts, server_id, gtid))
        return out
    readers_bi = plan.readers_by_nulls(present_bi)
    readers_ai = plan.readers_by_nulls(present_ai)
    if USE_STEP_READERS and present_bi == present_ai and not kind.partial:
        # Same columns in both images: unchanged values are converted once (StepReader.read)
        while pos < end:
            row_start = pos
            nulls = _bitmap(buf, pos, nb_bi)
            keys: list[object] = []
            reader = readers_bi.get(nulls) or image(present_bi, nulls)
            assert isinstance(reader, StepReader)
            before, pos = reader.read(buf, pos + nb_bi, keys, None, None)
            nulls = _bitmap(buf, pos, nb_ai)
            reader = readers_ai.get(nulls) or image(present_ai, nulls)
            assert isinstance(reader, StepReader)
            after, pos = reader.read(buf, pos + nb_ai, None, keys, before)
            if pos > end or pos == row_start:
                _bad_row(pos, end, db, tbl)
            append(RowChange(op, db, tbl, before, after, span, ts, server_id, gtid))
        return out
    while pos < end:
        row_start = pos
        nulls = _bitmap(buf, pos, nb_bi)
        before, pos = (readers_bi.get(nulls) or image(present_bi, nulls))(buf, pos + nb_bi)
        partial = 0
        if kind.partial:
            if pos >= end:
                raise TruncatedEvent("PARTIAL_UPDATE row ends before value_options")
            options = buf[pos]
            pos += 1
            if options > 1:
                raise InvalidValue(f"PARTIAL_UPDATE value_options {options}")
            if options & 1:
                partial = int.from_bytes(buf[pos : pos + json_bytes], "little")
                pos += json_bytes
        nulls = _bitmap(buf, pos, nb_ai)
        read = (partial == 0 and readers_ai.get(nulls)) or image(present_ai, nulls, partial)
        after, pos = read(buf, pos + nb_ai)
        if pos > end or pos == row_start:
            _bad_row(pos, end, db, tbl)
        append(RowChange(op, db, tbl, before, after, span, ts, server_id, gtid))
    return out


def _bitmap(buf: bytes, pos: int, n: int) -> int:
    """The little-endian bitmap of `n` bytes at `pos` (a row's NULL bitmap: one or two bytes for
    most tables, read without int.from_bytes' slice and method call). Past the end of `buf` it
    reads what is there, as int.from_bytes on the slice would: the row reader reports it."""
    if n == 1 and pos < len(buf):
        return buf[pos]
    if n == 2 and pos + 1 < len(buf):
        return buf[pos] | buf[pos + 1] << 8
    return int.from_bytes(buf[pos : pos + n], "little")


def _bad_row(pos: int, end: int, db: str, tbl: str) -> None:
    if pos > end:
        raise TruncatedEvent(f"row of {db}.{tbl} runs {pos - end} bytes past the event end")
    raise InvalidValue(f"empty row image for {db}.{tbl}")  # would repeat forever
