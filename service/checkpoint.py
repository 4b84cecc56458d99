"""The one module that owns replication positions.

Value types for binlog positions, GTID sets and the checkpoint stored with the mirror, plus
`CheckpointTracker`, the pure state machine that turns decoded events into resume points.
A checkpoint only ever names a transaction boundary.

GTID forms:

    MySQL     "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7"      (uuid, then gno intervals)
              "3e11fa47-...:1-5:etl:1-3"                          (8.4 tagged GTIDs: tag, then its intervals)
              several uuids separated by ","
    MariaDB   "0-1-100,1-2-5"                                    (domain-server-seq, one per domain)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from service.binlog.constants import LOG_EVENT_ARTIFICIAL_F
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

__all__ = [
    "BinlogPosition",
    "Checkpoint",
    "CheckpointTracker",
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


# --- MySQL GTIDs --------------------------------------------------------------------------------

_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


def _norm_uuid(text: str) -> str:
    if not _UUID.match(text):
        raise ValueError(f"{text!r} is not a server uuid")
    h = text.replace("-", "").lower()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(slots=True, unsafe_hash=True, init=False)
class MysqlGtid:
    """One MySQL transaction id: `uuid:gno` or `uuid:tag:gno`."""

    uuid: str
    gno: int
    tag: str = ""

    def __init__(self, uuid: str, gno: int, tag: str = "") -> None:
        self.uuid, self.gno, self.tag = uuid, gno, tag

    def __reduce__(self) -> tuple[type[MysqlGtid], tuple[str, int, str]]:
        return MysqlGtid, (self.uuid, self.gno, self.tag)

    def __str__(self) -> str:
        return f"{self.uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.uuid}:{self.gno}"


def _merge(intervals: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, merged, inclusive intervals (adjacent ones joined: 1-3 + 4-5 = 1-5)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _fmt_intervals(intervals: tuple[tuple[int, int], ...]) -> str:
    return ":".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in intervals)


@dataclass(slots=True, init=False, eq=False)
class MysqlGtidSet:
    """A MySQL GTID set: (uuid, tag) -> merged inclusive gno intervals. Immutable."""

    sets: tuple[tuple[tuple[str, str], tuple[tuple[int, int], ...]], ...] = ()

    def __init__(self, sets: tuple[tuple[tuple[str, str], tuple[tuple[int, int], ...]], ...] = ()) -> None:
        self.sets = sets

    def __reduce__(self) -> tuple[type[MysqlGtidSet], tuple[object]]:
        return MysqlGtidSet, (self.sets,)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MysqlGtidSet):
            return NotImplemented
        return self.sets == other.sets

    def __hash__(self) -> int:
        return hash(self.sets)

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        acc: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for item in text.replace("\n", "").split(","):
            item = item.strip()
            if not item:
                continue
            parts = item.split(":")
            uuid, tag = _norm_uuid(parts[0].strip()), ""
            if len(parts) < 2:
                raise ValueError(f"GTID set item {item!r} has no intervals (expected uuid:1-5)")
            for part in parts[1:]:
                part = part.strip()
                m = _INTERVAL.match(part)
                if m:
                    lo = int(m.group(1))
                    hi = int(m.group(2)) if m.group(2) else lo
                    if lo < 1 or hi < lo:
                        raise ValueError(f"bad GTID interval {part!r} in {item!r}")
                    acc.setdefault((uuid, tag), []).append((lo, hi))
                elif _TAG.match(part):
                    tag = part.lower()
                else:
                    raise ValueError(f"bad GTID set item {item!r}: {part!r} is neither an interval nor a tag")
        return cls._build(acc)

    @classmethod
    def _build(cls, acc: dict[tuple[str, str], list[tuple[int, int]]]) -> MysqlGtidSet:
        return cls(tuple(sorted((k, _merge(v)) for k, v in acc.items() if v)))

    def _dict(self) -> dict[tuple[str, str], list[tuple[int, int]]]:
        return {k: list(v) for k, v in self.sets}

    def __str__(self) -> str:
        by_uuid: dict[str, list[str]] = {}
        for (uuid, tag), intervals in self.sets:  # sorted: the untagged "" entry comes first
            text = _fmt_intervals(intervals)
            by_uuid.setdefault(uuid, []).append(f"{tag}:{text}" if tag else text)
        return ",".join(f"{uuid}:{':'.join(parts)}" for uuid, parts in by_uuid.items())

    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, MysqlGtid):
            return False
        for key, intervals in self.sets:
            if key == (gtid.uuid, gtid.tag):
                return any(lo <= gtid.gno <= hi for lo, hi in intervals)
        return False

    def add(self, gtid: MysqlGtid | MysqlGtidSet) -> MysqlGtidSet:
        if isinstance(gtid, MysqlGtid):
            grown = self._extend_last(gtid)
            if grown is not None:
                return grown
        acc = self._dict()
        others = (
            gtid.sets if isinstance(gtid, MysqlGtidSet) else (((gtid.uuid, gtid.tag), ((gtid.gno,) * 2,)),)
        )
        for key, intervals in others:
            acc.setdefault(key, []).extend(intervals)
        return self._build(acc)

    def _extend_last(self, gtid: MysqlGtid) -> MysqlGtidSet | None:
        """The common case at every commit, without a rebuild: gtid is the number right after the
        last interval of its (uuid, tag). None when it is not."""
        key = (gtid.uuid, gtid.tag)
        for i, (k, intervals) in enumerate(self.sets):
            if k == key:
                lo, hi = intervals[-1]
                if gtid.gno != hi + 1:
                    return None
                entry = (k, (*intervals[:-1], (lo, gtid.gno)))
                return MysqlGtidSet((*self.sets[:i], entry, *self.sets[i + 1 :]))
        return None

    def issubset(self, other: MysqlGtidSet) -> bool:
        theirs = dict(other.sets)
        for key, intervals in self.sets:
            for lo, hi in intervals:
                if not any(a <= lo and hi <= b for a, b in theirs.get(key, ())):
                    return False
        return True

    def __le__(self, other: MysqlGtidSet) -> bool:
        return self.issubset(other)

    def __bool__(self) -> bool:
        return bool(self.sets)

    def __iter__(self) -> Iterator[tuple[tuple[str, str], tuple[tuple[int, int], ...]]]:
        return iter(self.sets)


# --- MariaDB GTIDs ------------------------------------------------------------------------------


@dataclass(slots=True, unsafe_hash=True, init=False)
class MariadbGtid:
    """One MariaDB transaction id: `domain-server-seq`."""

    domain: int
    server_id: int
    seq: int

    def __init__(self, domain: int, server_id: int, seq: int) -> None:
        self.domain, self.server_id, self.seq = domain, server_id, seq

    def __reduce__(self) -> tuple[type[MariadbGtid], tuple[int, int, int]]:
        return MariadbGtid, (self.domain, self.server_id, self.seq)

    def __str__(self) -> str:
        return f"{self.domain}-{self.server_id}-{self.seq}"

    @classmethod
    def parse(cls, text: str) -> MariadbGtid:
        m = _MARIADB_GTID.match(text.strip())
        if not m:
            raise ValueError(f"{text!r} is not a MariaDB GTID (domain-server-seq, e.g. 0-1-100)")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)))


@dataclass(slots=True, init=False, eq=False)
class MariadbGtidPos:
    """A MariaDB GTID position (as in @@gtid_binlog_pos): the last GTID of each replication domain."""

    gtids: tuple[MariadbGtid, ...] = ()  # sorted by domain, one per domain

    def __init__(self, gtids: tuple[MariadbGtid, ...] = ()) -> None:
        self.gtids = gtids

    def __reduce__(self) -> tuple[type[MariadbGtidPos], tuple[object]]:
        return MariadbGtidPos, (self.gtids,)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MariadbGtidPos):
            return NotImplemented
        return self.gtids == other.gtids

    def __hash__(self) -> int:
        return hash(self.gtids)

    @classmethod
    def parse(cls, text: str) -> MariadbGtidPos:
        by_domain: dict[int, MariadbGtid] = {}
        for item in text.split(","):
            if item.strip():
                gtid = MariadbGtid.parse(item)
                if gtid.domain in by_domain:
                    raise ValueError(f"GTID position {text!r} names domain {gtid.domain} twice")
                by_domain[gtid.domain] = gtid
        return cls(tuple(by_domain[d] for d in sorted(by_domain)))

    def __str__(self) -> str:
        gtids = self.gtids
        if len(gtids) == 1:  # one domain: formatted at every commit
            return str(gtids[0])
        return ",".join(str(g) for g in gtids)

    def get(self, domain: int) -> MariadbGtid | None:
        return next((g for g in self.gtids if g.domain == domain), None)

    def __contains__(self, gtid: object) -> bool:
        """True when `gtid` is at or before this position in its domain."""
        if not isinstance(gtid, MariadbGtid):
            return False
        mine = self.get(gtid.domain)
        return mine is not None and gtid.seq <= mine.seq

    def add(self, gtid: MariadbGtid | MariadbGtidPos) -> MariadbGtidPos:
        """The position after `gtid` (a later seq replaces the domain's entry; an earlier one is kept out)."""
        mine = self.gtids
        if isinstance(gtid, MariadbGtid) and len(mine) == 1 and mine[0].domain == gtid.domain:
            return MariadbGtidPos((gtid,)) if gtid.seq >= mine[0].seq else self  # one domain: most sources
        by_domain = {g.domain: g for g in mine}
        for g in gtid.gtids if isinstance(gtid, MariadbGtidPos) else (gtid,):
            old = by_domain.get(g.domain)
            if old is None or g.seq >= old.seq:
                by_domain[g.domain] = g
        return MariadbGtidPos(tuple(by_domain[d] for d in sorted(by_domain)))

    def issubset(self, other: MariadbGtidPos) -> bool:
        return all(g in other for g in self.gtids)

    def __le__(self, other: MariadbGtidPos) -> bool:
        return self.issubset(other)

    def __bool__(self) -> bool:
        return bool(self.gtids)


GtidSet = MysqlGtidSet | MariadbGtidPos
_MARIADB_SET = re.compile(r"^\s*\d+-\d+-\d+\s*(,\s*\d+-\d+-\d+\s*)*$")


def parse_gtid_set(text: str) -> GtidSet:
    """A GTID set in either form; MariaDB when every item is `domain-server-seq`."""
    if _MARIADB_SET.match(text):
        return MariadbGtidPos.parse(text)
    return MysqlGtidSet.parse(text)


def parse_gtid(text: str) -> MysqlGtid | MariadbGtid:
    """One GTID: `d-s-n` (MariaDB), `uuid:n` or `uuid:tag:n` (MySQL)."""
    if _MARIADB_GTID.match(text.strip()):
        return MariadbGtid.parse(text)
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or not parts[-1].isdigit():
        raise ValueError(f"{text!r} is not a GTID (uuid:n, uuid:tag:n or domain-server-seq)")
    tag = parts[1].lower() if len(parts) == 3 else ""
    if tag and not _TAG.match(tag):
        raise ValueError(f"{text!r}: bad GTID tag {tag!r}")
    return MysqlGtid(_norm_uuid(parts[0]), int(parts[-1]), tag)


# --- checkpoints and start points ---------------------------------------------------------------


@dataclass(slots=True, unsafe_hash=True, init=False)
class Checkpoint:
    """The resume point after a committed transaction."""

    position: BinlogPosition
    gtid_set: str = ""  # executed set after the transaction: "uuid:1-5,..." or MariaDB "0-1-100,..."
    ts: int = 0  # source timestamp of the transaction's commit event

    def __init__(self, position: BinlogPosition, gtid_set: str = "", ts: int = 0) -> None:
        self.position, self.gtid_set, self.ts = position, gtid_set, ts

    def __reduce__(self) -> tuple[type[Checkpoint], tuple[BinlogPosition, str, int]]:
        return Checkpoint, (self.position, self.gtid_set, self.ts)


StartPoint = Literal["now", "start"] | BinlogPosition | MysqlGtidSet | MariadbGtidPos | Checkpoint


def parse_start(text: str) -> StartPoint:
    """`now`, `start`, `FILE:POS` or a GTID set (either form)."""
    value = text.strip()
    if value in ("now", "start"):
        return "now" if value == "now" else "start"
    if _MARIADB_SET.match(value):
        return MariadbGtidPos.parse(value)
    head = value.split(":", 1)[0]
    if _UUID.match(head):
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
    non-artificial event moves the offset to `header.log_pos`, or, when the server writes
    log_pos = 0 (MariaDB 11.4+ in some cases), to the previous offset + event size. The FORMAT_DESCRIPTION
    the server re-sends when a dump starts past offset 4 has log_pos 0 and moves nothing.
    Events inside a TRANSACTION_PAYLOAD (MySQL binlog_transaction_compression; the decoder gives
    them the payload's offset) move nothing either: the payload event already moved past them.

    It runs once per event, so the offset is a plain int (`position` builds the value on demand)
    and the GTID set's text is kept with the set instead of formatted again at every commit.
    """

    __slots__ = (
        "_file", "_pos", "_gtids", "_gtid_text", "in_transaction", "_pending_gtid", "_pending_text",
        "_payload_at",
    )  # fmt: skip

    def __init__(self, position: BinlogPosition, gtids: GtidSet | None = None) -> None:
        self._file, self._pos = position.file, position.pos
        self.gtids = gtids  # executed set so far; None when unknown (no GTID tracking)
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
        return Checkpoint(self.position, self._gtid_text)

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
            return Checkpoint(self.position, self._gtid_text, event.header.timestamp)
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
        return Checkpoint(BinlogPosition(self._file, self._pos), self._gtid_text, event.header.timestamp)

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
        self._pos = h.log_pos if h.log_pos else self._pos + h.event_size

    @staticmethod
    def _gtid_of(event: GtidEvent) -> MysqlGtid | MariadbGtid | None:
        if event.anonymous or not event.gtid:
            return None
        if event.domain_id is not None and event.seq_no is not None:  # MariaDB: no text to parse
            return MariadbGtid(event.domain_id, event.header.server_id, event.seq_no)
        return parse_gtid(event.gtid)
