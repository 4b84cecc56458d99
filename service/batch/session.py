"""The SparkSession the batch jobs run in."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "JobSummary",
    "delete_path",
    "failure_details",
    "job_error",
    "job_progress",
    "path_exists",
    "read_text",
    "spark_session",
    "staged_output",
    "write_text",
]

log = logging.getLogger(__name__)


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
        # progress is ours (session.job_progress): a bar on a terminal, log lines otherwise
        .config("spark.ui.showConsoleProgress", "false")
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


# -- output paths: written under a temporary name, renamed at the end ------------------------------
def _fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem for `path` (any Spark path: local, hdfs://, s3a://, ...) and the Path."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return hpath.getFileSystem(conf), hpath


def path_exists(spark: SparkSession, path: str) -> bool:
    fs, p = _fs(spark, path)
    return bool(fs.exists(p))


def delete_path(spark: SparkSession, path: str) -> None:
    fs, p = _fs(spark, path)
    if fs.exists(p):
        fs.delete(p, True)


def write_text(spark: SparkSession, path: str, text: str) -> None:
    fs, p = _fs(spark, path)
    stream = fs.create(p, True)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()


def read_text(spark: SparkSession, path: str) -> str:
    if not path_exists(spark, path):
        raise ConfigError(f"{path} not found: is this the output of the previous job?")
    fs, p = _fs(spark, path)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    stream = fs.open(p)
    try:  # commons-io ships with Spark
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


@contextlib.contextmanager
def staged_output(spark: SparkSession, out: str, *, overwrite: bool) -> Iterator[str]:
    """A temporary path next to `out` to write the job's output to; renamed to `out` when the
    block ends without error, deleted when it fails. A rerun after a failure starts clean."""
    out = out.rstrip("/")
    if path_exists(spark, out) and not overwrite:
        raise ConfigError(f"{out} exists: pass --overwrite to replace it")
    tmp = f"{out}.__tmp__"
    delete_path(spark, tmp)  # left by a run that was killed
    try:
        yield tmp
    except BaseException:
        delete_path(spark, tmp)
        raise
    delete_path(spark, out)
    fs, src = _fs(spark, tmp)
    _, dst = _fs(spark, out)
    if not fs.rename(src, dst):
        raise ConfigError(f"could not rename {tmp} to {out}")


# -- progress ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def job_progress(spark: SparkSession, label: str, *, interval: float = 10.0) -> Iterator[None]:
    """Spark's task progress while the block runs: a rich progress bar on a terminal, else a log
    line every `interval` seconds (Spark's own console bar is off)."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    tty = sys.stderr.isatty()

    def tasks() -> tuple[int, int]:
        done = total = 0
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total

    def poll() -> None:
        if tty:
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task(label, total=None)
                while not stop.wait(0.5):
                    done, total = tasks()
                    bar.update(task, completed=done, total=total or None)
            return
        while not stop.wait(interval):
            done, total = tasks()
            log.info("%s: %d/%d tasks of the running stages done", label, done, total)

    thread = threading.Thread(target=poll, name=f"progress-{label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@dataclass(frozen=True, slots=True)
class JobSummary:
    """What every job prints at the end."""

    job: str
    rows: int
    files: int
    tables: int
    seconds: float
    out: str | None = None

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        where = f" -> {self.out}" if self.out else ""
        return (
            f"{self.job}: {self.rows} rows, {self.files} files, {self.tables} tables in "
            f"{self.seconds:.1f}s ({self.rows_per_second:,.0f} rows/s){where}"
        )


def failure_details(job: str, exc: BaseException) -> str:
    """Write a failed job's whole error (the JVM stack included) to a file; returns its path."""
    fd, path = tempfile.mkstemp(prefix=f"binlog-mirror-{job}-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        fh.write("".join(traceback.format_exception(exc)))
        jvm_stack = getattr(exc, "_stackTrace", None)  # pyspark's CapturedException
        if jvm_stack:
            fh.write(f"\nJVM stack:\n{jvm_stack}\n")
    log.debug("%s failed", job, exc_info=exc)
    return path
