"""`compact` without Spark: the same fold (service/batch/compact.py) in pyarrow and numpy, for a
local master on paths pyarrow reads and writes. A whole process then costs its Python start and
the rows' own work, not a JVM start and a session (11-12 s of the job's ~15 s at 150,000 rows).

The fold, columnar: a key's events (`compact._events`: ups at sub 1, deletes of the before image's
key at sub 0) sorted by (key, seq, sub). Its state is dropped if its last event is a delete; else
`_seq` is the last event's seq, each column the value of the last up after the key's last delete
that carried the column (an insert that does not carry it: NULL), and `_since` the seq of the last
up (deletes do not reset it, as in the JVM fold) that is an insert or carries every column of the
table's latest version. The output has the JVM job's columns and values; the tests diff the two.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from service.batch.changes import output_root
from service.batch.compact import COMPACT_META, CompactSummary
from service.batch.localfs import local_paths, staged_local
from service.batch.replay import META, TableColumns
from service.checkpoint import BinlogPosition
from service.errors import ConfigError
from service.transactions import TableFilter

__all__ = ["arrow_compact", "fits_in_memory", "local_paths", "read_text", "staged_local"]

ROW_GROUP = 65_536  # rows a reader holds at once


# the fold holds a table's changes in memory, decoded (Parquet's bytes grow ~5x) with its arrays
_MEMORY_SHARE = 20


def fits_in_memory(log: str) -> bool:
    """Whether the change log's tables are small enough for the fold in this process: their
    Parquet files at most 1/20 of the memory available now (else Spark, which spills)."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return False
    fs, root = output_root(f"{log.rstrip('/')}/changes")
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return sum(i.size or 0 for i in infos if i.is_file) * _MEMORY_SHARE <= available


def read_text(path: str) -> str:
    fs, p = output_root(path)
    if fs.get_file_info(p).type == pafs.FileType.NotFound:
        raise ConfigError(f"{path} not found: is this the output of the previous job?")
    with fs.open_input_stream(p) as fh:
        return bytes(fh.read()).decode()


def _dataset(path: str, columns: list[str] | None = None) -> pa.Table | None:
    """A Parquet directory's rows (None: no such directory or no file), its files read one by one:
    pyarrow.dataset would import pandas (1-3 s of a process that takes a few). `columns`: only
    those (a dotted name reads one field of a struct, with the struct's NULLs)."""
    fs, root = output_root(path)
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        return None
    files = sorted(
        i.path
        for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))
        if i.is_file
        and i.base_name.endswith(".parquet")
        # as Spark: no file under a hidden or _-named directory (_temporary, ...)
        and not any(part.startswith(("_", ".")) for part in i.path[len(root) :].split("/"))
    )
    if not files:
        return None
    tables = []
    for f in files:
        with fs.open_input_file(f) as fh:
            tables.append(pq.ParquetFile(fh).read(columns=columns))
    return pa.concat_tables(tables)


def _until_mask(t: pa.Table, files: list[str], until: BinlogPosition, shift: int, *, end_file: bool) -> Any:
    """compact._until_filter, on a table's columns (a numpy mask)."""
    if until.file not in files:
        raise ConfigError(f"--until {until}: {until.file} is not one of the replayed files")
    index = files.index(until.file)
    end_index = t["seq"].to_numpy() >> shift
    if end_file:
        later = pc.fill_null(pc.not_equal(t["end_file"], t["file"]), False).to_numpy(zero_copy_only=False)
        end_index = end_index + later.astype(np.int64)
    end_pos = t["end_pos"].to_numpy(zero_copy_only=False)
    return (end_index < index) | ((end_index == index) & (end_pos <= until.pos))


def _checkpoint(log: str, meta: dict[str, Any], until: BinlogPosition | None) -> Any:
    if until is None:
        return meta["end"]
    txns = _dataset(f"{log}/transactions")
    if txns is not None and txns.num_rows:
        txns = txns.filter(_until_mask(txns, meta["files"], until, meta["seq_shift"], end_file=True))
    if txns is None or not txns.num_rows:
        raise ConfigError(f"--until {until}: no transaction of the change log ends there or before")
    t = txns.slice(int(np.argmax(txns["seq"].to_numpy())), 1).to_pylist()[0]
    return {
        "file": t["end_file"],
        "pos": int(t["end_pos"]),
        "gtid_set": t["gtid_set"] or "",
        "ts": int(t["commit_ts"]),
    }


def _same(a: pa.ChunkedArray | pa.Array, b: pa.ChunkedArray | pa.Array) -> Any:
    """a == b per row with NULL equal to NULL (Spark's struct comparison of key fields)."""
    eq = pc.fill_null(pc.equal(a, b), False)
    both = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.or_(eq, both).to_numpy(zero_copy_only=False)


