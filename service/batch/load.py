"""Load a compacted state (the output of `compact`) into an empty Redis mirror, ending with the
checkpoint the replayed files end at, so `binlog-mirror run` continues from there
(docs/pipeline.md, "load").

The protocol is the snapshot's (service/batch/snapshot.py), with the rows coming from Parquet
instead of the source: refuse a mirror that has a checkpoint or whose writer lease is held; take
the lease; clear what an earlier, failed load left of each table; write the rows in the service's
key layout and value forms (`service.sink.bulk`, one Spark task per Parquet partition); store the
checkpoint with the tables registered in one fenced `RedisMirror.apply` of an empty transaction;
release the lease. The service then streams from the first transaction after the replayed ones:
nothing lost, nothing applied twice.

A table with stale rows (`compact`: values logged before the table's last ALTER) is neither
written nor registered: the service copies it from the source when it starts, as it does itself
after an ALTER (service/pipeline/ddl.py), instead of the mirror holding rows the ALTER changed.
Only the columns of each table's latest version are written (a dropped column is not).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
import redis as redis_sync

from service.batch.changes import output_root, pyarrow_writes
from service.batch.compact import COMPACT_META
from service.batch.replay import TableColumns
from service.batch.resp import pack_batch
from service.batch.session import JobSummary, job_progress, read_text
from service.batch.snapshot import _IN_SYNC, writer_lease
from service.binlog.jsonb import JsonNull
from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import ConfigError, SinkError
from service.settings import Settings
from service.sink.bulk import InFlight, clear_table, write_rows
from service.sink.checkpoints import decode_checkpoint
from service.sink.client import redis_client
from service.sink.keys import KeyLayout
from service.sink.mirror import MirrorOptions, RedisMirror

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LoadResult", "load_mirror", "row_values"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadResult:
    checkpoint: Checkpoint
    by_table: dict[tuple[str, str], int]
    seconds: float
    left: list[tuple[str, str]]  # tables with stale rows: not loaded, the service copies them

    @property
    def rows(self) -> int:
        return sum(self.by_table.values())

    def job(self, source: str) -> JobSummary:
        return JobSummary("load", self.rows, 0, len(self.by_table), self.seconds, source)


def row_values(row: dict[str, Any], kinds: dict[str, tuple[str, str]], json_mode: bool) -> dict[str, Any]:
    """A compacted row (as Spark gives it) -> the values the decoder gives for it, the form the
    sink writes (docs/pipeline.md lists the conversions), NULL columns included (None)."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name not in kinds:  # _seq, _since, columns dropped by an ALTER
            continue
        if value is None:  # json mode writes it as null, as the service does; hash mode skips it
            out[name] = None
            continue
        kind, mysql_type = kinds[name]
        if kind == "timestamp_utc" and isinstance(value, dt.datetime):
            value = value.replace(tzinfo=dt.UTC)
        elif isinstance(value, bytearray):
            value = bytes(value)
        elif kind == "decimal(20,0)" and isinstance(value, Decimal):
            value = int(value)
        elif json_mode and mysql_type == "JSON" and isinstance(value, str) and value[:1] in ("{", "[", "n"):
            # the mirror's text form of a document; a JSON string was stored as its own text
            with contextlib.suppress(orjson.JSONDecodeError):
                doc = orjson.loads(value)
                value = JsonNull() if doc is None else doc
        out[name] = value
    return out


def _loaded_columns(cols: TableColumns) -> list[str]:
    """The columns load writes: those of the table's latest version (not one an ALTER dropped)."""
    latest = set(cols.latest) or {n for n, _, _ in cols.columns}
    return [n for n, _, _ in cols.columns if n in latest]


class _Target(NamedTuple):
    """Where and how a task writes (plain values, pickled to Spark's tasks)."""

    url: str
    prefix: str
    json_mode: bool
    chunk: int

    @classmethod
    def of(cls, settings: Settings) -> _Target:
        assert settings.redis is not None
        return cls(
            settings.redis.url.get_secret_value(),
            settings.key_prefix,
            settings.value_mode == "json",
            max(1, settings.chunk_rows),
        )


