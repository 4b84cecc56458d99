"""Shared fixtures. The servers are real and started once per session: the local stack (mariadbd +
redis-server) for `integration` tests, a redis-server alone (`redis_url`) or a Redis Cluster alone
(`redis_cluster`) for `redis` tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.devtools.stack import LocalStack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A running local stack in a temp dir; every process it started is stopped at the end."""
    local = LocalStack(tmp_path_factory.mktemp("stack"))
    local.up()
    try:
        yield local
    finally:
        local.down()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a redis-server of the session's own, configured as the stack's (AOF), with no
    mariadbd. Tests share it: each keeps to a key prefix of its own."""
    local = LocalStack(tmp_path_factory.mktemp("redis"))
    local.start_redis()
    try:
        info = local.load()
        assert info is not None
        yield info.redis_url
    finally:
        local.down()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack whose only servers are a Redis Cluster of three masters (no mariadbd): its
    `load().redis_url` is `redis+cluster://...`, and a test may stop and start a master through it.
    Tests share it: each keeps to a key prefix of its own."""
    local = LocalStack(tmp_path_factory.mktemp("redis-cluster"), redis_cluster=True)
    local.start_redis_cluster()
    try:
        yield local
    finally:
        local.down()
