"""One source row against what the mirror stores for it: the comparison of `binlog-mirror verify`,
single-process (service/verify.py) and on Spark (service/batch/verify.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from service.sink.values import field_value, json_document

__all__ = ["compare_row", "expected_value"]


def expected_value(row: Mapping[str, Any], json_mode: bool) -> Any:
    """What the mirror stores for a source row: the hash's fields as HGETALL returns them, or the
    JSON document parsed."""
    if json_mode:
        return orjson.loads(json_document(row))
    out: dict[bytes, bytes] = {}
    for k, v in row.items():
        if v is not None:
            fv = field_value(v)
            out[k.encode()] = fv if isinstance(fv, bytes) else fv.encode()
    return out


def compare_row(
    row: Mapping[str, Any] | None, stored: Any, indexed: bool, json_mode: bool
) -> tuple[str, tuple[str, ...]] | None:
    """A source row (None: absent) against its stored value (HGETALL / GET reply) and whether
    its key is in `__keys`: None when equal, else (differs | missing | extra, differing fields).
    Shared with the distributed verify (service/batch/verify.py)."""
    present = bool(stored)
    if row is None:
        return ("extra", ()) if present or indexed else None
    if not present:
        return "missing", ()
    expected = expected_value(row, json_mode)
    if json_mode:
        try:
            got = orjson.loads(stored)
        except orjson.JSONDecodeError:
            return "differs", ("<document>",)
        if not isinstance(got, dict):
            return "differs", ("<document>",)
        expected_fields: Mapping[Any, Any] = expected
        got_fields: Mapping[Any, Any] = got
    else:
        expected_fields, got_fields = expected, stored
    names = sorted(
        _s(k) for k in set(expected_fields) | set(got_fields) if expected_fields.get(k) != got_fields.get(k)
    )
    if names:
        return "differs", tuple(names)
    if not indexed:
        return "differs", ("<not in __keys>",)
    return None


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