def _batch_writer(target: _Target, cols: TableColumns) -> Callable[[Iterable[Any]], int]:
    """A function that writes Arrow batches of the table's compacted rows (to_pylist: the rows as
    dicts, converted in C, no Row objects) and returns the rows written."""
    url, prefix, json_mode, chunk = target.url, target.prefix, target.json_mode, target.chunk
    loaded = set(_loaded_columns(cols))
    kinds = {n: (k, t) for n, k, t in cols.columns if n in loaded}

    by_name = {n: k for n, (k, _) in kinds.items()}
    # strings, not the KeyLayout: Spark pickles this closure, and a (compiled) KeyLayout does not
    base = KeyLayout(prefix).table_base(cols.schema, cols.table)
    index = KeyLayout(prefix).index_key(cols.schema, cols.table)

    def packed(batch: Any) -> list[tuple[bytes, int]] | None:
        """The batch's commands built a column at a time (service.batch.resp); None where the
        row packer must do it: json mode, a NULL key part, a text that is not UTF-8."""
        if json_mode or any(batch.column(k).null_count for k in cols.key):
            return None
        try:
            return pack_batch(batch, by_name, cols.key, base, index, chunk)
        except UnicodeEncodeError:
            return None

    def write(batches: Iterable[Any]) -> int:
        layout = KeyLayout(prefix)
        r = redis_sync.Redis.from_url(url)
        sent = InFlight(r)
        written = 0
        try:
            for batch in batches:
                commands = packed(batch)  # built while Redis runs the previous batch's
                sent.drain()
                if commands is not None:
                    for data, replies in commands:
                        sent.send(data, replies)
                    written += batch.num_rows
                    continue
                rows = [row_values(row, kinds, json_mode) for row in batch.to_pylist()]
                for i in range(0, len(rows), chunk):
                    part = rows[i : i + chunk]
                    write_rows(r, layout, cols.schema, cols.table, cols.key, part, json_mode=json_mode)
                written += len(rows)
            sent.drain()
        finally:
            sent.close()
            r.close()
        return written

    return write


def _writer(target: _Target, cols: TableColumns) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """The mapInArrow function that writes a partition's rows (a state pyarrow cannot read)."""
    write = _batch_writer(target, cols)

    def batches(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"n": [write(batches)]})

    return batches


def _file_writer(target: _Target, cols: TableColumns, root: str) -> Callable[[str], int]:
    """A task's function that reads one Parquet file of the state with pyarrow and writes its rows:
    no JVM row conversion and no Arrow transfer from Spark (that alone cost 31 µs a row)."""
    write = _batch_writer(target, cols)

    def load_file(path: str) -> int:
        return write(_file_batches(root, path, cols))

    return load_file


def _file_batches(
    root: str, path: str, cols: TableColumns, row_groups: list[int] | None = None
) -> Iterator[Any]:
    import pyarrow.parquet as pq

    fs, _ = output_root(root)
    # Spark writes TIMESTAMPs as INT96: read at the change log's unit (µs), not as ns
    with fs.open_input_file(path) as fh:
        parquet = pq.ParquetFile(fh, coerce_int96_timestamp_unit="us")
        yield from parquet.iter_batches(
            batch_size=10_000, columns=_loaded_columns(cols), row_groups=row_groups
        )


def _parquet_files(path: str) -> list[str] | None:
    """The Parquet files of a table's state where pyarrow can read them (else None: Spark reads)."""
    if not pyarrow_writes(path):
        return None
    import pyarrow.fs as pafs

    fs, root = output_root(path)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted(i.path for i in infos if i.is_file and i.base_name.endswith(".parquet"))


