"""Prometheus metrics: read at scrape time from the status snapshot and the Broadcaster.

Each app has its own `CollectorRegistry` (no process-global state, so tests can build many
apps). Besides the collectors, `ApplyDelayObserver` is an `on_applied` hook that records how
long after its source commit each transaction became visible in Redis, and
`register_pipeline_metrics` adds the metrics the pipeline owns and times itself (the
Replicator's `apply_seconds` histogram, timed around each Redis apply call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api.broadcast import Broadcaster
from api.readiness import readiness
from service.pipeline.status import ReplicatorStatus, State
from service.settings import Settings
from service.transactions import Transaction
from service.version import compiled, version

__all__ = [
    "ApplyDelayObserver",
    "HubCollector",
    "StatusCollector",
    "build_registry",
    "register_pipeline_metrics",
]

P = "binlog_mirror_"


class StatusCollector(Collector):
    """Replication metrics from `Replicator.status()`, taken once per scrape."""

    def __init__(
        self, status: Callable[[], ReplicatorStatus | None], settings: Settings | None = None
    ) -> None:
        self._status = status
        self._heartbeat = settings.heartbeat_seconds if settings is not None else None
        self._max_lag = settings.max_lag_seconds if settings is not None else None

    def collect(self) -> Iterator[Metric]:
        s = self._status()
        if s is None:
            return
        state = GaugeMetricFamily(P + "state", "1 for the replicator's current state", labels=["state"])
        for st in State:
            state.add_metric([st.value], 1.0 if st is s.state else 0.0)
        yield state
        if s.state is State.FAILED and s.errors.last:
            failure = GaugeMetricFamily(
                P + "failure_info", "1 while failed: the last error's class", labels=["error"]
            )
            failure.add_metric([s.errors.last.split("(", 1)[0]], 1.0)
            yield failure
        yield GaugeMetricFamily(
            P + "ready",
            "1 when /health/ready answers 200: the leader streams, or a standby waits with Redis reachable",
            value=not readiness(s, self._heartbeat),
        )
        yield GaugeMetricFamily(
            P + "source_connected", "1 when the binlog stream is up", value=s.source.connected
        )
        yield GaugeMetricFamily(
            P + "redis_reachable", "1 when Redis answered lately", value=s.redis_reachable
        )
        yield GaugeMetricFamily(P + "leader", "1 when this instance holds the writer lease", value=s.leader)
        yield CounterMetricFamily(
            P + "lease_acquisitions",
            "Times this instance took the writer lease (a rise on several instances is flapping)",
            value=s.lease_acquisitions,
        )
        if self._max_lag is not None:  # the alert's threshold: the setting, written once
            yield GaugeMetricFamily(
                P + "max_lag_seconds",
                "The max_lag_seconds setting (the lag alert's limit)",
                value=self._max_lag,
            )
        if s.lag_seconds is not None:
            yield GaugeMetricFamily(
                P + "lag_seconds", "Now minus the last applied commit", value=s.lag_seconds
            )
        if s.bytes_behind is not None:
            yield GaugeMetricFamily(
                P + "lag_bytes",
                "Binlog bytes from the applied checkpoint to the source's end",
                value=s.bytes_behind,
            )
        if s.retention_seconds_left is not None:
            yield GaugeMetricFamily(
                P + "binlog_retention_seconds_left",
                "Seconds until the source may purge the binlog file the mirror reads next (0: purged)",
                value=s.retention_seconds_left,
            )
        yield GaugeMetricFamily(
            P + "transactions_waiting", "Read, not yet applied", value=s.transactions_waiting
        )
        yield GaugeMetricFamily(P + "rows_waiting", "Rows read, not yet applied", value=s.rows_waiting)
        if s.last_event_ts is not None:
            yield GaugeMetricFamily(
                P + "last_event_timestamp_seconds",
                "Source timestamp of the newest event",
                value=s.last_event_ts,
            )
        yield CounterMetricFamily(
            P + "transactions_applied", "Transactions applied", value=s.transactions_applied
        )
        yield CounterMetricFamily(P + "changes_applied", "Row changes applied", value=s.rows_applied)
        rows = CounterMetricFamily(
            P + "rows_applied", "Rows applied by table and op", labels=["schema", "table", "op"]
        )
        skipped = CounterMetricFamily(
            P + "rows_skipped", "Rows not mirrored (no usable key)", labels=["schema", "table"]
        )
        copied = GaugeMetricFamily(
            P + "resync_rows_copied", "Rows re-read so far by a resync in flight", labels=["schema", "table"]
        )
        total = GaugeMetricFamily(
            P + "resync_rows_total",
            "Rows of a table in resync (information_schema estimate)",
            labels=["schema", "table"],
        )
        for t in s.tables:
            rows.add_metric([t.schema, t.table, "insert"], t.inserts)
            rows.add_metric([t.schema, t.table, "update"], t.updates)
            rows.add_metric([t.schema, t.table, "delete"], t.deletes)
            skipped.add_metric([t.schema, t.table], t.skipped_rows)
            if t.resync is not None:  # only tables being re-read: the series ends with the resync
                copied.add_metric([t.schema, t.table], t.resync.rows_done)
                if t.resync.rows_total is not None:
                    total.add_metric([t.schema, t.table], t.resync.rows_total)
        yield rows
        yield skipped
        yield copied
        yield total
        yield GaugeMetricFamily(P + "tables", "Tables seen since start", value=len(s.tables))
        errors = CounterMetricFamily(
            P + "errors", "Errors since start, retried ones included, by error class", labels=["kind"]
        )
        for kind, count in s.errors.by_kind:
            errors.add_metric([kind], count)
        yield errors
        yield CounterMetricFamily(
            P + "reconnects",
            "Source reconnects and session restarts after a retriable error",
            value=s.reconnects,
        )
        yield CounterMetricFamily(
            P + "source_failovers",
            "Resumes that followed another server by GTID (a promoted replica), with no table copy",
            value=s.failovers,
        )
        yield CounterMetricFamily(
            P + "source_bytes",
            "Binlog bytes received from the source, heartbeats included",
            value=s.bytes_received,
        )
        yield CounterMetricFamily(
            P + "source_heartbeats", "Heartbeats received from the idle source", value=s.heartbeats
        )
        if s.last_packet_at is not None:
            yield GaugeMetricFamily(
                P + "last_packet_timestamp_seconds",
                "Wall clock when the last event or heartbeat arrived (a stalled connection stops it)",
                value=s.last_packet_at,
            )
        yield CounterMetricFamily(
            P + "decode_errors", "Binlog events that could not be decoded", value=s.decode_errors
        )
        events = CounterMetricFamily(P + "events", "Binlog events decoded, by event type", labels=["type"])
        for name, count in s.events_by_type:
            events.add_metric([name], count)
        yield events
        yield CounterMetricFamily(
            P + "ignorable_events_skipped",
            "Unknown events skipped because the source flagged them ignorable",
            value=s.skipped_ignorable_events,
        )
        yield CounterMetricFamily(
            P + "invalid_text_values",
            "Text values whose bytes were invalid in their column's character set",
            value=s.invalid_text_values,
        )
        yield CounterMetricFamily(
            P + "plain_apply_calls",
            "Apply calls sent as plain commands (insert-only calls, hash layout)",
            value=s.plain_apply_calls,
        )
        yield CounterMetricFamily(
            P + "plain_apply_redone",
            "Plain apply calls not applied (refused, or a watched key changed), sent again as the script",
            value=s.plain_apply_redone,
        )


class HubCollector(Collector):
    """Websocket fan-out metrics, read from the Broadcaster's plain counters."""

    def __init__(self, hub: Broadcaster) -> None:
        self._hub = hub

    def collect(self) -> Iterator[Metric]:
        hub = self._hub
        yield GaugeMetricFamily(
            P + "websocket_clients", "Connected websocket subscribers", value=hub.subscribers
        )
        yield CounterMetricFamily(P + "websocket_subscriptions", "Subscriptions made", value=hub.subscribed)
        yield CounterMetricFamily(
            P + "websocket_dropped_subscribers",
            "Subscribers closed with 1013 (queue overflow)",
            value=hub.dropped,
        )
        yield CounterMetricFamily(P + "websocket_gaps", "Gap messages sent to subscribers", value=hub.gaps)
        yield CounterMetricFamily(
            P + "broadcast_changes", "Changes published to the broadcaster", value=hub.published
        )
        if hub.last_seq is not None:
            yield GaugeMetricFamily(
                P + "broadcast_last_seq", "Newest published sequence number", value=hub.last_seq
            )


