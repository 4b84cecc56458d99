"""The SparkSession the batch jobs run in."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from service.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["spark_session"]


def spark_session(master: str = "local[*]", app_name: str = "binlog-mirror") -> SparkSession:
    """A session on `master`; executors run this interpreter (the one with binlog-mirror installed)
    unless PYSPARK_PYTHON says otherwise."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError("pyspark is not installed: pip install 'binlog-mirror[spark]'") from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # one task per binlog file / key range: no speculative duplicates of Redis writes
        .config("spark.speculation", "false")
        .getOrCreate()
    )
    # A failed job is reported as one line (service/cli/batch.py); Spark's own log repeats the
    # JVM stack of every failed task (~270 lines): shown only with --log-level debug.
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    spark.sparkContext.setLogLevel("WARN" if debug else "OFF")
    return spark


def job_error(exc: BaseException) -> str | None:
    """The binlog-mirror error a failed Spark job carries, as one line ("TruncatedEvent: x at
    offset 123: ..."), or None when the failure is something else. Worker errors reach the driver
    as text (a Python traceback inside a Java exception)."""
    for line in reversed(str(exc).splitlines()):
        line = line.strip()
        if line.startswith("service.errors."):
            return line.removeprefix("service.errors.")
    return None
