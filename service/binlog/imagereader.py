"""`StepReader`: the row-image reader of the compiled (mypyc) build.

rows.py generates one straight-line Python function per row-image pattern with exec(): the
fastest form for the interpreter, but exec'd code is never compiled, so in a mypyc build
it was the slowest part of decoding. StepReader walks the same per-column plan in a
compiled loop: little-endian integers are assembled from the bytes without struct,
converters are called directly, nothing is generated. rows.py uses it when this module is
compiled (`COMPILED`); the tests run both builds.

Bounds: as with the generated readers, reads past the buffer raise IndexError (which
rows.py maps to TruncatedEvent) and callers check that each row ends inside the event.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from service.binlog.values import FixedSpec, VarSpec

__all__ = ["COMPILED", "ColumnStep", "StepReader"]

COMPILED: Final = not __file__.endswith(".py")

# Step kinds
NULL: Final = 0  # SQL NULL: no bytes
INT: Final = 1  # little-endian integer of `size` bytes, then `convert`
FLOAT: Final = 2  # FLOAT/DOUBLE through `unpack`, then `convert`
BYTES: Final = 3  # `size` raw bytes, then `convert`
VAR: Final = 4  # 1- or 2-byte length prefix, then text `codec` / `convert` / raw bytes
READ: Final = 5  # any other variable-length value: `read(buf, pos)`


class ColumnStep:
    """How to read one column of one row-image pattern."""

    __slots__ = ("name", "kind", "size", "signed", "convert", "unpack", "codec", "read")

    def __init__(self, name: str, spec: FixedSpec | VarSpec | None) -> None:
        self.name = name
        self.kind = NULL
        self.size = 0
        self.signed = False
        self.convert: Callable[[Any], Any] | None = None
        self.unpack: Callable[[bytes, int], tuple[Any, ...]] | None = None
        self.codec = ""
        self.read: Callable[[bytes, int], tuple[Any, int]] | None = None
        if isinstance(spec, FixedSpec):
            self.size, self.convert = spec.size, spec.convert
            if spec.code.endswith("s"):
                self.kind = BYTES
            elif spec.code in ("f", "d"):
                self.kind, self.unpack = FLOAT, struct.Struct("<" + spec.code).unpack_from
            else:
                self.kind, self.signed = INT, spec.code.islower()
        elif isinstance(spec, VarSpec):
            if spec.prefix in (1, 2):
                self.kind, self.size, self.convert, self.codec = (
                    VAR,
                    spec.prefix,
                    spec.convert,
                    spec.codec or "",
                )
            else:
                self.kind, self.read = READ, spec.read


class StepReader:
    """Callable (buf, pos) -> (row dict, position after the row)."""

    __slots__ = ("steps",)

    def __init__(self, steps: list[ColumnStep]) -> None:
        self.steps = steps

    def __call__(self, buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        row: dict[str, Any] = {}
        for step in self.steps:
            kind = step.kind
            value: Any = None
            if kind == INT:
                value = _uint(buf, pos, step.size)
                pos += step.size
                if step.signed and value >> (step.size * 8 - 1):
                    value -= 1 << (step.size * 8)
            elif kind == VAR:
                if step.size == 1:
                    start = pos + 1
                    pos = start + buf[pos]
                else:
                    start = pos + 2
                    pos = start + (buf[pos] | buf[pos + 1] << 8)
                raw = buf[start:pos]
                if step.codec:
                    try:
                        value = raw.decode(step.codec)
                    except UnicodeDecodeError:
                        value = step.convert(raw) if step.convert is not None else raw
                    row[step.name] = value
                    continue
                value = raw
            elif kind == BYTES:
                end = pos + step.size
                if end > len(buf):
                    raise IndexError("fixed-width value runs past the row data")
                value = buf[pos:end]
                pos = end
            elif kind == FLOAT:
                assert step.unpack is not None
                value = step.unpack(buf, pos)[0]
                pos += step.size
            elif kind == READ:
                assert step.read is not None
                value, pos = step.read(buf, pos)
                row[step.name] = value
                continue
            else:  # NULL
                row[step.name] = None
                continue
            convert = step.convert
            row[step.name] = value if convert is None else convert(value)
        return row, pos


def _uint(buf: bytes, pos: int, size: int) -> int:
    if size == 4:
        return buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16 | buf[pos + 3] << 24
    if size == 1:
        return buf[pos]
    if size == 2:
        return buf[pos] | buf[pos + 1] << 8
    if pos + size > len(buf):
        raise IndexError("integer runs past the row data")
    return int.from_bytes(buf[pos : pos + size], "little")
