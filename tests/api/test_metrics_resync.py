"""Resync progress in /metrics: rows copied and the row estimate, per table, while it runs."""

from __future__ import annotations

import time

from apihelpers import StatusDouble, streaming_status
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.pipeline.status import ResyncStatus, State, TableStatus


def _samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }


def test_resync_progress_gauges_exist_while_a_table_is_reread(
    client: TestClient, double: StatusDouble
) -> None:
    busy = TableStatus(schema="shop", table="orders", resync=ResyncStatus(time.time(), 3000, 10000, "ALTER"))
    guess = TableStatus(schema="shop", table="items", resync=ResyncStatus(time.time(), 5, None, "resync"))
    idle = TableStatus(schema="shop", table="users")
    double.snapshot = streaming_status(state=State.RESYNCING, tables=(busy, guess, idle))
    samples = _samples(client)
    orders = (("schema", "shop"), ("table", "orders"))
    items = (("schema", "shop"), ("table", "items"))
    assert samples[("binlog_mirror_resync_rows_copied", orders)] == 3000
    assert samples[("binlog_mirror_resync_rows_total", orders)] == 10000
    assert samples[("binlog_mirror_resync_rows_copied", items)] == 5
    assert ("binlog_mirror_resync_rows_total", items) not in samples  # no estimate
    users = (("schema", "shop"), ("table", "users"))
    assert ("binlog_mirror_resync_rows_copied", users) not in samples
    double.snapshot = streaming_status(tables=(idle,))  # done: the series go away
    assert not any(name.startswith("binlog_mirror_resync_") for name, _ in _samples(client))
