"""Shared fixtures. The local stack (real mariadbd + redis-server) is started once per session."""

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
