"""The Grafana dashboard and the alert rules (deploy/) only use metric names /metrics exports."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app
from service.pipeline.replicator import Replicator
from service.pipeline.status import ErrorStatus, ReplicatorStatus, ResyncStatus, State, TableStatus
from service.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SUFFIXES = ("_bucket", "_sum", "_count", "_total")


class BusyReplicator(Replicator):
    """A real Replicator (its registry, its histogram), not started, reporting every conditional
    series: lag, a table with rows and a resync in flight, an error (errors_total by kind), and
    once `state` is FAILED, failure_info."""

    state = State.RESYNCING

    def status(self) -> ReplicatorStatus:
        table = TableStatus(
            schema="shop", table="orders", inserts=1, resync=ResyncStatus(time.time(), 5, 10, "ALTER")
        )
        return replace(
            super().status(),
            state=self.state,
            lag_seconds=1.0,
            bytes_behind=10,
            retention_seconds_left=86_000.0,
            last_event_ts=int(time.time()),
            tables=(table,),
            errors=ErrorStatus(count=1, last="SinkError('x')", by_kind=(("SinkError", 1),)),
            failovers=1,
            last_failover_at=time.time(),
            last_failover="server_id=1 domain=0 -> server_id=2 domain=0 at 0-1-5",
        )


def exported_names() -> set[str]:
    settings = Settings(mysql="mysql://u:p@db:3306", redis="redis://cache:6379/0")
    replicator = BusyReplicator(settings)
    replicator.drift_rows.labels("shop.orders", "missing").inc()  # the verifier found a row missing
    with TestClient(create_app(settings, replicator)) as client:
        text = client.get("/metrics").text
        replicator.state = State.FAILED
        text += client.get("/metrics").text
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def used_names(text: str) -> set[str]:
    return set(re.findall(r"\bbinlog_mirror_[a-z_]+\b", text))


def test_dashboard_and_alerts_use_exported_metrics() -> None:
    exported = exported_names()
    # ddl_applied_total appears once a DDL was applied (a labelled Counter with no child yet)
    exported.add("binlog_mirror_ddl_applied_total")
    used = used_names((DEPLOY / "grafana" / "binlog-mirror.json").read_text())
    used |= used_names((DEPLOY / "prometheus" / "alerts.yml").read_text())
    unknown = {name for name in used if name not in exported}
    assert not unknown, f"not exported by /metrics: {sorted(unknown)}"
    assert "binlog_mirror_lag_seconds" in used and "binlog_mirror_resync_rows_copied" in used


def test_the_metrics_docs_api_md_lists_are_exported() -> None:
    """The names issue 39 gives (docs/api.md lists them) are exported."""
    exported = exported_names()
    docs = (DEPLOY.parent / "docs" / "api.md").read_text()
    for name in ("binlog_mirror_source_failovers_total",):
        assert name in exported and name.removeprefix("binlog_mirror_") in docs
