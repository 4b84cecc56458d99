"""Redis-only sink tests: one redis-server for the session, started in a temp dir (no MariaDB)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis as redis_sync
from hypothesis import HealthCheck, settings

from tests.integration.redis_servers import Server, start_server

# The differential tests' Hypothesis profile: about 30 s on a loaded 2-core machine;
# SINK_DIFF_EXAMPLES=2000 runs more (a search for divergences, not for every test run).
settings.register_profile(
    "sink-differential",
    max_examples=int(os.environ.get("SINK_DIFF_EXAMPLES", "60")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="session")
def sink_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("sink-redis"), ["save ''", "appendonly no"])
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture(scope="session")
def sink_redis(sink_redis_server: Server) -> Iterator[redis_sync.Redis]:
    """A client of the session's redis-server; each test flushes what it needs."""
    with sink_redis_server.client() as client:
        yield client
