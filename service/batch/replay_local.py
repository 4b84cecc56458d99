"""`replay` without a JVM: the same driver (service.batch.replay.run_replay) with its tasks in worker
processes on this machine, for a local master (`local`, `local[N]`, `local[*]`) and an output path
pyarrow writes (localfs.local_paths). The tasks are the ones Spark runs (the header scan per
file, `decode_range` per range) and write the same files; a whole process then costs its Python
start and the rows' own work, not a JVM start, a session and Spark's Python workers (~40 s of a
44 s replay of 200,000 changes on 2 cores).

Workers: N of `local[N]`, the usable CPUs for `local[*]`, one for `local` (no pool: the tasks run
in this process). They are forked from a forkserver that imported the task modules once
(pyarrow, the compiled decoder), and they refuse pandas: pyarrow imports it at its first
`pa.array` only to ask whether a list is a pandas object (0.2-1.3 s a process, for nothing).

A task's error stops the job and comes back as `TaskFailed`, whose text ends with the error's
class path and message, as a failed Spark job carries a worker's error (session.job_error): the
CLI reports both engines' failures in one form (`TruncatedEvent: mysql-bin.000042 at offset ...`).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from typing import Any

import pyarrow as pa

from service.batch.changes import RangeResult, RangeTask, decode_range, output_root, write_empty
from service.batch.localfs import staged_local
from service.batch.replay import SPLIT_BYTES, ReplaySummary, run_replay
from service.errors import ConfigError
from service.transactions import TableFilter

__all__ = ["LocalEngine", "TaskFailed", "balanced_split", "local_workers", "refuse_pandas", "replay_locally"]

log = logging.getLogger(__name__)

# what the forkserver imports once, so that each worker it forks starts with them
_PRELOAD = ["service.batch.replay", "service.batch.changes", "service.batch.ranges"]
MIN_SPLIT = 16 << 20  # `balanced_split` cuts no range smaller than this


class TaskFailed(Exception):
    """A task of the local engine failed; its error is the cause (with the worker's traceback)."""

    def __init__(self, label: str, exc: BaseException) -> None:
        cls = type(exc)
        super().__init__(f"{label}: a task failed\n{cls.__module__}.{cls.__qualname__}: {exc}")


def local_workers(master: str) -> int:
    """Worker processes for a local master: N of local[N] (local[N,F] too), the CPUs this process
    may use for local[*], 1 for local."""
    if master == "local":
        return 1
    inner = master.removeprefix("local[").removesuffix("]").split(",", 1)[0].strip()
    if inner == "*":
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1
    if not inner.isdigit() or int(inner) < 1:
        raise ConfigError(f"--master {master}: expected local, local[N] or local[*]")
    return int(inner)


def balanced_split(paths: list[str], workers: int, split_bytes: int) -> int:
    """The range size for `workers`: `split_bytes`, or smaller when the files hold fewer than two
    ranges a worker (one 100 MB file on 2 workers: 4 ranges of 25 MB, not 64 + 36), never below
    MIN_SPLIT (each range reads the file's first event again and writes its own part files)."""
    if workers <= 1:
        return split_bytes
    total = sum(os.path.getsize(p) for p in paths)
    return min(split_bytes, max(MIN_SPLIT, total // (2 * workers)))


class _NoPandas:
    """An import finder that refuses pandas: pyarrow then takes it as not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("a replay worker does not import pandas", name=name)


def refuse_pandas() -> None:
    """From now on this process takes pandas as not installed (unless it imported it already): in
    each worker, and in the CLI's process when it runs the tasks itself (nothing else there needs
    pandas; never in a process that may, such as a test session)."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


class LocalEngine:
    """run_replay's tasks in `workers` processes of this machine (or in this process for one)."""

    def __init__(self, workers: int, *, interval: float = 10.0) -> None:
        self.workers = max(1, workers)
        self.interval = interval

    def staged(self, out: str, *, overwrite: bool) -> contextlib.AbstractContextManager[str]:
        return staged_local(out, overwrite=overwrite)

    def map(self, label: str, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        workers = min(self.workers, len(items))
        if workers <= 1:
            try:
                return [fn(item) for item in items]
            except Exception as exc:
                raise TaskFailed(label, exc) from exc
        with self._pool(workers) as pool:
            futures = [pool.submit(fn, item) for item in items]  # the driver sorts big ranges first
            self._wait(label, futures)
        return [f.result() for f in futures]

    @contextlib.contextmanager
    def _pool(self, workers: int) -> Iterator[ProcessPoolExecutor]:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=refuse_pandas)
        try:
            yield pool
        finally:  # a failed task: the others not started are dropped, the running ones awaited
            pool.shutdown(wait=True, cancel_futures=True)

    def _wait(self, label: str, futures: list[Future[Any]]) -> None:
        """Until every task is done or one failed (TaskFailed); a log line every `interval` s."""
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=self.interval, return_when=FIRST_EXCEPTION)
            for f in done:
                exc = f.exception()
                if exc is not None:
                    raise TaskFailed(label, exc) from exc
            if pending:
                log.info("%s: %d/%d tasks done", label, len(futures) - len(pending), len(futures))

    def decode(self, tasks: list[RangeTask]) -> list[RangeResult]:
        results: list[RangeResult] = self.map("replay: decoding", decode_range, tasks)
        return results

    def write_outputs(self, tmp: str, outputs: dict[str, pa.Schema], empty: set[str]) -> None:
        for name in sorted(empty):  # the tasks wrote the rest
            write_empty(tmp, name, outputs[name])

    def write_text(self, path: str, text: str) -> None:
        fs, p = output_root(path)
        fs.create_dir(p.rpartition("/")[0], recursive=True)
        with fs.open_output_stream(p) as fh:
            fh.write(text.encode())


def replay_locally(
    paths: list[str],
    out: str,
    tables: TableFilter,
    workers: int,
    *,
    overwrite: bool = False,
    canonical: bool = False,
    schema_file: str | None = None,
    split_bytes: int = SPLIT_BYTES,
) -> ReplaySummary:
    """replay_to_parquet's change log, in `workers` processes of this machine (no Spark); a file
    is cut into ranges of `balanced_split` so that even one file keeps every worker busy."""
    split = balanced_split(paths, workers, split_bytes)
    log.info("replay: %d worker process(es), no JVM; ranges of %.1f MiB", workers, split / 2**20)
    return run_replay(
        LocalEngine(workers), paths, out, tables,
        overwrite=overwrite, canonical=canonical, schema_file=schema_file, split_bytes=split,
    )  # fmt: skip
