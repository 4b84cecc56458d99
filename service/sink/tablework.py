"""Whole-table work (DROP/TRUNCATE/RENAME rows, resync copies) as units of bounded apply calls.

The planner (plan.py) says which units a transaction's table actions need; RedisMirror runs them
before the transaction's own call (docs/mirror.md, "Table operations").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.sink.ir import ClearRows, CopyMembers, MoveRows, Op

__all__ = ["TableWork", "unit_ids", "work_op"]


@dataclass(frozen=True, slots=True)
class TableWork:
    """One unit of the work of a table action on every row of a table, run in bounded calls
    before the transaction's own call, so that a table of millions of rows never blocks Redis in
    one script (tablerun.py). `op`: CU removes the table's rows, MU moves them to
    another name, CP copies its `__keys` set (to `__stale`, when a resync begins)."""

    op: str
    index: str  # the table's `__keys` set
    base: str = ""  # its row-key base (CU, MU)
    to_index: str = ""  # MU: the new name's `__keys`; CP: the set copied into
    to_base: str = ""  # MU: the new name's row-key base
    if_resync: str = ""  # CP: copy only while this table id has a resync mark ("": always)
    fk: tuple[Op, ...] = ()  # CU, MU: ClearFkMemberships, the sets of foreign-key values the rows leave


def unit_ids(work: Sequence[TableWork]) -> list[str]:
    """Names the units of a transaction's table work in `__tableops` by what they do (op, set,
    target, and which occurrence of that it is), not by their place: a restart with another table
    selection plans other units around them, and must still skip the ones done (clearing a
    rename's new name again would remove the rows already moved there)."""
    seen: dict[str, int] = {}
    ids = []
    for w in work:
        what = f"{w.op} {w.index} {w.to_index}".rstrip()
        seen[what] = seen.get(what, 0) + 1
        ids.append(f"{what} #{seen[what]}")
    return ids


def work_op(key: str, uid: str, w: TableWork, limit: int, cursor: str = "") -> list[Op]:
    """The op of the unit `uid` for up to `limit` rows (CP: `cursor` is the SSCAN cursor the
    previous call returned, "" at first). The call returns 0 (CP: cursor "0") once the unit is
    done, recorded in `key` (`__tableops`); otherwise what is left (CP: the next cursor)."""
    if w.op == "CU":
        return [*w.fk, ClearRows(key, uid, limit, w.index, w.base)]
    if w.op == "MU":
        return [*w.fk, MoveRows(key, uid, limit, w.index, w.base, w.to_index, w.to_base)]
    return [CopyMembers(key, uid, limit, cursor, w.index, w.to_index, w.if_resync)]
