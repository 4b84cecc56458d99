"""Foreign-key cascades on a Redis Cluster (docs/mirror.md, "Redis Cluster"): a cascade changes
rows of other tables in the same script call as the parent's change, so it can be applied only
where both tables are in one slot group: a document group (keys.DocumentGroupLayout)."""

from __future__ import annotations

from collections.abc import Callable

from service.errors import ConfigError
from service.sink.fks import ACTING, ForeignKey, ForeignKeys
from service.sink.keys import DOCS_MARK

__all__ = ["check_cluster_cascades", "group_foreign_keys"]

GroupOf = Callable[[tuple[str, str]], str]  # (schema, table) -> the id of its slot group


def _within(fk: ForeignKey, group_of: GroupOf) -> str | None:
    """The document group both tables of `fk` are in (None: none, or two groups)."""
    child, parent = group_of(fk.child), group_of(fk.parent)
    return child if child == parent and child.startswith(DOCS_MARK) else None


def check_cluster_cascades(fks: ForeignKeys, group_of: GroupOf) -> None:
    """A cascade between tables of two slot groups cannot be applied with the parent's change:
    refused (ConfigError naming the constraint and the way out), never skipped."""
    if fks.logged:  # the source logs the rows its cascades change: nothing to apply
        return
    for fk in fks.keys:
        if (fk.on_delete in ACTING or fk.on_update in ACTING) and _within(fk, group_of) is None:
            raise ConfigError(
                f"foreign key {fk.name} of {fk.schema}.{fk.table} (ON DELETE {fk.on_delete} ON UPDATE "
                f"{fk.on_update}) changes rows the binlog does not log, and on a Redis Cluster the "
                "mirror cannot apply such cascades (the child rows are in other slots; only the "
                "tables of one document share a slot). Leave "
                f"{fk.schema}.{fk.table} or {fk.ref_schema}.{fk.ref_table} out of --tables, or mirror "
                "into a single Redis (docs/mirror.md, Redis Cluster)"
            )


def group_foreign_keys(
    fks: Callable[[], ForeignKeys] | None, gid: str | None, group_of: GroupOf
) -> Callable[[], ForeignKeys] | None:
    """The constraints a slot group's planner applies: a document group's between its own tables
    (None for any other group: it applies none). `gid` None: those of every document group (the
    cascades the cluster's own planner names, e.g. the tables they reach that must be copied)."""
    if fks is None or (gid is not None and not gid.startswith(DOCS_MARK)):
        return None
    cache: dict[int, tuple[ForeignKeys, ForeignKeys]] = {}

    def within() -> ForeignKeys:
        now = fks()
        hit = cache.get(id(now))
        if hit is None or hit[0] is not now:  # (read again after a DDL)
            keys = tuple(
                fk for fk in now.keys if (g := _within(fk, group_of)) is not None and gid in (None, g)
            )
            cache.clear()
            hit = cache[id(now)] = (now, ForeignKeys(keys, now.logged))
        return hit[1]

    return within