def load_mirror(
    spark: SparkSession | None, settings: Settings, state: str, *, workers: int = 1
) -> LoadResult:
    """Write the compacted state at `state` to the mirror `settings` name; see the module doc.
    Without a session (a local master, a state pyarrow reads: `compact_arrow.local_paths`), this
    process writes the rows instead of Spark tasks."""
    if settings.redis is None:
        raise ConfigError("load needs --redis (or BINLOG_MIRROR_REDIS / the config file)")
    started = time.monotonic()
    if spark is None:
        from service.batch.compact_arrow import read_text as read_local

        meta = orjson.loads(read_local(f"{state}/{COMPACT_META}"))
    else:
        meta = orjson.loads(read_text(spark, f"{state}/{COMPACT_META}"))
    cp = meta["checkpoint"]
    if cp is None:
        raise ConfigError(f"{state}: the replayed files hold no complete transaction: nothing to resume from")
    checkpoint = Checkpoint(
        BinlogPosition(cp["file"], int(cp["pos"])), cp.get("gtid_set") or "", int(cp["ts"] or 0)
    )
    stale = meta.get("stale", {})
    every = [TableColumns.from_json(t) for t in meta["tables"]]
    catalog = [c for c in every if not stale.get(f"{c.schema}.{c.table}")]
    left = [(c.schema, c.table) for c in every if stale.get(f"{c.schema}.{c.table}")]
    for schema, table in left:
        log.warning(
            "%s.%s: %d rows were logged before its last ALTER: not loaded; the service copies it "
            "when it starts (as after an ALTER)",
            schema,
            table,
            stale[f"{schema}.{table}"],
        )
    layout = KeyLayout(settings.key_prefix)
    r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
    try:
        if decode_checkpoint(r.hgetall(layout.checkpoint_key)) is not None:
            raise ConfigError(_IN_SYNC.format(key=layout.checkpoint_key, prefix=layout.prefix))
    except redis_sync.RedisError as exc:
        raise SinkError(f"load: {exc}") from exc
    finally:
        r.close()
    try:
        rows = asyncio.run(_load(spark, settings, state, checkpoint, catalog))
    except redis_sync.RedisError as exc:
        raise SinkError(f"load: {exc}") from exc
    return LoadResult(checkpoint, rows, time.monotonic() - started, left)


async def _load(
    spark: SparkSession | None,
    settings: Settings,
    state: str,
    checkpoint: Checkpoint,
    catalog: list[TableColumns],
) -> dict[tuple[str, str], int]:
    assert settings.redis is not None
    layout = KeyLayout(settings.key_prefix)
    keys = {(c.schema, c.table): c.key for c in catalog}
    redis = redis_client(settings.redis.url.get_secret_value(), socket_timeout=10, socket_connect_timeout=5)
    options = MirrorOptions(json_mode=settings.value_mode == "json", lease_ttl=settings.lease_ttl_seconds)
    mirror = RedisMirror(
        redis, layout, lambda s, t: keys.get((s, t)), options, token="load-" + secrets.token_hex(6)
    )
    async with writer_lease(mirror, settings.lease_ttl_seconds, "load") as register:
        rows = await asyncio.to_thread(_copy, spark, settings, state, catalog)
        await register([(c.schema, c.table) for c in catalog], checkpoint)
    return rows


def _copy(
    spark: SparkSession | None, settings: Settings, state: str, catalog: list[TableColumns]
) -> dict[tuple[str, str], int]:
    assert settings.redis is not None
    layout = KeyLayout(settings.key_prefix)
    r = redis_sync.Redis.from_url(settings.redis.url.get_secret_value())
    try:
        for c in catalog:
            clear_table(r, layout, c.schema, c.table)  # what an earlier, failed load left
    finally:
        r.close()
    target = _Target.of(settings)
    if spark is None:
        return _copy_local(target, state, catalog)
    rows: dict[tuple[str, str], int] = {}
    sc = spark.sparkContext
    with job_progress(spark, "load"):
        for c in catalog:
            path = f"{state}/{c.schema}/{c.table}"
            files = _parquet_files(path)
            if files is not None:  # one task per file, read by pyarrow in the task
                tasks = sc.parallelize(files, max(1, len(files)))
                rows[(c.schema, c.table)] = sum(tasks.map(_file_writer(target, c, path)).collect())
                continue
            frame = spark.read.parquet(path).select(*[f"`{n}`" for n in _loaded_columns(c)])
            written = frame.mapInArrow(_writer(target, c), "n long").collect()
            rows[(c.schema, c.table)] = sum(int(w["n"]) for w in written)
    return rows


def _copy_local(target: _Target, state: str, catalog: list[TableColumns]) -> dict[tuple[str, str], int]:
    """The rows written by this process, without Spark: one packer keeps up with Redis, whose
    own work per row (~17 µs a 12-column row here) is the bound; worker processes only added
    their start (~1 s of imports each) on 2 cores."""
    rows: dict[tuple[str, str], int] = {}
    for c in catalog:
        root = f"{state}/{c.schema}/{c.table}"
        files = _parquet_files(root)
        assert files is not None, f"{root}: not a path pyarrow reads"  # compact_arrow.local_paths
        write = _file_writer(target, c, root)
        rows[(c.schema, c.table)] = sum(write(path) for path in files)
    return rows
