"""TableMarks: the writer's copy of the Redis marks that make a table's updates carry whole rows.

A table's updates carry whole rows (op U) instead of their changed columns (op UL) while
  - a resync of it is in flight (`__resync`): rows may be absent or lack a new column;
  - it has a gap: an UL met no row (the mirror lost a row), and whole rows fill the gap as they
    change, until a resync reads every row again;
  - it settles (`__settle`): its last resync read rows up to a source position, so until the
    stream passes it, older events arrive for rows the copy already moved on.
The planner reads the marks and plans the ops that change them in Redis; the apply replies
(RowsMissing), the resync's finish and the checkpoint's load change them here. This class is the
one place that holds them. Pure: no I/O; compiled with the planner (service/devtools/build_decoder.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType

from service.checkpoint import BinlogPosition

__all__ = ["TableMarks"]


class TableMarks:
    """The marks by table id."""

    def __init__(self) -> None:
        self._resyncing: set[str] = set()
        self._gaps: set[str] = set()
        self._settling: dict[str, BinlogPosition] = {}  # table id -> where its last copy ended
        self._planned: Counter[str] = Counter()  # resyncs begun (or moved) per table

    # -- reading -----------------------------------------------------------------------------------
    def whole_rows(self, tid: str) -> bool:
        """Whether the table's updates carry whole rows."""
        return tid in self._resyncing or tid in self._gaps or tid in self._settling

    def resyncing(self, tid: str) -> bool:
        return tid in self._resyncing

    def has_gap(self, tid: str) -> bool:
        return tid in self._gaps

    @property
    def resyncs(self) -> AbstractSet[str]:
        """The tables with a resync in flight (read-only: the methods below change them)."""
        return self._resyncing

    @property
    def gaps(self) -> AbstractSet[str]:
        return self._gaps

    @property
    def settling(self) -> Mapping[str, BinlogPosition]:
        """table id -> the source position its last resync read up to (a read-only view)."""
        return MappingProxyType(self._settling)

    def settle_at(self, tid: str) -> BinlogPosition | None:
        return self._settling.get(tid)

    def resyncs_planned(self, tid: str) -> int:
        """How many resyncs of the table were planned (begun or moved to it) this session."""
        return self._planned[tid]

    # -- changing ----------------------------------------------------------------------------------
    def restore(self, resyncing: Iterable[str], settling: Mapping[str, BinlogPosition]) -> None:
        """The resync and settle marks as Redis holds them (at the session's start)."""
        self._resyncing = set(resyncing)
        self._settling = dict(settling)

    def begin_resync(self, tid: str) -> None:
        """A resync of the table is planned (its call sets `__resync`)."""
        self._resyncing.add(tid)
        self._planned[tid] += 1

    def resync_in_flight(self, tid: str) -> None:
        """The apply script found a resync in flight that this copy did not know of."""
        self._resyncing.add(tid)

    def gap(self, tid: str) -> None:
        """An update met no row: the table's updates fill rows in whole."""
        self._gaps.add(tid)

    def truncated(self, tid: str) -> None:
        self._gaps.discard(tid)  # no rows, no gap

    def dropped(self, tid: str) -> None:
        self._resyncing.discard(tid)
        self._gaps.discard(tid)
        self._settling.pop(tid, None)

    def renamed(self, tid: str, new: str) -> None:
        """The marks move to the new name (op RC), replacing what it had."""
        in_resync, gap = tid in self._resyncing, tid in self._gaps
        settle = self._settling.get(tid)
        self.dropped(tid)
        self.dropped(new)
        if in_resync:
            self.begin_resync(new)
        if gap:
            self._gaps.add(new)
        if settle is not None:
            self._settling[new] = settle

    def resync_done(self, tid: str, copied_at: BinlogPosition | None, still_current: bool) -> None:
        """A resync finished: the table settles until the stream passes `copied_at`; its resync
        and gap marks go unless a newer resync was planned since it began (`still_current`)."""
        if copied_at is not None:  # as the script stored it
            self._settling[tid] = copied_at
        if still_current:
            self._resyncing.discard(tid)
            self._gaps.discard(tid)  # every row was read again

    def settled_by(self, end: BinlogPosition) -> list[str]:
        """End the settle windows a transaction ending at `end` is past; their table ids."""
        done = [tid for tid, at in self._settling.items() if end > at]
        for tid in done:
            del self._settling[tid]
        return done
