"""What a DDL statement means for the mirror: a pure mapping from `Ddl` to `TableAction`s."""

from __future__ import annotations

from collections.abc import Set

from service.sink.plan import ActionKind, TableAction
from service.transactions import Ddl, TableFilter, is_rename_only

__all__ = ["ddl_actions"]


def ddl_actions(ddl: Ddl, flt: TableFilter, mirrored: Set[tuple[str, str]]) -> list[TableAction]:
    """Actions for one statement. `mirrored` is the set of tables currently in the mirror."""
    out: list[TableAction] = []
    reason = " ".join(ddl.sql.split())[:200]

    def rename(a: tuple[str, str], b: tuple[str, str]) -> None:
        if flt.wants(*b):
            if a in mirrored or flt.wants(*a):
                out.append(TableAction(ActionKind.RENAME, a[0], a[1], b[0], b[1], reason))
            else:
                out.append(TableAction(ActionKind.RESYNC, b[0], b[1], reason=reason))
        elif a in mirrored or flt.wants(*a):
            out.append(TableAction(ActionKind.DROP, a[0], a[1], reason=reason))

    if ddl.kind == "create":
        for s, t in ddl.tables:
            if t and flt.wants(s, t):
                # CREATE [OR REPLACE] TABLE: whatever the mirror held under this name is gone
                out += [TableAction(ActionKind.TRUNCATE, s, t), TableAction(ActionKind.REGISTER, s, t)]
    elif ddl.kind == "drop":
        for s, t in ddl.tables:
            if not t:  # DROP DATABASE
                out += [
                    TableAction(ActionKind.DROP, ms, mt, reason=reason)
                    for ms, mt in sorted(mirrored)
                    if ms == s
                ]
            elif (s, t) in mirrored or flt.wants(s, t):
                out.append(TableAction(ActionKind.DROP, s, t, reason=reason))
    elif ddl.kind == "truncate":
        out += [TableAction(ActionKind.TRUNCATE, s, t) for s, t in ddl.tables if t and flt.wants(s, t)]
    elif ddl.kind == "rename":
        pairs = list(ddl.tables)
        for i in range(0, len(pairs) - 1, 2):
            rename(pairs[i], pairs[i + 1])
    elif ddl.kind == "alter":
        tables = [(s, t) for s, t in ddl.tables if t]
        if len(tables) == 2:
            rename(tables[0], tables[1])
            if flt.wants(*tables[1]) and not is_rename_only(ddl.sql):
                out.append(TableAction(ActionKind.RESYNC, *tables[1], reason=reason))
        elif len(tables) == 1 and flt.wants(*tables[0]):
            out.append(TableAction(ActionKind.RESYNC, *tables[0], reason=reason))
    return out
