"""Status assembly: the replicator's `Progress`, its current source and the counters of earlier
sessions' sources, into one frozen `ReplicatorStatus` (service/pipeline/status.py)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

from service.binlog.schema import TableSchema
from service.catalog import Catalog
from service.pipeline.progress import Progress, TableCounters
from service.pipeline.sources import TransactionSource
from service.pipeline.status import (
    DocumentRoleStatus,
    ReplicatorStatus,
    ShapeStatus,
    SourceStatus,
    TableStatus,
)
from service.settings import Settings
from service.shaping import TtlSettings
from service.sink.mirror import RedisMirror
from service.table_info import ColumnStatus

__all__ = ["PastSources", "build_status"]


class PastSources:
    """Counters of the sources of finished sessions (a source lives for one session)."""

    def __init__(self) -> None:
        self.reconnects = 0
        self.events: Counter[str] = Counter()
        self.ignorable = self.invalid = 0
        self.bytes = self.heartbeats = 0
        self.maps: dict[tuple[str, str], TableSchema] = {}  # latest TABLE_MAP per table
        self.failovers = 0
        self.last_failover_at = 0.0
        self.last_failover = ""

    def fold(self, source: TransactionSource) -> None:
        stats = source.stats
        self.reconnects += stats.reconnects
        self.bytes += stats.bytes
        self.heartbeats += stats.heartbeats
        self.maps.update(stats.table_maps)
        self.failovers += stats.failovers
        if stats.failovers:
            self.last_failover_at, self.last_failover = stats.last_failover_at, stats.last_failover
        by_type, ignorable, invalid = source.decoder_totals()
        self.events.update(by_type)
        self.ignorable += ignorable
        self.invalid += invalid


def build_status(
    settings: Settings,
    progress: Progress,
    mirror: RedisMirror,
    catalog: Catalog,
    source: TransactionSource | None,
    past: PastSources,
    unmatched_tables: tuple[str, ...] = (),
    paused: bool = False,
) -> ReplicatorStatus:
    now = time.time()
    stats = source.stats if source is not None else None
    info = source.info if source is not None else None
    queued, queued_rows = source.waiting() if source is not None else (0, 0)
    waiting = queued + progress.in_flight[0]
    rows_waiting = queued_rows + progress.in_flight[1]
    last_event_ts = (stats.last_event_ts if stats else 0) or None
    last_packet = stats.last_event_at if stats else 0.0
    applied = progress.applied
    lag: float | None = None
    if progress.applied_ts is not None or applied is not None:
        # a stream that went silent is behind by its silence, at least
        silent = now - last_packet if last_packet else None
        fresh = silent is not None and silent < 2 * settings.heartbeat_seconds
        if waiting == 0 and fresh:
            lag = 0.0
        elif waiting == 0 and silent is not None:
            lag = silent
        elif progress.applied_ts:
            lag = max(0.0, now - progress.applied_ts)
        elif last_packet:
            lag = max(0.0, now - last_packet)
    room = progress.binlog_room
    maps = {**past.maps, **(stats.table_maps if stats else {})}
    names_from = stats.column_names if stats else "binlog"
    planner = mirror.planner
    settling = mirror.marks.settling
    tables = []
    for key in sorted(set(progress.tables) | progress.mirrored):
        c = progress.tables.get(key, TableCounters())
        t = catalog.get(*key)
        table_map = maps.get(key)
        tables.append(
            TableStatus(
                schema=key[0],
                table=key[1],
                table_id=table_map.table_id if table_map else None,
                columns=with_table_map(t.columns, table_map, names_from) if t else (),
                primary_key=(t.key or ()) if t else (),
                key_source=t.key_source if t else "primary",
                mirrored=bool(t is None or t.key),
                # rows of a table without a usable key were never applied
                inserts=c.inserts if not t or t.key else 0,
                updates=c.updates if not t or t.key else 0,
                deletes=c.deletes if not t or t.key else 0,
                skipped_rows=planner.skipped.rows.get(key, 0),
                last_change_ts=c.last_change_ts,
                resync=c.resync,
                settle_until=settling.get(mirror.layout.table_id(*key)) if settling else None,
                drift=tuple(sorted(c.drift.items())),
                repaired=c.repaired,
                verified_ts=c.verified_ts,
                shape=_shape(catalog, *key),
                documents=tuple(
                    DocumentRoleStatus(doc, field) for doc, _, field in catalog.shapes.documents.roles(*key)
                ),
            )
        )
    received = (source.received if source is not None else None) or progress.received
    events = Counter(past.events)
    ignorable, invalid = past.ignorable, past.invalid
    reconnects = progress.restarts + past.reconnects
    if source is not None:
        by_type, more_ignorable, more_invalid = source.decoder_totals()
        events.update(by_type)
        ignorable += more_ignorable
        invalid += more_invalid
        reconnects += source.stats.reconnects
    failovers, failover_at, failover = past.failovers, past.last_failover_at, past.last_failover
    if stats is not None and stats.failovers:
        failovers += stats.failovers
        failover_at, failover = stats.last_failover_at, stats.last_failover
    return ReplicatorStatus(
        state=progress.state,
        since=progress.since,
        source=SourceStatus(
            flavour=info.flavour if info else None,
            version=info.version_string if info else None,
            server_id=info.server_id if info else None,
            connected=bool(stats and stats.connected),
            url=settings.mysql.redacted() if settings.mysql else None,
            server_uuid=(info.var("server_uuid") or None) if info and not info.mariadb else None,
            gtid_domain_id=int(info.var("gtid_domain_id") or 0) if info and info.mariadb else None,
        ),
        received_position=received.end.position if received else None,
        received_gtid=received.gtid if received else None,
        received_gtid_set=received.end.gtid_set if received else None,
        applied=applied,
        last_event_ts=last_event_ts,
        lag_seconds=lag,
        bytes_behind=room.bytes_behind if room else None,
        retention_seconds_left=room.retention_left(lag) if room else None,
        transactions_waiting=waiting,
        rows_waiting=rows_waiting,
        transactions_applied=progress.txns_applied,
        rows_applied=progress.rows_applied - sum(planner.skipped.rows.values()),
        redis_reachable=progress.redis_ok,
        leader=progress.leader,
        standby=progress.standby,
        lease_acquisitions=progress.lease_acquisitions,
        instance_id=mirror.token,
        errors=progress.errors,
        tables=tuple(tables),
        reconnects=reconnects,
        decode_errors=progress.decode_errors,
        events_by_type=tuple(sorted(events.items())),
        skipped_ignorable_events=ignorable,
        invalid_text_values=invalid,
        plain_apply_calls=mirror.plain_counts[0],
        plain_apply_redone=mirror.plain_counts[1],
        bytes_received=past.bytes + (stats.bytes if stats else 0),
        heartbeats=past.heartbeats + (stats.heartbeats if stats else 0),
        last_packet_at=last_packet or None,
        unmatched_tables=unmatched_tables,
        paused=paused,
        failovers=failovers,
        last_failover_at=failover_at or None,
        last_failover=failover or None,
    )


def with_table_map(
    columns: tuple[ColumnStatus, ...], table_map: TableSchema | None, names_from: str
) -> tuple[ColumnStatus, ...]:
    """`columns` (from information_schema) with what the table's latest TABLE_MAP says: each
    column's metadata word, and where the name its values carry in the rows comes from.

    `names_from` is where the decoder takes names the TABLE_MAP lacks ("binlog" when the source
    has binlog_row_metadata=FULL, so the TABLE_MAP carries them; else "information_schema").
    Columns are matched by name; a TABLE_MAP without names (positional @N rows) by index when the
    column counts agree, else every column gets name_source "position" and no metadata. A column
    a named TABLE_MAP does not have (added since) keeps metadata None and name_source
    "information_schema". The TABLE_MAP may predate a DDL applied since."""
    if table_map is None:
        return columns
    if table_map.has_names:
        by_name = {c.name: c for c in table_map.columns}
        found = [by_name.get(c.name) for c in columns]
        source = names_from
    else:
        same = len(table_map.columns) == len(columns)
        found = list(table_map.columns) if same else [None] * len(columns)
        source = "position"
    out = []
    for column, mapped in zip(columns, found, strict=True):
        if mapped is not None:
            column = replace(column, metadata=mapped.meta, name_source=source)
        elif source == "position":
            column = replace(column, name_source=source)
        out.append(column)
    return tuple(out)


def _shape(catalog: Catalog, schema: str, table: str) -> ShapeStatus | None:
    shape = catalog.shape(schema, table)
    if shape is None:
        return None
    section = catalog.shapes.sections[shape.section]
    return ShapeStatus(
        shape.section,
        tuple(shape.fields.items()),
        tuple(sorted(shape.dropped)),
        catalog.shapes.fingerprint(schema, table),
        section.key,
        tuple((i.kind, i.key, i.score) for i in section.indexes),
        _ttl_text(section.ttl),
        hidden=tuple(sorted(shape.hidden)),
    )


def _ttl_text(ttl: TtlSettings | None) -> str | None:
    if ttl is None:
        return None
    if ttl.at is None:
        return f"{ttl.seconds} s"
    sign, off = "+" if ttl.offset >= 0 else "-", abs(ttl.offset)
    return f"at {ttl.at}" + (
        f", timezone {sign}{off // 3600:02d}:{off % 3600 // 60:02d}" if ttl.offset else ""
    )
