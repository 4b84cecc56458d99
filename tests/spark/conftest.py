"""One local Spark session for the module's tests (a JVM start costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.batch.session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", "binlog-mirror tests")
    try:
        yield session
    finally:
        session.stop()
