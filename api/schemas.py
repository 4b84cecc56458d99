"""Response models of the HTTP API, converted from the core's frozen dataclasses.

Input and output never share a class with the core: each model has a `from_domain()` that
reads a `service.pipeline.status` value, and redacts anything that could carry a secret.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from service.pipeline.status import (
    ColumnStatus,
    ReplicatorStatus,
    ResyncStatus,
    ShapeStatus,
    SourceStatus,
    State,
    TableStatus,
)

__all__ = [
    "CheckpointOut",
    "ColumnOut",
    "DetailOut",
    "ErrorOut",
    "FailoverOut",
    "LagOut",
    "LeaderOut",
    "LiveOut",
    "PositionOut",
    "ReadyOut",
    "ResyncOut",
    "RowCountsOut",
    "SourceOut",
    "TableOut",
    "IndexOut",
    "ShapeOut",
    "TableSummaryOut",
    "TablesOut",
    "redact",
]

# scheme://user:password@host -> scheme://user:***@host; password=... / token=... -> ***
_URL_CREDENTIALS = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*:)[^@\s]*@")
_KEY_VALUE = re.compile(
    r"(?i)(?P<head>\b(?:password|passwd|pwd|token|secret)\b['\"]?\s*[=:]\s*['\"]?)[^\s'\",)]+"
)


def redact(text: str | None) -> str | None:
    """Hide credentials in free text (error messages may quote a DSN)."""
    if text is None:
        return None
    text = _URL_CREDENTIALS.sub(r"\g<head>***@", text)
    return _KEY_VALUE.sub(r"\g<head>***", text)


def _time(ts: float | None) -> dt.datetime | None:
    return None if ts is None else dt.datetime.fromtimestamp(ts, tz=dt.UTC)


class DetailOut(BaseModel):
    """Every error body: one clear sentence."""

    detail: str


class LiveOut(BaseModel):
    status: str = Field(default="ok", examples=["ok"])


class ReadyOut(BaseModel):
    ready: bool
    state: State
    role: Literal["leader", "standby", "starting"] = Field(
        description="leader: holds the writer lease; standby: another instance holds it; "
        "starting: neither yet."
    )
    reasons: list[str] = Field(description="Why the service is not ready; empty when ready.")
    lag_seconds: float | None = Field(description="For information: lag is never a reason (see /lag).")
    max_lag_seconds: float


class LeaderOut(BaseModel):
    leader: bool = Field(description="This instance holds the writer lease: it streams and applies.")
    role: Literal["leader", "standby", "starting"]
    state: State


class SourceOut(BaseModel):
    flavour: str | None = Field(description='"mariadb" or "mysql"; null until connected once.')
    version: str | None
    server_id: int | None
    connected: bool
    url: str | None = Field(description="The source URL with its password redacted.")
    server_uuid: str | None = Field(None, description="MySQL's @@server_uuid; null on MariaDB.")
    gtid_domain_id: int | None = Field(None, description="MariaDB's @@gtid_domain_id; null on MySQL.")

    @classmethod
    def from_domain(cls, s: SourceStatus) -> SourceOut:
        return cls(
            flavour=s.flavour,
            version=s.version,
            server_id=s.server_id,
            connected=s.connected,
            url=redact(s.url),
            server_uuid=s.server_uuid,
            gtid_domain_id=s.gtid_domain_id,
        )


class FailoverOut(BaseModel):
    count: int = Field(
        description="Resumes since start that followed another server by GTID (a promoted replica), "
        'with no table copy (docs/operations.md, "Source failover").'
    )
    last: str | None = Field(
        description='The last one: "server_id=1 domain=0 -> server_id=2 domain=0 at 0-1-125" (old '
        "server, new server, the last applied transaction found again on the new one)."
    )
    last_time: dt.datetime | None


class CheckpointOut(BaseModel):
    file: str
    pos: int
    gtid_set: str = Field(description="Executed GTID set after the transaction; empty if not in GTID mode.")
    ts: int = Field(description="Source timestamp of the transaction's commit (seconds since the epoch).")
    time: dt.datetime | None


class ErrorOut(BaseModel):
    count: int
    last: str | None = Field(description="The last error, with credentials redacted.")
    last_time: dt.datetime | None
    retriable: bool | None


class PositionOut(BaseModel):
    state: State
    source: SourceOut
    received_file: str | None = Field(description="Binlog file of the last transaction read from the source.")
    received_pos: int | None
    received_gtid: str | None = Field(description="GTID of the last transaction read from the source.")
    received_gtid_set: str | None = Field(
        description="Executed GTID set after the last transaction read from the source (the GTID set "
        'received); "" when the source is not in GTID mode, null before the first transaction.'
    )
    applied: CheckpointOut | None = Field(description="The checkpoint stored in Redis with the last apply.")
    last_event_ts: int | None = Field(
        description="Source timestamp of the newest event (heartbeats included)."
    )
    last_event_time: dt.datetime | None
    transactions_applied: int
    rows_applied: int
    errors: ErrorOut
    failovers: FailoverOut

    @classmethod
    def from_domain(cls, s: ReplicatorStatus) -> PositionOut:
        applied = None
        if s.applied is not None:
            cp = s.applied
            applied = CheckpointOut(
                file=cp.position.file,
                pos=cp.position.pos,
                gtid_set=cp.gtid_set,
                ts=cp.ts,
                time=_time(cp.ts or None),
            )
        return cls(
            state=s.state,
            source=SourceOut.from_domain(s.source),
            received_file=s.received_position.file if s.received_position else None,
            received_pos=s.received_position.pos if s.received_position else None,
            received_gtid=s.received_gtid,
            received_gtid_set=s.received_gtid_set,
            applied=applied,
            last_event_ts=s.last_event_ts,
            last_event_time=_time(s.last_event_ts),
            transactions_applied=s.transactions_applied,
            rows_applied=s.rows_applied,
            errors=ErrorOut(
                count=s.errors.count,
                last=redact(s.errors.last),
                last_time=_time(s.errors.last_ts),
                retriable=s.errors.retriable,
            ),
            failovers=FailoverOut(
                count=s.failovers, last=s.last_failover, last_time=_time(s.last_failover_at)
            ),
        )


class LagOut(BaseModel):
    seconds_behind: float | None = Field(description="Now minus the last applied commit; 0 when caught up.")
    bytes_behind: int | None = Field(
        description="Binlog bytes from the applied checkpoint to the source's end of binlog, summed over "
        "the checkpoint's file and every later one: bytes not yet read plus bytes read and not yet "
        "applied. Refreshed every 2 s. A lower bound when the checkpoint's file was purged; null "
        "when unknown (a start from a GTID set, until its first transaction is applied)."
    )
    retention_seconds_left: float | None = Field(
        None,
        description="Seconds until the source may purge the binlog file the mirror reads next, by "
        "its expiry (binlog_expire_logs_seconds / expire_logs_days) minus seconds_behind: a lower "
        "bound; 0 when that file is gone (the next start cannot resume); null without an expiry.",
    )
    transactions_waiting: int = Field(description="Read from the source, not yet applied to Redis.")
    rows_waiting: int
    max_lag_seconds: float
    over_limit: bool = Field(description="seconds_behind is unknown or above max_lag_seconds.")

    @classmethod
    def from_domain(cls, s: ReplicatorStatus, max_lag: float) -> LagOut:
        return cls(
            seconds_behind=s.lag_seconds,
            bytes_behind=s.bytes_behind,
            retention_seconds_left=s.retention_seconds_left,
            transactions_waiting=s.transactions_waiting,
            rows_waiting=s.rows_waiting,
            max_lag_seconds=max_lag,
            over_limit=s.lag_seconds is None or s.lag_seconds > max_lag,
        )


class ColumnOut(BaseModel):
    name: str
    type: str = Field(description="Data type from information_schema, e.g. VARCHAR, INT.")
    metadata: int | None = Field(
        description="The column's metadata word in the latest TABLE_MAP read for the table, as the "
        "server's table_def holds it (VARCHAR: max bytes; CHAR/ENUM/SET: real type << 8 | bytes; "
        "DECIMAL: precision << 8 | scale; TIME/DATETIME/TIMESTAMP: fractional digits; BLOB/JSON: "
        "length bytes; 0 for types without metadata); null before a TABLE_MAP with this column is "
        "read. That TABLE_MAP may predate a later DDL."
    )
    nullable: bool | None
    unsigned: bool | None
    charset: str | None
    name_source: str = Field(
        description="Where the name the mirrored rows use for this column comes from: binlog (the "
        "TABLE_MAP's column names, binlog_row_metadata=FULL); information_schema (the TABLE_MAP has "
        "no names and the service looks them up, or no TABLE_MAP with this column was read yet); "
        "position (the rows carry @1, @2...)."
    )
    length: int | None = Field(
        description="information_schema: CHARACTER_MAXIMUM_LENGTH (characters), else NUMERIC_PRECISION, "
        "else DATETIME_PRECISION."
    )

    @classmethod
    def from_domain(cls, c: ColumnStatus) -> ColumnOut:
        return cls(
            name=c.name,
            type=c.type,
            metadata=c.metadata,
            nullable=c.nullable,
            unsigned=c.unsigned,
            charset=c.charset,
            name_source=c.name_source,
            length=c.length,
        )


class RowCountsOut(BaseModel):
    insert: int
    update: int
    delete: int
    skipped: int


class VerifyOut(BaseModel):
    """What the background verifier found in this table (docs/mirror.md, "Background verifier")."""

    changed: int = Field(description="Rows whose stored fields differed from the source's.")
    missing: int = Field(description="Source rows the mirror lacked.")
    extra: int = Field(description="Keys the mirror held that no source row has.")
    entries: int = Field(
        default=0,
        description="Rows whose key-template copy or index entries were not as their source row says.",
    )
    repaired: int = Field(description="Rows it rewrote or deleted (verify_repair on).")
    last_verified_time: dt.datetime | None = Field(
        description="When it last finished comparing the table; null before the first pass ends."
    )


class ResyncOut(BaseModel):
    started_time: dt.datetime
    rows_done: int
    rows_total: int | None
    reason: str
    rows_reread: int = Field(
        description="Rows that row images without every column (binlog_row_image MINIMAL or NOBLOB) "
        "changed during the copy, read again by key and written whole at its end."
    )

    @classmethod
    def from_domain(cls, r: ResyncStatus) -> ResyncOut:
        return cls(
            started_time=dt.datetime.fromtimestamp(r.started_ts, tz=dt.UTC),
            rows_done=r.rows_done,
            rows_total=r.rows_total,
            reason=r.reason,
            rows_reread=r.rows_reread,
        )


class IndexOut(BaseModel):
    kind: str = Field(description="unique | set | zset")
    key: str = Field(description="Its key template.")
    score: str | None = Field(default=None, description="zset: the column of the score.")
    entries: int | None = Field(
        default=None,
        description="The entries it holds (unique keys; set or zset members), counted in the same "
        "atomic apply as the rows; null when not read.",
    )


class ShapeOut(BaseModel):
    section: str = Field(
        description='The pattern of the `[table."…"]` section that applies (docs/mirror.md, "Shaping").'
    )
    fields: dict[str, str] = Field(description="Each kept source column -> its field name in the mirror.")
    excluded: list[str] = Field(description="The columns never stored nor published (names only).")
    hidden: list[str] = Field(
        default_factory=list,
        description="Columns left out of the fields that a key template, a score or the ttl names: "
        "kept in the mirror's own rows (under its prefix) to move the entries, never in the rows' "
        'copies, the change log or the websocket (docs/mirror.md, "Hidden columns").',
    )
    fingerprint: str = Field(
        description="The section's fingerprint, recorded with the rows: a start with another one "
        "copies the table again into the new shape."
    )
    key: str | None = Field(default=None, description="The row key template; null: the mirror's own key.")
    copies: int | None = Field(
        default=None, description="The rows at the key template; null without one, or when not read."
    )
    indexes: list[IndexOut] = Field(default_factory=list, description="Its lookup and index keys.")
    ttl: str | None = Field(
        default=None,
        description='Its rows\' expiry: "at COLUMN" (", timezone +HH:MM") or "N s"; null: none '
        '(docs/mirror.md, "Expiry").',
    )

    @classmethod
    def from_domain(cls, s: ShapeStatus) -> ShapeOut:
        counts = s.entries if s.entries is not None else (None,) * len(s.indexes)
        return cls(
            section=s.section,
            fields=dict(s.fields),
            excluded=list(s.excluded),
            hidden=list(s.hidden),
            fingerprint=s.fingerprint,
            key=s.key,
            copies=s.copies,
            indexes=[
                IndexOut(kind=k, key=t, score=sc, entries=n)
                for (k, t, sc), n in zip(s.indexes, counts, strict=True)
            ],
            ttl=s.ttl,
        )


class DocumentRoleOut(BaseModel):
    document: str = Field(description="The `[document.NAME]` the table is in.")
    field: str | None = Field(description="Where its rows go in their parent's row; null: it is the root.")
    held: int | None = Field(
        default=None,
        description="A child table: its rows whose parent row is not there, held until it comes "
        "(never lost); null for a root, or when Redis did not answer.",
    )
    refused: int | None = Field(
        default=None,
        description="A root table: its documents over max_document_bytes, not written (a log line "
        "names them); null for a child, or when Redis did not answer.",
    )


class TableSummaryOut(BaseModel):
    schema_: str = Field(alias="schema", serialization_alias="schema")
    table: str
    table_id: int | None = Field(
        description="Table id of the latest TABLE_MAP read for the table (since this process "
        "started); null before one is read."
    )
    mirrored: bool
    key_source: str
    primary_key: list[str]
    rows_applied: RowCountsOut
    last_change_ts: int | None
    last_change_time: dt.datetime | None
    verify: VerifyOut | None = Field(
        default=None,
        description="The background verifier's counts since this process started (counted again at "
        "each pass while a difference lasts); null when it is off or has not reached the table.",
    )
    shape: ShapeOut | None = Field(
        default=None,
        description="The table's shape when a [table] section applies; null: every column as is.",
    )
    documents: list[DocumentRoleOut] = Field(
        default_factory=list, description='Its places in documents (docs/mirror.md, "Documents").'
    )

    model_config = {"populate_by_name": True}

    @classmethod
    def from_domain(cls, t: TableStatus) -> TableSummaryOut:
        return cls(**_table_fields(t))


class TableOut(TableSummaryOut):
    columns: list[ColumnOut]
    resync: ResyncOut | None
    settle_until: str | None = Field(
        description="After a resync, the source's end of binlog when its copy ended (FILE:POS): "
        "until the stream applies past it, the table's updates carry whole rows (docs/mirror.md, "
        '"DDL resync"). Null otherwise.'
    )

    @classmethod
    def from_domain(cls, t: TableStatus) -> TableOut:
        return cls(
            **_table_fields(t),
            columns=[ColumnOut.from_domain(c) for c in t.columns],
            resync=ResyncOut.from_domain(t.resync) if t.resync else None,
            settle_until=str(t.settle_until) if t.settle_until else None,
        )


def _table_fields(t: TableStatus) -> dict[str, Any]:
    return {
        "schema": t.schema,
        "table": t.table,
        "table_id": t.table_id,
        "mirrored": t.mirrored,
        "key_source": t.key_source,
        "primary_key": list(t.primary_key),
        "rows_applied": RowCountsOut(
            insert=t.inserts, update=t.updates, delete=t.deletes, skipped=t.skipped_rows
        ),
        "last_change_ts": t.last_change_ts,
        "last_change_time": _time(t.last_change_ts),
        "verify": _verify(t),
        "shape": ShapeOut.from_domain(t.shape) if t.shape else None,
        "documents": [
            DocumentRoleOut(document=d.document, field=d.field, held=d.held, refused=d.refused)
            for d in t.documents
        ],
    }


def _verify(t: TableStatus) -> VerifyOut | None:
    if t.verified_ts is None and not t.drift:
        return None
    drift = dict(t.drift)
    return VerifyOut(
        changed=drift.get("changed", 0),
        missing=drift.get("missing", 0),
        extra=drift.get("extra", 0),
        entries=drift.get("entries", 0),
        repaired=t.repaired,
        last_verified_time=_time(t.verified_ts),
    )


class TablesOut(BaseModel):
    tables: list[TableSummaryOut]
    unmatched_tables: list[str] = Field(
        default_factory=list,
        description="`tables` patterns (--tables) that match no table of the source, as of bootstrap "
        "or the last DDL: a typo mirrors nothing. Each is also logged as a WARNING.",
    )
