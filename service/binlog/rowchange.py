"""The one record shape of the whole product: a decoded row change.

The transport, the Redis sink, the websocket and the Spark pipeline all carry this
shape; `service.binlog.canonical` turns it into its lossless JSON form
(documented type by type in docs/row-format.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["EventSpan", "Op", "Row", "RowChange", "RowColumns"]

# Column name -> decoded value (None, int, float, Decimal, str, bytes, date, datetime,
# timedelta, JSON structures, ...). Absent columns (MINIMAL/NOBLOB images) are omitted.
Row = dict[str, Any]


class Op(StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


# Slotted dataclasses with an explicit __init__, immutable by convention: see events.py.
@dataclass(slots=True, unsafe_hash=True, init=False)
class EventSpan:
    """Where the rows event that carried a change sits in the binlog."""

    file: str
    start: int  # offset of the rows event's first header byte
    end: int  # offset just after the event (header.log_pos when the server sets it)

    def __init__(self, file: str, start: int, end: int) -> None:
        self.file, self.start, self.end = file, start, end


@dataclass(slots=True, unsafe_hash=True, init=False)
class RowChange:
    op: Op
    schema: str
    table: str
    before: Row | None  # None for insert
    after: Row | None  # None for delete
    position: EventSpan
    ts: int  # event timestamp, seconds since the epoch (source clock)
    server_id: int
    gtid: str | None = None

    def __init__(
        self, op: Op, schema: str, table: str, before: Row | None, after: Row | None, position: EventSpan,
        ts: int, server_id: int, gtid: str | None = None,
    ) -> None:  # fmt: skip
        self.op, self.schema, self.table, self.before, self.after = op, schema, table, before, after
        self.position, self.ts, self.server_id, self.gtid = position, ts, server_id, gtid

    def with_images(self, before: Row | None, after: Row | None) -> RowChange:
        """This change with other images (shaped: the stored fields); dataclasses.replace's
        generic path costs several µs a row."""
        return RowChange(
            self.op, self.schema, self.table, before, after, self.position, self.ts, self.server_id, self.gtid
        )


class RowColumns:
    """A rows event's row changes column by column (DecodeOptions.columnar: the replay's Arrow
    batches are built from these lists, not from a dict per image). Every row of one event has
    the same columns in each image: `before_names` / `after_names` (the image's columns, in the
    table's order, as a RowChange's image dict has them), and `before` / `after` one list of
    `count` values per name; both None where the op has no such image (insert: no before)."""

    __slots__ = ("op", "schema", "table", "count", "before_names", "before", "after_names", "after",
                 "position", "ts", "server_id", "gtid")  # fmt: skip

    def __init__(
        self, op: Op, schema: str, table: str, count: int, before_names: list[str] | None,
        before: list[list[Any]] | None, after_names: list[str] | None, after: list[list[Any]] | None,
        position: EventSpan, ts: int, server_id: int, gtid: str | None,
    ) -> None:  # fmt: skip
        self.op, self.schema, self.table, self.count = op, schema, table, count
        self.before_names, self.before, self.after_names, self.after = (
            before_names,
            before,
            after_names,
            after,
        )
        self.position, self.ts, self.server_id, self.gtid = position, ts, server_id, gtid