def _carries(after_columns: pa.ChunkedArray, names: list[str]) -> np.ndarray:
    """(rows, len(names)) booleans: whether each row's after_columns holds each name."""
    lists = after_columns.combine_chunks() if isinstance(after_columns, pa.ChunkedArray) else after_columns
    out = np.zeros((len(lists), len(names)), dtype=bool)
    if not len(names):
        return out
    # an image's columns are distinct names of the union: as many as the union means all of them
    length = pc.fill_null(pc.list_value_length(lists), 0).to_numpy()
    whole = length == len(names)
    out[whole] = True
    rest = np.flatnonzero(~whole)
    if not len(rest):
        return out
    part = lists.take(pa.array(rest))
    parents = rest[pc.list_parent_indices(part).to_numpy()]
    flat = pc.list_flatten(part)
    idx = pc.fill_null(pc.index_in(flat, value_set=pa.array(names, pa.string())), -1).to_numpy()
    found = idx >= 0
    out[parents[found], idx[found]] = True
    return out


def _read_columns(cols: TableColumns, until: BinlogPosition | None) -> list[str]:
    """The change log's columns the fold reads: of the before image only its key (a 250,000-change
    file: 0.65 -> 0.43 s of reading; 2,000,000 changes: 6.4 -> 0.6 sys CPU-s of allocation)."""
    wanted = ["seq", "op", "after", "after_columns", *(f"before.{k}" for k in cols.key)]
    return wanted + ["file", "end_file", "end_pos"] if until is not None else wanted


def _fold(changes: pa.Table, cols: TableColumns) -> pa.Table:
    """The compacted rows of one table's changes (see the module doc)."""
    names = [f.name for f in changes.schema.field("after").type]
    after = changes["after"].combine_chunks()
    before = changes["before"].combine_chunks()
    seq = changes["seq"].to_numpy()
    op = changes["op"]
    has_after = after.is_valid().to_numpy(zero_copy_only=False)
    key_after = [pc.struct_field(after, [names.index(k)]) for k in cols.key]
    if "before" in changes.column_names and len(cols.key):
        key_before = [pc.struct_field(before, [before.type.get_field_index(k)]) for k in cols.key]
    else:
        key_before = []
    key_moved = np.zeros(len(seq), dtype=bool)
    for a, b in zip(key_after, key_before, strict=True):
        key_moved |= ~_same(a, b)
    # Spark: before not null and (delete or key(before) != key(after)); a NULL after is no key change
    is_delete = pc.fill_null(pc.equal(op, "delete"), False).to_numpy(zero_copy_only=False)
    gone = before.is_valid().to_numpy(zero_copy_only=False) & (is_delete | (key_moved & has_after))
    ups = np.flatnonzero(has_after)
    dels = np.flatnonzero(gone)
    n_ups = len(ups)
    # the events: ups first, then deletes; `src` is the change row whose after image an up takes
    keys = [
        pa.concat_arrays([pc.take(a, pa.array(ups)), pc.take(b, pa.array(dels))])
        for a, b in zip(key_after, key_before, strict=True)
    ]
    ev_seq = np.concatenate([seq[ups], seq[dels]])
    ev_sub = np.concatenate([np.ones(n_ups, np.int8), np.zeros(len(dels), np.int8)])
    ev_src = np.concatenate([ups, np.full(len(dels), -1, np.int64)])
    events = pa.table({**{f"k{i}": k for i, k in enumerate(keys)}, "seq": ev_seq, "sub": ev_sub})
    order = pc.sort_indices(
        events,
        sort_keys=[
            *((f"k{i}", "ascending") for i in range(len(keys))),
            ("seq", "ascending"),
            ("sub", "ascending"),
        ],
    ).to_numpy()
    n = len(order)
    if n == 0:
        return _empty(changes.schema.field("after").type)
    ev_seq, ev_src = ev_seq[order], ev_src[order]
    keys = [pc.take(k, pa.array(order)) for k in keys]
    new_key = np.ones(n, dtype=bool)
    if n > 1:
        same = np.ones(n - 1, dtype=bool)
        for k in keys:
            same &= _same(k.slice(0, n - 1), k.slice(1))
        new_key[1:] = ~same
    key_id = np.cumsum(new_key) - 1
    last = np.flatnonzero(np.r_[new_key[1:], True])  # each key's last event
    is_up = ev_src >= 0
    kept = last[is_up[last]]  # keys whose last event is not a delete
    # the position of each key's last delete (-1: none), spread over the key's events
    del_pos = np.where(~is_up, np.arange(n), -1)
    last_del = np.maximum.reduceat(del_pos, np.flatnonzero(new_key))[key_id]
    live = is_up & (np.arange(n) > last_del)
    src = np.where(is_up, ev_src, 0)
    carried = _carries(changes["after_columns"], names)[src] & is_up[:, None]
    inserts = pc.fill_null(pc.equal(op, "insert"), False).to_numpy(zero_copy_only=False)[src] & is_up
    latest = [names.index(c) for c in cols.latest if c in names]
    whole = carried[:, latest].all(axis=1) if cols.latest else is_up.copy()
    if cols.latest and len(latest) < len(cols.latest):  # a latest column the union lacks: never whole
        whole[:] = False

    def last_of(mask: np.ndarray) -> np.ndarray:
        """Per kept key, the position of its last event in `mask` (-1: none)."""
        at = np.full(int(key_id[-1]) + 1, -1, dtype=np.int64)
        idx = np.flatnonzero(mask)
        keys = key_id[idx]  # ascending: the events are sorted by key
        ends = idx[np.r_[keys[1:] != keys[:-1], True]] if len(idx) else idx
        at[key_id[ends]] = ends
        result: np.ndarray = at[key_id[kept]]
        return result

    since_at = last_of(is_up & (inserts | whole))
    arrays: dict[str, pa.Array] = {
        "_seq": pa.array(ev_seq[kept]),
        "_since": pa.array(np.where(since_at >= 0, ev_seq[np.maximum(since_at, 0)], 0), mask=since_at < 0),
    }
    all_whole = bool(carried[live].all()) if live.any() else True
    for j, name in enumerate(names):
        at = last_of(live & carried[:, j]) if not all_whole else kept
        rows = src[np.maximum(at, 0)]
        if not all_whole:
            # the last live up carried it, else an insert that did not: NULL; else no live up: NULL
            took = at >= 0
            ins_after = last_of(live & inserts)
            took &= ~(ins_after > at)
            mask = ~took
        else:
            mask = None
        field = pc.struct_field(after, [j])
        values = pc.take(field, pa.array(rows))
        if mask is not None and mask.any():
            values = pc.if_else(pa.array(mask), pa.nulls(len(values), values.type), values)
        arrays[name] = values
    return pa.table(arrays)