class ApplyDelayObserver:
    """`on_applied` hook: seconds from the source commit to the Redis apply, and DDL by kind.

    The source timestamp has one-second resolution, so buckets start at 1 s.
    """

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.histogram = Histogram(
            P + "apply_delay_seconds",
            "Source commit to applied in Redis (source clock, 1 s resolution)",
            buckets=(1, 2, 5, 10, 30, 60, 300, 900, 3600),
            registry=registry,
        )
        self.ddl = Counter(P + "ddl_applied", "DDL statements applied, by kind", ["kind"], registry=registry)

    def on_applied(self, txn: Transaction, first_seq: int) -> None:
        for ddl in txn.ddl:
            self.ddl.labels(ddl.kind).inc()
        if txn.ts:
            self.histogram.observe(max(0.0, self._clock() - txn.ts))


def build_registry(
    status: Callable[[], ReplicatorStatus | None], hub: Broadcaster, settings: Settings | None = None
) -> tuple[CollectorRegistry, ApplyDelayObserver]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(status, settings))
    registry.register(HubCollector(hub))
    build = Gauge(
        P + "build_info",
        "1, labelled with the running version and whether the decoder is compiled (mypyc)",
        ["version", "compiled"],
        registry=registry,
    )
    build.labels(version(), "true" if compiled() else "false").set(1)
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
    return registry, ApplyDelayObserver(registry)


def register_pipeline_metrics(registry: CollectorRegistry, pipeline: object) -> None:
    """Register the collectors a pipeline object owns (`apply_seconds`, the background
    verifier's `drift_rows`, the ttl sweep's `ttl_swept`, the documents' gauges), once per registry."""
    collectors = (
        ("apply_seconds", Histogram), ("drift_rows", Counter), ("ttl_swept", Counter),
        ("documents_refused", Gauge), ("documents_held", Gauge),
    )  # fmt: skip
    for name, kind in collectors:
        collector = getattr(pipeline, name, None)
        if not isinstance(collector, kind):
            continue
        try:
            registry.register(collector)
        except ValueError:  # already registered in this registry
            pass
