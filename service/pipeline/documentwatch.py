"""Documents over `max_document_bytes` are refused, never truncated (lua/document.lua): each is a
log line naming its key and a metric, from the refused sets the apply keeps; held rows (a child
whose parent row is not there) are a metric too. Read every few seconds by the replicator."""

from __future__ import annotations

import logging
from typing import cast

from prometheus_client import Gauge

from service.shaping import Shapes
from service.sink.keys import DOCREFUSED_SUFFIX
from service.sink.mirror import RedisMirror

__all__ = ["DocumentWatch"]

log = logging.getLogger(__name__)


class DocumentWatch:
    def __init__(self) -> None:
        self.documents_refused = Gauge(
            "binlog_mirror_documents_refused",
            "Documents over max_document_bytes, not written (a log line names each)",
            ["document"],
            registry=None,
        )  # registered by the API as apply_seconds is
        self.documents_held = Gauge(
            "binlog_mirror_documents_held_rows",
            "Child rows whose parent row is not there: held, attached when it comes",
            ["document", "table"],
            registry=None,
        )
        self._refused: dict[str, int] = {}

    async def check(self, mirror: RedisMirror, shapes: Shapes) -> None:
        for schema, table in sorted(shapes.documents.tables()):
            roles = shapes.documents.roles(schema, table)
            counts = await mirror.document_counts(schema, table, roles)
            for (doc, _, field), n in zip(roles, counts, strict=True):
                if field is not None:
                    self.documents_held.labels(doc, f"{schema}.{table}").set(n)
                    continue
                self.documents_refused.labels(doc).set(n)
                if n > self._refused.get(doc, 0):
                    key = f"{mirror.layout.table_base(schema, table)}:{DOCREFUSED_SUFFIX}:{doc}"
                    raw = cast("list[bytes]", await mirror.redis.srandmember(key, 5))
                    some = sorted(k.decode() for k in raw)
                    log.warning(
                        "document %s: %d document(s) over max_document_bytes are not written (never "
                        "truncated), among them %s; raise max_document_bytes, or use format = \"hash\"",
                        doc, n, ", ".join(some),
                    )  # fmt: skip
                self._refused[doc] = n
