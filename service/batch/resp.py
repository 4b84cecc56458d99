"""The RESP of a batch of compacted rows, built a column at a time by pyarrow (load's hash mode):
the same bytes as `service.sink.bulk.pack_ops` packs row by row (DEL + HSET per row, one SADD of
the keys), without a Python dict, a text conversion and a packing call per row (~20 µs a
12-column row in Python; here ~2).

Each column's values become their hash-field texts (service/sink/values.py) in bulk where
pyarrow's own text form is the same (integers, strings, bytes, DECIMAL with scale <= 6, DATE,
DATETIME/TIMESTAMP with the fraction cut when zero); other kinds (DOUBLE: Python's shortest
repr; TIME, JSON documents, ...) are converted per value in Python, one column at a time.
tests/spark/test_pipeline.py diffs the bytes with the row packer on every kind it loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from service.sink.keys import escape
from service.sink.values import hash_text, key_text

__all__ = ["pack_batch"]


def _b(data: bytes) -> pa.Scalar:
    """An Arrow binary scalar: pyarrow.compute converts no Python bytes argument without pandas."""
    return pa.scalar(data, pa.binary())


_CRLF = _b(b"\r\n")
_EMPTY = _b(b"")


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _python_texts(values: pa.Array, kind: str, text: Any) -> pa.Array:
    """Texts converted per value (kinds pyarrow has no identical text form for)."""
    out: list[Any] = []
    for v in values.to_pylist():
        if v is None:
            out.append(None)
            continue
        if kind == "decimal(20,0)":  # BIGINT UNSIGNED: an int, as row_values gives it
            v = int(v)
        t = text(v)
        out.append(t.encode() if isinstance(t, str) else bytes(t))
    return pa.array(out, pa.binary())


def _scale(kind: str) -> int:
    return int(kind[8:-1].split(",")[1])


def field_texts(values: pa.Array, kind: str) -> pa.Array:
    """A column's hash-field texts (binary; NULL stays NULL)."""
    t = values.type
    if pa.types.is_integer(t) or pa.types.is_date32(t) or (pa.types.is_decimal(t) and _scale(kind) <= 6):
        # int.__repr__, date.isoformat, Decimal.__str__ (plain digits at scale <= 6)
        return pc.cast(pc.cast(values, pa.string()), pa.binary())
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        return pc.cast(values, pa.binary())
    if pa.types.is_timestamp(t) and t.tz is None:
        return _datetime_texts(values)
    return _python_texts(values, kind, hash_text)


def _digits(values: Any, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.cast(pa.array(values), pa.string()), width, "0")


def _datetime_texts(values: pa.Array) -> pa.Array:
    """naive_text: YYYY-MM-DD HH:MM:SS, then .ffffff only when the microseconds are not 0
    (arithmetic: pyarrow's strftime costs ~3 µs a value)."""
    values = values.cast(pa.timestamp("us"))
    us = pc.fill_null(values.cast(pa.int64()), 0).to_numpy()
    secs, frac = np.divmod(np.mod(us, 86_400_000_000), 1_000_000)
    hours, rest = np.divmod(secs, 3600)
    minutes, seconds = np.divmod(rest, 60)
    date = pc.cast(values.cast(pa.date32()), pa.string())  # YYYY-MM-DD, years < 1000 zero-padded
    whole = pc.binary_join_element_wise(
        date, " ", _digits(hours, 2), ":", _digits(minutes, 2), ":", _digits(seconds, 2), ""
    )
    with_us = pc.binary_join_element_wise(whole, ".", _digits(frac, 6), "")
    return pc.cast(pc.if_else(pa.array(frac == 0), whole, with_us), pa.binary())


def key_texts(values: pa.Array, kind: str) -> pa.Array:
    """A key column's part of the row suffix (KeyLayout.row_suffix: escaped key_text)."""
    if pa.types.is_integer(values.type):
        return pc.cast(pc.cast(values, pa.string()), pa.binary())  # digits: nothing to escape
    return _python_texts(values, kind, lambda v: escape(key_text(v)))


def _lengths(data: pa.Array) -> pa.Array:
    return pc.cast(pc.cast(pc.binary_length(data), pa.string()), pa.binary())


def _bulks(data: pa.Array) -> pa.Array:
    """$len CRLF data CRLF per value (NULL for NULL)."""
    return pc.binary_join_element_wise(_b(b"$"), _lengths(data), _CRLF, data, _CRLF, _EMPTY)


def _joined(arr: pa.Array) -> bytes:
    """The values of a binary array without NULLs, concatenated (its data buffer, sliced)."""
    arr = pc.cast(arr, pa.large_binary()) if not pa.types.is_large_binary(arr.type) else arr
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not len(arr):
        return b""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    assert data is not None
    joined: bytes = data.to_pybytes()[offsets[0] : offsets[-1]]
    return joined


def pack_batch(
    batch: pa.RecordBatch,
    kinds: dict[str, str],
    key: Sequence[str],
    base: str,
    index: str,
    chunk: int,
) -> list[tuple[bytes, int]]:
    """(commands, replies) per chunk of `chunk` rows: DEL and HSET of each row (no HSET for a row
    of NULLs), then one SADD of the chunk's row suffixes to `index`."""
    n = batch.num_rows
    if not n:
        return []
    parts = [key_texts(batch.column(k), kinds[k]) for k in key]
    suffix = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, _b(b":"))
    row_key = pc.binary_join_element_wise(_b(base.encode() + b":"), suffix, _EMPTY)
    bulk_key = _bulks(row_key)
    pieces = []
    counts = np.zeros(n, dtype=np.int64)
    for name in batch.schema.names:
        texts = field_texts(batch.column(name), kinds[name])
        counts += texts.is_valid().to_numpy(zero_copy_only=False)
        pieces.append(
            pc.fill_null(
                pc.binary_join_element_wise(
                    _b(_bulk(name.encode()) + b"$"), _lengths(texts), _CRLF, texts, _CRLF, _EMPTY
                ),
                _EMPTY,
            )
        )
    arrays = pc.cast(pc.cast(pa.array(2 + 2 * counts), pa.string()), pa.binary())
    hset = pc.binary_join_element_wise(_b(b"*"), arrays, _b(b"\r\n$4\r\nHSET\r\n"), bulk_key, *pieces, _EMPTY)
    dele = pc.binary_join_element_wise(_b(b"*2\r\n$3\r\nDEL\r\n"), bulk_key, _EMPTY)
    rows = pc.if_else(pa.array(counts > 0), pc.binary_join_element_wise(dele, hset, _EMPTY), dele)
    suffixes = _bulks(suffix)
    has_hset = counts > 0
    out = []
    index_bulk = _bulk(index.encode())
    for i in range(0, n, chunk):
        m = min(chunk, n - i)
        sadd = b"*%d\r\n$4\r\nSADD\r\n%s%s" % (m + 2, index_bulk, _joined(suffixes.slice(i, m)))
        replies = m + int(has_hset[i : i + m].sum()) + 1
        out.append((_joined(rows.slice(i, m)) + sadd, replies))
    return out
