"""BinlogDecoder: the one stateful class of the core. Raw event bytes in, typed events out.

State: the StreamFormat from the last FORMAT_DESCRIPTION, the table maps of the current
statement, the current file (from ROTATE) and offset, the current GTID, and stats.

Offsets. `EventHeader.offset` is `log_pos - event_size` when the server sets log_pos,
else the decoder's running offset (MariaDB 11.4+ and in-payload events have log_pos 0).
Artificial events (fake ROTATE, the re-sent FORMAT_DESCRIPTION with log_pos 0) do not
advance it; ROTATE sets it to the rotate's position.

TRANSACTION_PAYLOAD: `feed` returns a TransactionPayloadEvent whose `events` iterator
inflates and decodes the inner events lazily through this decoder. `decode_events(raw)`
yields the outer event followed by the inner ones, which is what most callers want.
Rows of inner events carry the payload event's span as their position.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

try:  # ISA-L's CRC-32 (the same polynomial as zlib's): 2-3x faster on event-sized buffers
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - a platform without an isal wheel
    from zlib import crc32

from service.binlog.constants import HEADER_LEN, LOG_EVENT_ARTIFICIAL_F, LOG_EVENT_IGNORABLE_F, STMT_END_F
from service.binlog.constants import EventType as E
from service.binlog.control import CONTROL_EVENTS, parse_control, parse_rotate
from service.binlog.events import (
    ColumnarRowsEvent,
    Event,
    EventHeader,
    FormatDescriptionEvent,
    OpaqueEvent,
    RotateEvent,
    RowsEvent,
    TableMapEvent,
    TransactionPayloadEvent,
)
from service.binlog.fde import StreamFormat, parse_format_description
from service.binlog.gtid import parse_gtid, parse_gtid_list, parse_mariadb_gtid, parse_previous_gtids
from service.binlog.payload import iter_inner_events, parse_payload_header
from service.binlog.query import parse_query
from service.binlog.rawevent import RawEvent
from service.binlog.rowchange import EventSpan, RowChange, RowColumns
from service.binlog.rows import (
    ROWS_EVENTS,
    TablePlan,
    decode_rows,
    decode_rows_columns,
    parse_extra_row_info,
    parse_rows_header,
    rows_header_layout,
)
from service.binlog.schema import TableSchema
from service.binlog.stats import DecoderStats
from service.binlog.tablemap import parse_table_map
from service.errors import (
    ChecksumMismatch,
    DecodeError,
    InvalidValue,
    MissingTableMap,
    TruncatedEvent,
    UnknownEvent,
    UnsupportedBinlog,
)

__all__ = ["BinlogDecoder", "DecodeOptions"]

_OPAQUE = {
    E.IGNORABLE, E.TRANSACTION_CONTEXT, E.VIEW_CHANGE,
    E.LOAD, E.SLAVE, E.CREATE_FILE, E.EXEC_LOAD, E.NEW_LOAD,
}  # fmt: skip
_QUERY = {E.QUERY, E.EXECUTE_LOAD_QUERY, E.MARIA_QUERY_COMPRESSED}
_GTID = {E.GTID, E.ANONYMOUS_GTID, E.GTID_TAGGED}
_TABLE_CACHE_MAX = 4096
_FDE = int(E.FORMAT_DESCRIPTION)
# CRC-32 of any data followed by its own CRC-32 (little-endian) is this constant, so a
# trailer checks with one crc32() over the whole event, without slicing the trailer off.
_CRC32_RESIDUE = 0x2144DF1C

_Handler = Callable[[EventHeader, bytes, StreamFormat], "Event | None"]


def _previous_gtids(h: EventHeader, body: bytes, fmt: StreamFormat) -> Event:
    return parse_previous_gtids(h, body)


def _gtid_list(h: EventHeader, body: bytes, fmt: StreamFormat) -> Event:
    return parse_gtid_list(h, body)


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    verify_checksum: bool = True
    # Return True to skip decoding a table's rows (the TABLE_MAP is always recorded).
    skip_rows: Callable[[TableSchema], bool] | None = None
    # Column names for tables whose TABLE_MAP has none (binlog_row_metadata=MINIMAL);
    # called once per distinct TABLE_MAP. Otherwise names are "@1".."@N".
    column_names: Callable[[TableSchema], Sequence[str] | None] | None = None
    # Collation ids for tables whose TABLE_MAP has no charsets (binlog_row_metadata=NO_LOG), one
    # per column (None: not a character column, or unknown), from a schema the caller knows
    # (information_schema, a `schema export` file). Without it such text renders losslessly
    # (values.text_decoder) and binary columns cannot be told from text.
    column_charsets: Callable[[TableSchema], Sequence[int | None] | None] | None = None
    # ENUM/SET values for tables whose TABLE_MAP has none (not FULL metadata), one entry per
    # column (None for the others). Without them ENUM decodes as its index and SET as its bitmask.
    column_members: Callable[[TableSchema], Sequence[tuple[str, ...] | None] | None] | None = None
    # DECIMAL, DATE, DATETIME2, TIMESTAMP2 and TIME2 values as their canonical text
    # (canonical.value_to_json of the Decimal, date, datetime or timedelta, which are not built):
    # for a caller that only prints them (`binlog-mirror decode`). row_change_to_dict gives the
    # same JSON either way.
    text_values: bool = False
    # Only the values whose canonical text is also their text in Redis (service/sink/values.py:
    # hash fields, keys, foreign-key sets) as that text: DATE, DATETIME2, TIME2 and DECIMAL of
    # scale <= 6 (a wider scale's Decimal may print with an exponent there, and stays a Decimal);
    # TIMESTAMP2 as a UtcText, whose Redis text is its UTC wall time (without the T and the Z).
    # For the mirror's stream, whose every output is one of those texts or the canonical JSON.
    stored_text: bool = False
    # Rows events carry their rows column by column (RowsEvent.columns, a RowColumns; `changes`
    # is []), except PARTIAL_UPDATE_ROWS events: for the replay's Arrow batches (service.batch).
    columnar: bool = False


class BinlogDecoder:
    def __init__(self, options: DecodeOptions = DecodeOptions(), *, file: str = "") -> None:
        self.options = options
        self.file = file
        self.format: StreamFormat | None = None
        self._trailer = 0  # checksum trailer bytes: format.checksum_len, looked up once per FDE
        self.gtid: str | None = None
        self.stats = DecoderStats()
        self.next_offset = 4
        self._tables: dict[int, TableSchema] = {}
        self._maps: dict[bytes, TableSchema] = {}
        self._plans: dict[int, TablePlan] = {}
        self._pending: Iterator[Event] | None = None
        self._payload_span: EventSpan | None = None
        self._handlers = self._event_handlers()
        self._rows_layouts: dict[int, tuple[int, int, bool]] = {}  # by type code; reset by each FDE

    # ---- public API -------------------------------------------------------------
    def feed(self, raw: bytes | memoryview, offset: int | None = None) -> Event | None:
        """Decode one whole event (header + body + checksum trailer, if any).

        Returns None only for an unknown event type flagged LOG_EVENT_IGNORABLE_F."""
        if self._pending is not None:
            self._drain_pending()
        # Exact type checks, not getattr(raw, "offset", None): compiled, a missing attribute
        # raises and clears an AttributeError, which cost more than decoding an XID.
        if type(raw) is bytes:  # the replication stream's events
            return self._decode(raw, offset, inner=False)
        if isinstance(raw, RawEvent):  # read_binlog_file's: bytes that know their offset
            return self._decode(raw, raw.offset if offset is None else offset, inner=False)
        return self._decode(bytes(raw), offset, inner=False)

    def decode_events(self, raw: bytes | memoryview, offset: int | None = None) -> Iterator[Event]:
        """Like feed(), flattened: the event, then any events inside a TRANSACTION_PAYLOAD."""
        event = self.feed(raw, offset)
        if event is None:
            return
        yield event
        if isinstance(event, TransactionPayloadEvent):
            yield from event.events

    @property
    def tables(self) -> dict[int, TableSchema]:
        """Table maps of the current statement, by table id (read-only view intended)."""
        return self._tables

    # ---- internals ----------------------------------------------------------------
    def _drain_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            for _ in pending:
                pass

    def _where(self, offset: int) -> str:
        return f"{self.file or '<stream>'} at offset {offset}"

    def _decode(self, data: bytes, offset: int | None, inner: bool) -> Event | None:
        if len(data) < HEADER_LEN:
            raise TruncatedEvent(f"{self._where(offset or self.next_offset)}: event of {len(data)} bytes")
        # The 19-byte header by byte arithmetic (little-endian): a compiled build does this
        # without the Struct call, its tuple and six int objects.
        ts = data[0] | data[1] << 8 | data[2] << 16 | data[3] << 24
        type_code = data[4]
        server_id = data[5] | data[6] << 8 | data[7] << 16 | data[8] << 24
        size = data[9] | data[10] << 8 | data[11] << 16 | data[12] << 24
        log_pos = data[13] | data[14] << 8 | data[15] << 16 | data[16] << 24
        flags = data[17] | data[18] << 8
        if offset is None:
            if inner and self._payload_span is not None:
                offset = self._payload_span.start
            elif log_pos and log_pos >= size and not flags & LOG_EVENT_ARTIFICIAL_F:
                offset = log_pos - size
            else:
                offset = self.next_offset
        if size != len(data):
            raise TruncatedEvent(f"{self._where(offset)}: header says {size} bytes, got {len(data)}")
        header = EventHeader(ts, type_code, server_id, size, log_pos, flags, offset)
        if not inner:
            artificial = bool(flags & LOG_EVENT_ARTIFICIAL_F) or (log_pos == 0 and type_code in (4, 15))
            if not artificial:
                self.next_offset = offset + size
        by_type = self.stats.events_by_type
        by_type[type_code] = by_type.get(type_code, 0) + 1
        try:
            return self._dispatch(header, data, inner)
        except DecodeError as exc:
            if str(exc).startswith(self._where(offset)):
                raise
            raise type(exc)(f"{self._where(offset)} ({header.type_name}): {exc}") from exc
        except (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError) as exc:
            raise InvalidValue(f"{self._where(offset)} ({header.type_name}): {exc!r}") from exc

    def _body(self, header: EventHeader, data: bytes, inner: bool) -> bytes:
        if inner or not self._trailer:
            return data[HEADER_LEN:]
        if self.options.verify_checksum:
            self._verify_checksum(header, data)
        elif len(data) < HEADER_LEN + 4:
            raise TruncatedEvent("event too short for its CRC32 trailer")
        return data[HEADER_LEN:-4]

    def _verify_checksum(self, header: EventHeader, data: bytes) -> None:
        if len(data) < HEADER_LEN + 4:
            raise TruncatedEvent("event too short for its CRC32 trailer")
        if crc32(data) != _CRC32_RESIDUE:
            want = int.from_bytes(data[-4:], "little")
            got = crc32(data[:-4])
            if want != got and header.type_code == E.FORMAT_DESCRIPTION and header.flags & 1:
                # LOG_EVENT_BINLOG_IN_USE_F is set in the FDE of a file still open (or not
                # closed cleanly) after its CRC was computed: check with the flag cleared.
                got = crc32(data[:17] + bytes([data[17] & 0xFE]) + data[18:-4])
            if want != got:
                raise ChecksumMismatch(
                    f"{self._where(header.offset)}: CRC32 0x{got:08x} != trailer 0x{want:08x}"
                )

    def _dispatch(self, h: EventHeader, data: bytes, inner: bool) -> Event | None:
        t = h.type_code
        fmt = self.format
        if fmt is None or t == _FDE:
            return self._before_format(h, data)
        body = self._body(h, data, inner)
        handler = self._handlers.get(t)
        if handler is not None:
            return handler(h, body, fmt)
        return self._rare(h, body, inner)

    def _before_format(self, h: EventHeader, data: bytes) -> Event:
        if h.type_code == _FDE:
            return self._fde(h, data)
        if h.type_code == E.ROTATE:  # the fake rotate that precedes the FDE in a replication stream
            body = data[HEADER_LEN:]
            if len(data) >= HEADER_LEN + 12 and crc32(data[:-4]) == int.from_bytes(data[-4:], "little"):
                body = data[HEADER_LEN:-4]
            return self._rotate(parse_rotate(h, body, None))
        raise DecodeError(f"{h.type_name} event before any FORMAT_DESCRIPTION_EVENT")

    def _event_handlers(self) -> dict[int, _Handler]:
        """Type code -> decoder of the events that carry no special case (one dict lookup
        per event instead of a chain of IntEnum comparisons at ~90 ns each)."""
        handlers: dict[int, _Handler] = {int(t): self._rows for t in ROWS_EVENTS}
        handlers[E.TABLE_MAP] = self._table_map
        handlers.update((int(t), self._query) for t in _QUERY)
        handlers.update((int(t), self._gtid_event) for t in _GTID)
        handlers[E.MARIA_GTID] = self._mariadb_gtid_event
        handlers[E.ROTATE] = self._rotate_event
        handlers[E.PREVIOUS_GTIDS] = _previous_gtids
        handlers[E.MARIA_GTID_LIST] = _gtid_list
        handlers.update((t, parse_control) for t in CONTROL_EVENTS if t != E.ROTATE)
        return handlers

    def _rare(self, h: EventHeader, body: bytes, inner: bool) -> Event | None:
        t = h.type_code
        if t == E.TRANSACTION_PAYLOAD:
            if inner:
                raise InvalidValue("TRANSACTION_PAYLOAD nested in a TRANSACTION_PAYLOAD")
            return self._payload(h, body)
        if t == E.MARIA_START_ENCRYPTION:
            raise UnsupportedBinlog("encrypted binlog (START_ENCRYPTION_EVENT)")
        if t == E.START_V3:
            raise UnsupportedBinlog("START_EVENT_V3 (binlog v1-v3)")
        if t in _OPAQUE or t in E._value2member_map_:
            return OpaqueEvent(h, body)
        if h.flags & LOG_EVENT_IGNORABLE_F:
            self.stats.skipped_ignorable += 1
            return None
        raise UnknownEvent(f"{self._where(h.offset)}: unknown event type {t}")

    def _query(self, h: EventHeader, body: bytes, fmt: StreamFormat) -> Event:
        event = parse_query(h, body, fmt)
        if "unknown_code" in event.status:
            self.stats.unknown_status_vars += 1
        return event

    def _gtid_event(self, h: EventHeader, body: bytes, fmt: StreamFormat) -> Event:
        event = parse_gtid(h, body)
        self.gtid = event.gtid
        return event

    def _mariadb_gtid_event(self, h: EventHeader, body: bytes, fmt: StreamFormat) -> Event:
        event = parse_mariadb_gtid(h, body)
        self.gtid = event.gtid
        return event

    def _rotate_event(self, h: EventHeader, body: bytes, fmt: StreamFormat) -> Event:
        return self._rotate(parse_rotate(h, body, fmt))

    def _fde(self, h: EventHeader, data: bytes) -> FormatDescriptionEvent:
        version, server, created, fmt = parse_format_description(data[HEADER_LEN:])
        if fmt.checksum_len and self.options.verify_checksum:
            self._verify_checksum(h, data)
        self.format, self._trailer = fmt, fmt.checksum_len
        self._rows_layouts.clear()
        self._tables.clear()
        return FormatDescriptionEvent(h, version, server, created, fmt)

    def _rotate(self, event: RotateEvent) -> RotateEvent:
        self.file = event.next_file
        self.next_offset = event.position
        self._tables.clear()
        return event

    def _table_map(self, h: EventHeader, body: bytes, fmt: StreamFormat) -> TableMapEvent:
        schema = self._maps.get(body)
        if schema is None:  # TABLE_MAPs repeat per statement: parse each distinct one once
            o = self.options
            schema = parse_table_map(body, fmt, o.column_names, o.column_charsets, o.column_members)
            if len(self._maps) >= _TABLE_CACHE_MAX:
                self._maps.clear()
            self._maps[body] = schema
        self._tables[schema.table_id] = schema
        return TableMapEvent(h, schema)

    def _plan(self, schema: TableSchema) -> TablePlan:
        plan = self._plans.get(id(schema))
        if plan is None or plan.schema is not schema:
            if len(self._plans) >= _TABLE_CACHE_MAX:
                self._plans.clear()
            options = self.options
            plan = TablePlan(schema, self.stats, options.text_values, options.stored_text)
            self._plans[id(schema)] = plan
        return plan

    def _rows(self, h: EventHeader, body: bytes, fmt: StreamFormat) -> RowsEvent:
        kind = ROWS_EVENTS[h.type_code]
        layout = self._rows_layouts.get(h.type_code)
        if layout is None:
            layout = self._rows_layouts[h.type_code] = rows_header_layout(fmt, h.type_code)
        table_id, flags, extra, start = parse_rows_header(body, fmt, h.type_code, layout)
        schema = self._tables.get(table_id)
        if schema is None:
            raise MissingTableMap(
                f"{self._where(h.offset)}: no TABLE_MAP for table id {table_id} ({h.type_name})"
            )
        if flags & STMT_END_F:
            self._tables.clear()  # ids are only valid up to the end of the statement
        skipped = self.options.skip_rows is not None and self.options.skip_rows(schema)
        columns: RowColumns | None = None
        changes: list[RowChange] = []
        if skipped:
            self.stats.skipped_rows_events += 1
        else:
            span = self._payload_span or EventSpan(self.file, h.offset, h.offset + h.event_size)
            plan = self._plan(schema)
            if self.options.columnar and not kind.partial:
                columns = decode_rows_columns(
                    body, start, kind, plan, span, h.timestamp, h.server_id, self.gtid
                )
                self.stats.rows += columns.count
            else:
                changes = decode_rows(body, start, kind, plan, span, h.timestamp, h.server_id, self.gtid)
                self.stats.rows += len(changes)
        part: int | None = None
        source: int | None = None
        ndb: bytes | None = None
        if extra:  # MySQL 8 writes it for partitioned (and NDB) tables only
            part, source, ndb = parse_extra_row_info(extra, kind)
        if columns is not None:
            return ColumnarRowsEvent(
                h, schema, columns, kind.op, flags, kind.version, extra, skipped, kind.partial,
                kind.compressed, part, source, ndb,
            )  # fmt: skip
        if extra:
            return RowsEvent(
                h, schema, changes, kind.op, flags, kind.version, extra, skipped, kind.partial,
                kind.compressed, part, source, ndb,
            )  # fmt: skip
        return RowsEvent(
            h, schema, changes, kind.op, flags, kind.version, extra, skipped, kind.partial, kind.compressed
        )

    def _payload(self, h: EventHeader, body: bytes) -> TransactionPayloadEvent:
        head = parse_payload_header(body)
        span = EventSpan(self.file, h.offset, h.offset + h.event_size)

        def inner() -> Iterator[Event]:
            self._payload_span = span
            try:
                for raw in iter_inner_events(body, head):
                    event = self._decode(raw, None, inner=True)
                    if event is not None:
                        yield event
            except DecodeError as exc:
                if str(exc).startswith(self._where(h.offset)):
                    raise
                raise type(exc)(f"{self._where(h.offset)} (TRANSACTION_PAYLOAD): {exc}") from exc
            finally:
                self._payload_span = None

        events = inner()
        self._pending = events
        return TransactionPayloadEvent(h, head.compression, head.payload_size, head.uncompressed_size, events)
