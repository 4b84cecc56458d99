"""The one module that owns replication positions.

Value types for binlog positions, GTID sets and the checkpoint stored with the mirror, plus
`CheckpointTracker`, the pure state machine that turns decoded events into resume points.
A checkpoint only ever names a transaction boundary.

GTIDs and GTID-set arithmetic live in service/gtids.py (re-exported here); the checkpoint's
stored form in Redis in service/sink/checkpoints.py.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from service.binlog.constants import LOG_EVENT_ARTIFICIAL_F, EventType
from service.binlog.events import (
    Event,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RotateEvent,
    RowsEvent,
    TableMapEvent,
    TransactionPayloadEvent,
    XaPrepareEvent,
    XidEvent,
)
from service.gtids import (
    MARIADB_SET_RE,
    UUID_RE,
    GtidSet,
    MariadbGtid,
    MariadbGtidPos,
    MysqlGtid,
    MysqlGtidSet,
    parse_gtid,
    parse_gtid_set,
)

__all__ = [
    "BinlogPosition",
    "Checkpoint",
    "CheckpointTracker",
    "EventMark",
    "GtidSet",
    "MariadbGtid",
    "MariadbGtidPos",
    "MysqlGtid",
    "MysqlGtidSet",
    "StartPoint",
    "parse_gtid",
    "parse_gtid_set",
    "parse_start",
    "statement_kind",
]


# The value types are built per transaction: slotted dataclasses with an explicit __init__,
# native classes in the compiled build and immutable by convention, as the decoder's events
# (service/binlog/events.py). A class that defines an ordering also spells out __eq__ and
# __hash__: mypyc gives a native class with __lt__ or __le__ identity equality otherwise.
# __reduce__ keeps them copyable and picklable (a native class's default needs a no-argument
# constructor).
@dataclass(slots=True, init=False, eq=False)
class BinlogPosition:
    file: str  # "mysql-bin.000042"
    pos: int  # offset of the NEXT event

    def __init__(self, file: str, pos: int) -> None:
        self.file, self.pos = file, pos

    def __reduce__(self) -> tuple[type[BinlogPosition], tuple[str, int]]:
        return BinlogPosition, (self.file, self.pos)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        return self.pos == other.pos and self.file == other.file

    def __hash__(self) -> int:
        return hash((self.file, self.pos))

    @property
    def key(self) -> tuple[str, int, int]:
        """Order by base name, then numeric suffix (never string order), then offset."""
        base, _, suffix = self.file.rpartition(".")
        return base, int(suffix) if suffix.isdigit() else -1, self.pos

    # All four, not functools.total_ordering: its derived methods are interpreted wrappers,
    # and the stream compares positions once per transaction (mostly within one file: the
    # numeric suffix is only parsed when the files differ).
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        if self.file == other.file:
            return self.pos < other.pos
        return self.key < other.key

    def __le__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        if self.file == other.file:
            return self.pos <= other.pos
        return self.key <= other.key

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        if self.file == other.file:
            return self.pos > other.pos
        return self.key > other.key

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        if self.file == other.file:
            return self.pos >= other.pos
        return self.key >= other.key

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    @classmethod
    def parse(cls, text: str) -> BinlogPosition:
        """`FILE:POS`, e.g. `mysql-bin.000003:1234`."""
        file, sep, pos = text.strip().rpartition(":")
        if not sep or not file or not pos.isdigit():
            raise ValueError(f"binlog position {text!r} is not FILE:POS (e.g. mysql-bin.000003:4)")
        return cls(file, int(pos))


XID_EVENT = int(EventType.XID)
FORMAT_DESCRIPTION_EVENT = int(EventType.FORMAT_DESCRIPTION)


# --- checkpoints and start points ---------------------------------------------------------------


@dataclass(slots=True, unsafe_hash=True, init=False)  # built per transaction: see above
class EventMark:
    """What identifies the event that ends a checkpoint (the history check, docs/mirror.md): where
    it starts, its type, server_id and timestamp from its header, and `detail`: the XID of an XID
    event, the CRC32 of a query's statement text, 0 otherwise. Header fields, not the CRC32
    trailer: they exist with binlog_checksum=NONE too. Stored as text: `offset type server ts detail`."""

    offset: int
    type_code: int
    server_id: int
    timestamp: int
    detail: int

    def __init__(self, offset: int, type_code: int, server_id: int, timestamp: int, detail: int = 0) -> None:
        self.offset, self.type_code, self.server_id = offset, type_code, server_id
        self.timestamp, self.detail = timestamp, detail

    def __reduce__(self) -> tuple[type[EventMark], tuple[int, int, int, int, int]]:
        return EventMark, (self.offset, self.type_code, self.server_id, self.timestamp, self.detail)

    @classmethod
    def of(cls, event: Event) -> EventMark:
        h = event.header
        if isinstance(event, XidEvent):
            detail = event.xid
        elif isinstance(event, QueryEvent):
            detail = zlib.crc32(event.sql_bytes)
        elif isinstance(event, FormatDescriptionEvent):
            return cls.of_file(event)
        else:
            detail = 0
        return cls(h.offset, h.type_code, h.server_id, h.timestamp, detail)

    @classmethod
    def of_file(cls, event: FormatDescriptionEvent) -> EventMark:
        """The binlog file's identity: its FORMAT_DESCRIPTION (at offset 4), whose header time is
        the file's creation and whose detail is the CRC32 of the server version. Also from the
        copy a dump re-sends when it starts inside the file (log_pos 0: its offset is made up)."""
        h = event.header
        return cls(4, h.type_code, h.server_id, h.timestamp, zlib.crc32(event.server_version.encode()))

    def same_transaction(self, other: EventMark) -> bool:
        """True when `other` may be this commit event written by another server of the same
        history (a replica with log_slave_updates): type, originating server_id, timestamp and
        statement CRC carry over; the offset and an XID (the writing server's own counter) do not."""
        return (
            self.type_code == other.type_code
            and self.server_id == other.server_id
            and self.timestamp == other.timestamp
            and (self.type_code == XID_EVENT or self.detail == other.detail)
        )

    def __str__(self) -> str:
        return f"{self.offset} {self.type_code} {self.server_id} {self.timestamp} {self.detail}"

    @classmethod
    def parse(cls, text: str) -> EventMark:
        parts = text.split()
        if len(parts) != 5 or not all(p.isdigit() for p in parts):
            raise ValueError(f"event mark {text!r} is not 'offset type server_id timestamp detail'")
        offset, type_code, server_id, timestamp, detail = map(int, parts)
        return cls(offset, type_code, server_id, timestamp, detail)


@dataclass(slots=True, unsafe_hash=True, init=False)
class Checkpoint:
    """The resume point after a committed transaction.

    It carries its history's identity (docs/mirror.md, "History check"): `mark`, the commit event
    ending at it, or for a checkpoint that ends no transaction (a bootstrap, a new file after a
    ROTATE) the FORMAT_DESCRIPTION of its file; `gtid`, the transaction's own GTID, which a
    resume by GTID asks the source for again to compare its commit event with `mark`; and
    `source`, the identity of the server it was read from (a change is a failover)."""

    position: BinlogPosition
    gtid_set: str = ""  # executed set after the transaction: "uuid:1-5,..." or MariaDB "0-1-100,..."
    ts: int = 0  # source timestamp of the transaction's commit event
    # the event ending at `position` (a commit), or its file's FORMAT_DESCRIPTION (offset 4);
    # None: not known. Not part of equality, nor are the others below: two checkpoints at one
    # position are the same resume point
    mark: EventMark | None = field(default=None, compare=False)
    # GTID of the last transaction applied up to here ("": none), the one `mark` ends
    gtid: str = field(default="", compare=False)
    source: str = field(default="", compare=False)  # `ServerInfo.identity` of the server read from
    # at a file's start: the commit event of `gtid` (in an earlier file), so that a failover right
    # after a ROTATE can still be followed by GTID
    txn_mark: EventMark | None = field(default=None, compare=False)

    def __init__(
        self,
        position: BinlogPosition,
        gtid_set: str = "",
        ts: int = 0,
        mark: EventMark | None = None,
        gtid: str = "",
        source: str = "",
        txn_mark: EventMark | None = None,
    ) -> None:
        self.position, self.gtid_set, self.ts, self.mark = position, gtid_set, ts, mark
        self.gtid, self.source, self.txn_mark = gtid, source, txn_mark

    def __reduce__(
        self,
    ) -> tuple[
        type[Checkpoint], tuple[BinlogPosition, str, int, EventMark | None, str, str, EventMark | None]
    ]:
        return Checkpoint, (
            self.position, self.gtid_set, self.ts, self.mark, self.gtid, self.source, self.txn_mark,
        )  # fmt: skip

    @property
    def ends_transaction(self) -> bool:
        """Its mark is a transaction's commit event (not a file's FORMAT_DESCRIPTION)."""
        return self.mark is not None and self.mark.type_code != FORMAT_DESCRIPTION_EVENT

    @property
    def last_commit(self) -> EventMark | None:
        """The commit event of the last transaction applied up to here (that of `gtid`), when known."""
        return self.mark if self.ends_transaction else self.txn_mark


StartPoint = Literal["now", "start"] | BinlogPosition | MysqlGtidSet | MariadbGtidPos | Checkpoint


def parse_start(text: str) -> StartPoint:
    """`now`, `start`, `FILE:POS` or a GTID set (either form)."""
    value = text.strip()
    if value in ("now", "start"):
        return "now" if value == "now" else "start"
    if MARIADB_SET_RE.match(value):
        return MariadbGtidPos.parse(value)
    head = value.split(":", 1)[0]
    if UUID_RE.match(head):
        return MysqlGtidSet.parse(value)
    try:
        return BinlogPosition.parse(value)
    except ValueError:
        raise ValueError(
            f"start point {text!r} is not now, start, FILE:POS or a GTID set (uuid:1-5 or domain-server-seq)"
        ) from None


# --- the tracker --------------------------------------------------------------------------------

_LEADING_COMMENT = re.compile(r"^\s*(?:/\*.*?\*/\s*|(?:--|#)[^\n]*\n\s*)*", re.S)


@lru_cache(maxsize=1024)  # BEGIN/COMMIT repeat at every transaction, and two callers ask
def statement_kind(sql: str) -> str:
    """What a QUERY event means for transaction boundaries:
    begin | commit | rollback | savepoint | ddl | other."""
    text = _LEADING_COMMENT.sub("", sql, count=1)
    words = text[:64].upper().split()
    first = words[0] if words else ""
    second = words[1] if len(words) > 1 else ""
    if first == "BEGIN" or (first == "START" and second == "TRANSACTION"):
        return "begin"
    if first == "COMMIT":
        return "commit"
    if first == "ROLLBACK":
        return "savepoint" if second == "TO" else "rollback"
    if first in ("SAVEPOINT", "RELEASE"):
        return "savepoint"
    if first in ("CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE"):
        return "ddl"
    return "other"


# What the tracker does with each event class (looked up by the class: one dict access per event
# instead of a chain of isinstance checks; subclasses get their base's kind on first sight).
_GTID, _ROTATE, _PREVIOUS, _COMMIT, _QUERY, _ROWS, _HEARTBEAT, _FDE, _PAYLOAD, _OTHER = range(10)
_KIND_BASES: tuple[tuple[type[Event], int], ...] = (
    (GtidEvent, _GTID),
    (RotateEvent, _ROTATE),
    (PreviousGtidsEvent, _PREVIOUS),
    (XidEvent, _COMMIT),
    (XaPrepareEvent, _COMMIT),
    (QueryEvent, _QUERY),
    (TableMapEvent, _ROWS),
    (RowsEvent, _ROWS),
    (HeartbeatEvent, _HEARTBEAT),
    (FormatDescriptionEvent, _FDE),
    (TransactionPayloadEvent, _PAYLOAD),
)
_KINDS: dict[type, int] = {}


def _kind(cls: type) -> int:
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _KINDS[cls] = next((k for base, k in _KIND_BASES if issubclass(cls, base)), _OTHER)
    return kind


class CheckpointTracker:
    """Where the stream is, fed every decoded event in order; pure (no I/O, no clock).

    `observe()` returns the resume `Checkpoint` only when the event closes a unit that may be
    resumed after: XID, a COMMIT or ROLLBACK query, a self-contained statement (DDL) outside a
    transaction, or MariaDB's XA PREPARE. Everywhere else it returns None, so a stream never
    resumes inside a transaction.

    Positions: a ROTATE (real or the fake one at stream start) sets file and offset; every other
    non-artificial event moves the offset to just after the event (`header.offset` +
    `event_size`: the decoder owns the rule for log_pos = 0, MariaDB 11.4+ in some cases). The
    FORMAT_DESCRIPTION the server re-sends when a dump starts past offset 4 has log_pos 0 and moves nothing.
    Events inside a TRANSACTION_PAYLOAD (MySQL binlog_transaction_compression; the decoder gives
    them the payload's offset) move nothing either: the payload event already moved past them.

    It runs once per event, so the offset is a plain int (`position` builds the value on demand)
    and the GTID set's text is kept with the set instead of formatted again at every commit.
    """

    __slots__ = (
        "_file", "_pos", "_gtids", "_gtid_text", "in_transaction", "_pending_gtid", "_pending_text",
        "_payload_at", "source", "_rotated", "_last_gtid", "_last_commit",
    )  # fmt: skip

    def __init__(
        self,
        position: BinlogPosition,
        gtids: GtidSet | None = None,
        source: str = "",
        last: Checkpoint | None = None,
    ) -> None:
        """`last`: the checkpoint resumed from, whose last transaction a file start carries on."""
        self._file, self._pos = position.file, position.pos
        self.gtids = gtids  # executed set so far; None when unknown (no GTID tracking)
        self.source = source  # the server's identity, stamped on every checkpoint
        self._rotated = False  # a real ROTATE was seen: the next file's FORMAT_DESCRIPTION ends it
        # the GTID and commit event of the last transaction, for a file start's checkpoint
        self._last_gtid = last.gtid if last is not None else ""
        self._last_commit = last.last_commit if last is not None else None
        self.in_transaction = False
        self._pending_gtid: MysqlGtid | MariadbGtid | None = None
        self._pending_text = ""  # the GTID event's own text of _pending_gtid
        self._payload_at: int | None = None  # offset of the last TRANSACTION_PAYLOAD

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition(self._file, self._pos)

    @property
    def gtids(self) -> GtidSet | None:
        return self._gtids

    @gtids.setter
    def gtids(self, value: GtidSet | None) -> None:
        self._gtids = value
        self._gtid_text = str(value) if value else ""

    @property
    def checkpoint(self) -> Checkpoint:
        """The current position as a Checkpoint (only a boundary when not in_transaction)."""
        return Checkpoint(self.position, self._gtid_text, source=self.source)

    def observe(self, event: Event) -> Checkpoint | None:
        kind = _KINDS.get(type(event))
        if kind is None:
            kind = _kind(type(event))
        self._advance(event, kind)
        if kind == _ROWS:
            # Rows outside any BEGIN: a group whose start we did not see (or a server that
            # writes no BEGIN); it still closes at its XID/COMMIT.
            self.in_transaction = True
            return None
        if kind == _COMMIT:
            # Also when no transaction is open (the stream started inside one): its end is a boundary.
            return self._commit(event)
        if kind == _GTID:
            assert isinstance(event, GtidEvent)
            self._pending_gtid, self._pending_text = self._gtid_of(event), event.gtid or ""
            # MariaDB: a GTID event is the BEGIN of a transaction unless it stands alone (DDL).
            self.in_transaction = event.domain_id is not None and not event.standalone
            return None
        if kind == _QUERY:
            assert isinstance(event, QueryEvent)
            sql_kind = statement_kind(event.sql)
            if sql_kind == "begin":
                self.in_transaction = True
                return None
            if self.in_transaction:
                return self._commit(event) if sql_kind in ("commit", "rollback") else None
            return None if sql_kind == "savepoint" else self._commit(event)
        if kind == _ROTATE and not self.in_transaction:
            if event.header.flags & LOG_EVENT_ARTIFICIAL_F:
                return None  # the dump's fake rotate names where we already are
            # The next file's start is a boundary too: an idle source that rotates (FLUSH, a
            # restart) then purges the old file must not strand the checkpoint in it.
            self._rotated = True
            return Checkpoint(
                self.position, self._gtid_text, event.header.timestamp, None, self._last_gtid, self.source,
                self._last_commit,
            )  # fmt: skip
        if kind == _FDE and self._rotated and event.header.log_pos:
            # ... and again just after the new file's FORMAT_DESCRIPTION, which is its mark: the
            # file's identity (creation time, server version), checked at a resume as a commit
            # event is (docs/mirror.md). The applier stores only the last of such empty ones.
            assert isinstance(event, FormatDescriptionEvent)
            self._rotated = False
            mark = EventMark.of_file(event)
            return Checkpoint(
                self.position, self._gtid_text, event.header.timestamp, mark, self._last_gtid, self.source,
                self._last_commit,
            )  # fmt: skip
        if kind == _PREVIOUS:
            assert isinstance(event, PreviousGtidsEvent)
            if event.gtid_set:
                # MySQL: the set executed before this file. Merged in, so a stream that began at a
                # file start (`start`, FILE:POS) checkpoints the whole executed set, not only what
                # it saw.
                base = self.gtids if isinstance(self.gtids, MysqlGtidSet) else MysqlGtidSet()
                self.gtids = base.add(MysqlGtidSet.parse(event.gtid_set))
        return None

    def _commit(self, event: Event) -> Checkpoint:
        self.in_transaction = False
        gtid, self._pending_gtid = self._pending_gtid, None
        if gtid is not None:
            if isinstance(gtid, MariadbGtid):
                base = self.gtids if isinstance(self.gtids, MariadbGtidPos) else MariadbGtidPos()
                pos = base.add(gtid)
                if len(pos.gtids) == 1 and pos.gtids[0] is gtid:
                    # One domain (most sources): the position's text is the GTID event's own,
                    # not formatted again at every commit.
                    self._gtids, self._gtid_text = pos, self._pending_text
                else:
                    self.gtids = pos
            else:
                mysql_base = self.gtids if isinstance(self.gtids, MysqlGtidSet) else MysqlGtidSet()
                self.gtids = mysql_base.add(gtid)
        position = BinlogPosition(self._file, self._pos)
        mark = EventMark.of(event)
        if gtid is not None:
            self._last_gtid, self._last_commit = self._pending_text, mark
            return Checkpoint(
                position, self._gtid_text, event.header.timestamp, mark, self._last_gtid, self.source
            )
        return Checkpoint(position, self._gtid_text, event.header.timestamp, mark, "", self.source)

    def _advance(self, event: Event, kind: int) -> None:
        h = event.header
        if kind == _ROTATE:
            assert isinstance(event, RotateEvent)
            self._file, self._pos = event.next_file, event.position
            return
        if kind == _HEARTBEAT or h.flags & LOG_EVENT_ARTIFICIAL_F:
            return
        if kind == _FDE and h.log_pos == 0:
            return
        if kind == _PAYLOAD:
            self._payload_at = h.offset
        elif self._payload_at is not None:
            if h.offset == self._payload_at:
                return  # inside a compressed payload: the position is already after the payload
            self._payload_at = None
        # The decoder's offset already applies MariaDB's log_pos == 0 rule (running offset).
        self._pos = h.offset + h.event_size

    @staticmethod
    def _gtid_of(event: GtidEvent) -> MysqlGtid | MariadbGtid | None:
        if event.anonymous or not event.gtid:
            return None
        if event.domain_id is not None and event.seq_no is not None:
            return MariadbGtid(event.domain_id, event.header.server_id, event.seq_no)
        return MysqlGtid(event.sid, event.gno, event.tag.lower() if event.tag else "")