def _empty(after_type: pa.StructType) -> pa.Table:
    fields = [pa.field("_seq", pa.int64()), pa.field("_since", pa.int64()), *after_type]
    return pa.schema(fields).empty_table()


def arrow_compact(
    log: str,
    out: str,
    *,
    until: BinlogPosition | None = None,
    tables: TableFilter | None = None,
    overwrite: bool = False,
) -> CompactSummary:
    """service.batch.compact.compact without Spark (the caller checked `local_paths`)."""
    started = time.monotonic()
    meta = orjson.loads(read_text(f"{log}/{META}"))
    catalog = [TableColumns.from_json(t) for t in meta["tables"]]
    if tables is not None:
        catalog = [c for c in catalog if tables.wants(c.schema, c.table)]
    shift = int(meta["seq_shift"])
    checkpoint = _checkpoint(log, meta, until)
    ddl = _dataset(f"{log}/ddl")
    by_table: dict[tuple[str, str], int] = {}
    stale: dict[str, int] = {}
    skipped: list[tuple[str, str]] = []
    with staged_local(out, overwrite=overwrite) as staged:
        fs, tmp = output_root(staged)
        for cols in catalog:
            if not cols.key:
                skipped.append((cols.schema, cols.table))
                continue
            changes = _dataset(f"{log}/changes/{cols.schema}/{cols.table}", _read_columns(cols, until))
            assert changes is not None, f"{cols.schema}.{cols.table}: no changes dataset"
            if until is not None:
                changes = changes.filter(_until_mask(changes, meta["files"], until, shift, end_file=True))
            if ddl is not None and ddl.num_rows:  # a TRUNCATE / DROP / CREATE of the table resets it
                name = f"{cols.schema}.{cols.table}"
                kinds, seqs = ddl["kind"].to_pylist(), ddl["seq"].to_pylist()
                hits = [
                    i
                    for i, ts in enumerate(ddl["tables"].to_pylist())
                    if kinds[i] in ("truncate", "drop", "create") and ts and name in ts
                ]
                if hits and until is not None:
                    ok = _until_mask(ddl.take(hits), meta["files"], until, shift, end_file=False)
                    hits = [h for h, keep in zip(hits, ok, strict=True) if keep]
                if hits:
                    last_reset = max(seqs[h] for h in hits)
                    changes = changes.filter(pc.greater(changes["seq"], last_reset))
            state = _fold(changes, cols)
            fs.create_dir(f"{tmp}/{cols.schema}/{cols.table}", recursive=True)
            pq.write_table(
                state,
                f"{tmp}/{cols.schema}/{cols.table}/part-00000.parquet",
                filesystem=fs,
                row_group_size=ROW_GROUP,
                use_dictionary=False,  # a third of the write's time, for a state read once
            )
            since = state["_since"]
            old = pc.sum(pc.fill_null(pc.less(since, cols.since), True)).as_py() or 0
            by_table[(cols.schema, cols.table)] = state.num_rows
            stale[f"{cols.schema}.{cols.table}"] = int(old)
        doc = {
            "files": meta["files"],
            "checkpoint": checkpoint,
            "tables": [c.to_json() for c in catalog if c.key],
            "rows": {f"{s}.{t}": n for (s, t), n in by_table.items()},
            "stale": stale,
        }
        fs.create_dir(tmp, recursive=True)
        with fs.open_output_stream(f"{tmp}/{COMPACT_META}") as fh:
            fh.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    seconds = time.monotonic() - started
    return CompactSummary(by_table, skipped, checkpoint, int(meta.get("changes", 0)), seconds, stale)
