"""Redis-only sink tests: on the session's redis-server (`redis_url`, no MariaDB), in a database
of their own, which they empty (FLUSHDB) and dump whole: the other tests keep to database 0."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis as redis_sync
from hypothesis import HealthCheck, settings

SINK_DB = 15

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
def sink_redis(redis_url: str) -> Iterator[redis_sync.Redis]:
    """A client of database SINK_DB of the session's redis-server."""
    base, _, db = redis_url.rpartition("/")
    assert db.isdigit(), redis_url
    with redis_sync.Redis.from_url(f"{base}/{SINK_DB}") as client:
        assert client.connection_pool.connection_kwargs["db"] == SINK_DB
        yield client
