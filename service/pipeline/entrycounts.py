"""The per-index entry counts `/tables` and the dashboard show: read from each shaped table's
`{table}:__derivedcounts` (kept by lua/derive.lua in the same script call as the entries, so
exact at every applied transaction) into its `ShapeStatus`; and the held rows and refused
documents of each table in documents (lua/document.lua's sets)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from service.catalog import Catalog
from service.errors import ReplicatorError
from service.pipeline.status import ReplicatorStatus, TableStatus
from service.sink.derive import Derivation
from service.sink.mirror import RedisMirror
from service.sink.unreachable import UNREACHABLE

__all__ = ["with_entry_counts"]

READ_TIMEOUT = 2.0  # seconds: a slow Redis leaves the counts out (null), never /tables waiting

log = logging.getLogger(__name__)


async def with_entry_counts(
    mirror: RedisMirror, catalog: Catalog, status: ReplicatorStatus
) -> ReplicatorStatus:
    """`status` with each shaped table's counts of row copies and index entries (left null when
    Redis does not answer). Through the mirror: on a Redis Cluster each table's own slot group."""
    wanted: list[tuple[int, TableStatus, Derivation]] = []
    for n, t in enumerate(status.tables):
        shape = catalog.shape(t.schema, t.table) if t.shape is not None else None
        if shape is not None and shape.derivation is not None:
            wanted.append((n, t, shape.derivation))
    placed = [
        (n, t, catalog.shapes.documents.roles(t.schema, t.table))
        for n, t in enumerate(status.tables)
        if t.documents
    ]
    if not wanted and not placed:
        return status
    try:
        async with asyncio.timeout(READ_TIMEOUT):
            replies = await asyncio.gather(*(mirror.derived_counts(t.schema, t.table) for _, t, _ in wanted))
            counts = await asyncio.gather(
                *(mirror.document_counts(t.schema, t.table, r) for _, t, r in placed)
            )
    except (*UNREACHABLE, ReplicatorError) as exc:
        log.debug("index entry counts not read: %s", exc)
        return status
    tables = list(status.tables)
    for (n, t, d), raw in zip(wanted, replies, strict=True):
        copies, entries = d.counts(raw)
        assert t.shape is not None
        counted = dataclasses.replace(t.shape, copies=copies if d.key is not None else None, entries=entries)
        tables[n] = dataclasses.replace(t, shape=counted)
    for (n, _, _), got in zip(placed, counts, strict=True):
        roles = tuple(
            dataclasses.replace(r, held=c) if r.field is not None else dataclasses.replace(r, refused=c)
            for r, c in zip(tables[n].documents, got, strict=True)
        )
        tables[n] = dataclasses.replace(tables[n], documents=roles)
    return dataclasses.replace(status, tables=tuple(tables))
