"""The change log's Arrow columns, built a column at a time from decoded values (executor side).

pyarrow converts a whole list of Python values in C (`pa.array(values, type=...)`): no per-value
Python work for the types it takes as the decoder gives them (int, float, Decimal, date, datetime,
str, bytes). Only the text-form kinds (TIME, JSON, ENUM, SET, ...) and values a column's type
cannot hold (a zero date, a widened column's older values) go through Python per value. The
replay's decoder gives DECIMAL (scale <= 6) and the temporal values as their text
(DecodeOptions.stored_text): Arrow parses those a column at a time (`_from_text`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from service.sink.values import text_value

__all__ = ["ImageColumns", "arrow_type", "column_array", "image_array", "key_array", "names_array"]

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


_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    TypeError,
    ValueError,
    OverflowError,
)
_PARSED = ("date", "timestamp_ntz", "timestamp_utc")  # and decimal(p,s)


def _parse(texts: pa.Array, t: pa.DataType, utc: bool) -> pa.Array:
    """Texts cast by Arrow; `utc`: a TIMESTAMP's "...T...Z" (UtcText), through a UTC timestamp
    to its UTC wall time, as pyarrow stores an aware datetime."""
    if utc:
        return texts.cast(pa.timestamp("us", "UTC")).cast(t)
    return texts.cast(t)


def _from_text(values: Sequence[Any], t: pa.DataType) -> pa.Array | None:
    """A DECIMAL / DATE / DATETIME / TIMESTAMP column the decoder gave as text
    (DecodeOptions.stored_text, the replay's decoder): the texts parsed by Arrow in C, no
    Decimal or datetime built per value. A text Arrow cannot parse into the type (MySQL's zero
    date, an out-of-range decimal) becomes NULL, as the typed values' coercion does. None when
    a value is not text (a Decimal of scale > 6): the caller converts the values."""
    try:
        texts = pa.array(values, type=pa.string())
    except _ERRORS:
        return None
    # one batch is one table version: its TIMESTAMP texts all end with Z (else: value by value)
    utc = pa.types.is_timestamp(t) and str(_first(values)).endswith("Z")
    try:
        return _parse(texts, t, utc)
    except _ERRORS:
        pass
    out = []
    for i in range(len(texts)):  # each value alone: one that does not parse becomes NULL
        one = texts.slice(i, 1)
        try:
            out.append(_parse(one, t, pa.types.is_timestamp(t) and str(one[0]).endswith("Z"))[0].as_py())
        except _ERRORS:
            out.append(None)
    return pa.array(out, type=t)


def _one(v: Any, t: pa.DataType) -> Any:
    """One value of a column whose others are not all text: a text parsed, else as it is."""
    if isinstance(v, str):
        parsed = _from_text([v], t)
        return None if parsed is None else parsed[0].as_py()
    return v


def _first(values: Sequence[Any]) -> Any:
    return next((v for v in values if v is not None), None)


def column_array(values: Sequence[Any], kind: str) -> pa.Array:
    """One column's values (None for NULL) as an Arrow array of the kind's type."""
    t = arrow_type(kind)
    if kind == "text":
        return pa.array([v if v is None or type(v) is str else _text(v) for v in values], type=t)
    parsed = kind in _PARSED or kind.startswith("decimal(")
    if parsed and isinstance(_first(values), str) and (array := _from_text(values, t)) is not None:
        return array
    try:
        return pa.array(values, type=t)
    except _ERRORS:
        pass
    if parsed and (array := _from_text(values, t)) is not None:
        return array
    if parsed:
        values = [_one(v, t) for v in values]
    fixed = [_coerce(kind, v) for v in values]
    if kind.startswith("decimal("):
        out = []
        for v in fixed:  # each value alone: one that does not fit becomes NULL
            try:
                out.append(pa.array([v], type=t)[0].as_py())
            except _ERRORS:
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


def _struct_type(columns: Sequence[tuple[str, str]]) -> pa.StructType:
    return pa.struct([pa.field(name, arrow_type(kind)) for name, kind in columns])


def _all_text(images: Sequence[Image], name: str) -> bool:
    """Whether every value of a `text` column is already its text (str or NULL)."""
    return {type(img.get(name)) for img in images if img is not None} <= {str, type(None)}


def image_array(
    images: Sequence[Image], columns: Sequence[tuple[str, str]], version: Sequence[str]
) -> pa.StructArray:
    """Row images (None: no image) as one struct of the union `columns` (name, kind).

    First the whole batch in one conversion in C (pyarrow reads each image dict by the fields'
    names: no transposition in Python), when the values are what the Arrow types take as they
    are; else (a value to coerce, a `text` column holding other than str) a column at a time."""
    if all(kind != "text" or _all_text(images, name) for name, kind in columns):
        try:
            array = pa.array(images, type=_struct_type(columns))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            pass
        else:
            assert isinstance(array, pa.StructArray)
            return array
    return _image_by_column(images, columns, version)


def _image_by_column(
    images: Sequence[Image], columns: Sequence[tuple[str, str]], version: Sequence[str]
) -> pa.StructArray:
    by_name = _transposed(images, version)
    if by_name is None:
        by_name = {name: [None if img is None else img.get(name) for img in images] for name, _ in columns}
    empty = [None] * len(images)
    arrays = [column_array(by_name.get(name, empty), kind) for name, kind in columns]
    fields = [pa.field(name, arrow_type(kind)) for name, kind in columns]
    mask = pa.array([img is None for img in images], type=pa.bool_())
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)


def names_array(images: Sequence[Image], version: Sequence[str], valid: pa.Array | None = None) -> pa.Array:
    """The columns each image carries (list<string>, null without an image). `valid`: which
    images there are (the images' struct array's `is_valid()`), when the caller has it."""
    n = len(version)
    if n and {len(img) for img in images if img is not None} <= {n}:
        # the same list for every image: offsets and one `take` instead of a list per row
        import numpy as np

        if valid is None:
            present = np.array([img is not None for img in images], dtype=np.bool_)
        else:
            present = valid.to_numpy(zero_copy_only=False)
        offsets = pa.array(np.concatenate([[0], np.cumsum(present * n)]).astype(np.int32))
        values = pa.array(list(version), type=pa.string()).take(
            pa.array(np.tile(np.arange(n), int(present.sum())))
        )
        return pa.ListArray.from_arrays(offsets, values, mask=pa.array(~present, type=pa.bool_()))
    return pa.array([None if img is None else list(img) for img in images], type=pa.list_(pa.string()))


def key_array(
    columns: Sequence[tuple[str, str]], key: Sequence[str], before: pa.StructArray, after: pa.StructArray
) -> pa.StructArray:
    """The key column from the images' struct arrays: the after image's values, else the before
    image's (a delete); NULL text for a key column the images do not have."""
    index = {name: i for i, (name, _) in enumerate(columns)}
    b, a = before.flatten(), after.flatten()
    arrays = [
        pc.coalesce(a[index[c]], b[index[c]]) if c in index else pa.nulls(len(before), arrow_type("text"))
        for c in key
    ]
    return pa.StructArray.from_arrays(arrays, names=list(key))


class ImageColumns:
    """One image side (before or after) of a batch of rows events' RowColumns (decoded with
    DecodeOptions.columnar, service.batch.changes): a list of values per union column, which rows
    have the image, and the image's columns per run of rows (RowColumns' names)."""

    __slots__ = ("values", "valid", "names")

    def __init__(self, columns: tuple[tuple[str, str], ...]) -> None:
        self.values: dict[str, list[Any]] = {name: [] for name, _ in columns}
        self.valid: list[bool] = []
        self.names: list[tuple[int, list[str] | None]] = []  # (rows, the image's columns or None)

    def extend(self, n: int, names: list[str] | None, values: list[list[Any]] | None) -> None:
        if names is None or values is None:
            self.valid.extend([False] * n)
            for column in self.values.values():
                column.extend([None] * n)
            self.names.append((n, None))
            return
        self.valid.extend([True] * n)
        given = dict(zip(names, values, strict=True))
        for name, column in self.values.items():
            v = given.get(name)
            column.extend([None] * n if v is None else v)
        self.names.append((n, names))

    def array(self, columns: tuple[tuple[str, str], ...]) -> pa.StructArray:
        """The images as image_array makes them from dicts (column_array per column)."""
        import numpy as np

        arrays = [column_array(self.values[name], kind) for name, kind in columns]
        fields = [pa.field(name, arrow_type(kind)) for name, kind in columns]
        mask = pa.array(~np.array(self.valid, dtype=np.bool_), type=pa.bool_())
        return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)

    def names_array(self, version: tuple[str, ...], valid: pa.Array) -> pa.Array:
        """As names_array from the images' dicts."""
        n = len(version)
        if n and all(names is None or len(names) == n for _, names in self.names):
            return names_array([], version, valid)  # every image's names are the version's
        rows: list[list[str] | None] = []
        for count, names in self.names:
            rows.extend([names] * count)
        return pa.array(rows, type=pa.list_(pa.string()))
