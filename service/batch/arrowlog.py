"""The change log's Arrow columns, built a column at a time from decoded values (executor side).

pyarrow converts a whole list of Python values in C (`pa.array(values, type=...)`): no per-value
Python work for the types it takes as the decoder gives them (int, float, Decimal, date, datetime,
str, bytes). Only the text-form kinds (TIME, JSON, ENUM, SET, ...) and values a column's type
cannot hold (a zero date, a widened column's older values) go through Python per value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from service.sink.values import text_value

__all__ = ["arrow_type", "column_array", "image_array", "names_array"]

Image = dict[str, Any] | None


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow type of a change-log kind (service.batch.tableversion.column_kind)."""
    if kind == "bigint":
        return pa.int64()
    if kind == "double":
        return pa.float64()
    if kind.startswith("decimal("):
        precision, scale = map(int, kind[8:-1].split(","))
        return pa.decimal128(precision, scale)
    if kind == "date":
        return pa.date32()
    if kind in ("timestamp_ntz", "timestamp_utc"):
        # no zone: Spark reads it as timestamp_ntz; an aware TIMESTAMP value converts to UTC
        return pa.timestamp("us")
    if kind == "binary":
        return pa.binary()
    return pa.string()  # string, text


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()  # binary in a text column (GEOMETRY & co.)
    return text_value(value)


def _coerce(kind: str, value: Any) -> Any:
    """A value the column's Arrow type does not take as it is; None where it has no form (a zero
    date, an out-of-range decimal: what a cast in the JVM gave)."""
    if value is None:
        return None
    if kind in ("string", "text"):
        return value if type(value) is str else _text(value)
    if kind in ("timestamp_ntz", "timestamp_utc"):
        return value if isinstance(value, dt.datetime) else None
    if kind == "date":
        return value if isinstance(value, dt.date) else None
    if kind == "binary":
        return bytes(value) if isinstance(value, bytes | bytearray) else str(value).encode()
    if kind == "double":
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    if kind == "bigint":
        return int(value) if isinstance(value, int) else None
    return value  # decimal: one value at a time below


def column_array(values: Sequence[Any], kind: str) -> pa.Array:
    """One column's values (None for NULL) as an Arrow array of the kind's type."""
    t = arrow_type(kind)
    if kind == "text":
        return pa.array([v if v is None or type(v) is str else _text(v) for v in values], type=t)
    try:
        return pa.array(values, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    fixed = [_coerce(kind, v) for v in values]
    if kind.startswith("decimal("):
        out = []
        for v in fixed:  # each value alone: one that does not fit becomes NULL
            try:
                out.append(pa.array([v], type=t)[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                out.append(None)
        fixed = out
    return pa.array(fixed, type=t)


def _transposed(images: Sequence[Image], version: Sequence[str]) -> dict[str, Sequence[Any]] | None:
    """The columns of images that all carry exactly the `version`'s columns in its order (FULL
    images of one TABLE_MAP), transposed by one zip; None when they do not (a narrower image
    fails the strict zip: an image never holds columns its version lacks)."""
    n = len(version)
    first = next((img for img in images if img is not None), None)
    if not n or first is None or list(first) != list(version):
        return None
    nones = (None,) * n
    try:
        cols = zip(*[nones if img is None else img.values() for img in images], strict=True)
        return dict(zip(version, cols, strict=True))
    except ValueError:
        return None


def image_array(
    images: Sequence[Image], columns: Sequence[tuple[str, str]], version: Sequence[str]
) -> pa.StructArray:
    """Row images (None: no image) as one struct of the union `columns` (name, kind)."""
    by_name = _transposed(images, version)
    if by_name is None:
        by_name = {name: [None if img is None else img.get(name) for img in images] for name, _ in columns}
    empty = [None] * len(images)
    arrays = [column_array(by_name.get(name, empty), kind) for name, kind in columns]
    fields = [pa.field(name, arrow_type(kind)) for name, kind in columns]
    mask = pa.array([img is None for img in images], type=pa.bool_())
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)


def names_array(images: Sequence[Image], version: Sequence[str]) -> pa.Array:
    """The columns each image carries (list<string>, null without an image)."""
    n = len(version)
    if n and all(img is None or len(img) == n for img in images):
        # the same list for every image: offsets and one `take` instead of a list per row
        import numpy as np

        present = [img is not None for img in images]
        counts = np.where(present, n, 0)
        offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        values = pa.array(list(version), type=pa.string()).take(
            pa.array(np.tile(np.arange(n), int(sum(present))))
        )
        mask = pa.array([not p for p in present], type=pa.bool_())
        return pa.ListArray.from_arrays(offsets, values, mask=mask)
    return pa.array([None if img is None else list(img) for img in images], type=pa.list_(pa.string()))
