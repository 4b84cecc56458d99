"""GTIDs and GTID-set arithmetic: values built from fields, parsed from and formatted to the
servers' text forms; pure (no I/O), compiled with the stream (service/devtools/build_decoder.py).

    MySQL     "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7"      (uuid, then gno intervals)
              "3e11fa47-...:1-5:etl:1-3"                          (8.4 tagged GTIDs: tag, then its intervals)
              several uuids separated by ","
    MariaDB   "0-1-100,1-2-5"                                    (domain-server-seq, one per domain)

The value types are built per transaction: slotted dataclasses with an explicit __init__, native
classes in the compiled build and immutable by convention (see service/checkpoint.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "MARIADB_SET_RE",
    "UUID_RE",
    "GtidSet",
    "MariadbGtid",
    "MariadbGtidPos",
    "MysqlGtid",
    "MysqlGtidSet",
    "parse_gtid",
    "parse_gtid_set",
]


# --- MySQL GTIDs --------------------------------------------------------------------------------

UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


def _norm_uuid(text: str) -> str:
    if not UUID_RE.match(text):
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

    def difference(self, other: MysqlGtidSet) -> MysqlGtidSet:
        """The GTIDs of this set that are not in `other` (to name what a source lacks)."""
        theirs = dict(other.sets)
        acc: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for key, intervals in self.sets:
            for lo, hi in intervals:
                pieces = [(lo, hi)]
                for a, b in theirs.get(key, ()):
                    pieces = [
                        part
                        for x, y in pieces
                        for part in ((x, min(y, a - 1)), (max(x, b + 1), y))
                        if part[0] <= part[1]
                    ]
                acc.setdefault(key, []).extend(pieces)
        return self._build(acc)

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
MARIADB_SET_RE = re.compile(r"^\s*\d+-\d+-\d+\s*(,\s*\d+-\d+-\d+\s*)*$")


def parse_gtid_set(text: str) -> GtidSet:
    """A GTID set in either form; MariaDB when every item is `domain-server-seq`."""
    if MARIADB_SET_RE.match(text):
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
