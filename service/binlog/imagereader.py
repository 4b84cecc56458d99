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

from service.binlog.inplace import InPlace, InPlaceConverter, IntConvert
from service.binlog.values import FixedSpec, VarSpec

__all__ = ["COMPILED", "ColumnStep", "StepReader"]

COMPILED: Final = not __file__.endswith(".py")

# Step kinds
NULL: Final = 0  # SQL NULL: no bytes
INT: Final = 1  # little-endian integer of `size` bytes, then `convert`
FLOAT: Final = 2  # FLOAT/DOUBLE through `unpack`, then `convert`
BYTES: Final = 3  # `size` raw bytes, then `convert`
VAR: Final = 4  # 1- to 4-byte length prefix, then text `codec` / `convert` / raw bytes


class ColumnStep:
    """How to read one column of one row-image pattern."""

    __slots__ = ("name", "kind", "size", "signed", "wrap", "convert", "int_native", "in_place", "native",
                 "unpack", "codec", "keyed")  # fmt: skip

    def __init__(self, name: str, spec: FixedSpec | VarSpec | None) -> None:
        self.name = name
        self.kind = NULL
        self.size = 0
        self.signed = False
        self.wrap = 0  # a signed integer whose top bit is set is negative: value - wrap
        self.convert: Callable[[Any], Any] | None = None
        self.int_native: IntConvert | None = None  # `convert` when a class: `apply` called natively
        self.in_place: InPlaceConverter[Any] | None = None  # BYTES converted without a slice
        self.native: InPlace | None = None  # the same, when a class whose `read` is called natively
        self.unpack: Callable[[bytes, int], tuple[Any, ...]] | None = None
        self.codec = ""
        # an UPDATE compares this column's raw form between its images (StepReader.read)
        self.keyed = False
        if isinstance(spec, FixedSpec):
            self.size, self.convert = spec.size, spec.convert
            if spec.code.endswith("s"):
                self.kind, self.in_place = BYTES, spec.in_place
                if isinstance(spec.in_place, InPlace):
                    self.native = spec.in_place
            elif spec.code in ("f", "d"):
                self.kind, self.unpack = FLOAT, struct.Struct("<" + spec.code).unpack_from
            else:
                self.kind = INT
                if isinstance(spec.convert, IntConvert):
                    self.int_native = spec.convert
                if spec.code.islower():
                    self.signed, self.wrap = True, 1 << (self.size * 8)
            self.keyed = spec.convert is not None  # fixed-width values are all immutable
        elif isinstance(spec, VarSpec):  # every VarSpec has a length prefix of 1 to 4 bytes
            self.kind, self.size, self.convert, self.codec = VAR, spec.prefix, spec.convert, spec.codec or ""
            self.keyed = spec.immutable and (spec.convert is not None or spec.codec is not None)


class StepReader:
    """Callable (buf, pos) -> (row dict, position after the row)."""

    __slots__ = ("steps", "template")

    def __init__(self, steps: list[ColumnStep]) -> None:
        self.steps = steps
        # Rows start as a copy of this: one allocation of the final size, no resize as the
        # values go in (a dict grown from empty resizes at its sixth key).
        self.template: dict[str, Any] = dict.fromkeys(step.name for step in steps)

    def __call__(self, buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        return self.read(buf, pos, None, None, None)

    def read(
        self,
        buf: bytes,
        pos: int,
        keys: list[object] | None,
        before_keys: list[object] | None,
        before: dict[str, Any] | None,
    ) -> tuple[dict[str, Any], int]:
        """Read one image. For an UPDATE whose two images have the same columns: `keys`
        collects each column's raw form (bytes or int; None when not worth comparing) while
        the before image is read; given as `before_keys` when the after image is read, a
        converted value whose raw form is unchanged is taken from `before` instead of being
        converted again (only immutable values: str, int, Decimal, datetime...). Most UPDATEs
        change few columns, and the converters (DECIMAL, DATETIME, text) are the row's cost."""
        row = self.template.copy()
        k = -1
        for step in self.steps:
            k += 1
            kind = step.kind
            value: Any = None
            key: object = None
            if kind == INT:
                size = step.size
                if size == 4:  # INT, and TINYINT/ENUM/YEAR below: most integer columns, inlined
                    value = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16 | buf[pos + 3] << 24
                elif size == 1:
                    value = buf[pos]
                else:
                    value = _uint(buf, pos, size)
                pos += size
                if step.signed and buf[pos - 1] & 0x80:  # the top byte's top bit: no wide compare
                    value -= step.wrap
                if step.keyed:
                    key = value
            elif kind == VAR:
                if step.size == 1:
                    start = pos + 1
                    pos = start + buf[pos]
                elif step.size == 2:
                    start = pos + 2
                    pos = start + (buf[pos] | buf[pos + 1] << 8)
                else:
                    start = pos + step.size
                    pos = start + _uint(buf, pos, step.size)
                value = buf[start:pos]
                if step.keyed:
                    key = value
            elif kind == BYTES:
                end = pos + step.size
                if end > len(buf):
                    raise IndexError("fixed-width value runs past the row data")
                if keys is None and before_keys is None:  # no raw form needed: no slice
                    native = step.native
                    if native is not None:
                        row[step.name] = native.read(buf, pos)
                        pos = end
                        continue
                    in_place = step.in_place
                    if in_place is not None:
                        row[step.name] = in_place(buf, pos)
                        pos = end
                        continue
                value = buf[pos:end]
                pos = end
                if step.keyed:
                    key = value
            elif kind == FLOAT:
                assert step.unpack is not None
                value = step.unpack(buf, pos)[0]
                pos += step.size
            # else NULL: no bytes, value None
            if keys is not None:
                keys.append(key)
            elif key is not None and before_keys is not None and before is not None and before_keys[k] == key:
                row[step.name] = before[step.name]
                continue
            codec = step.codec
            if codec:  # text decoded inline; `convert` replaces invalid bytes and counts them
                raw: bytes = value
                try:
                    # A literal "utf-8" compiles to a direct UTF-8 decode (no codec lookup, no
                    # method call): utf8mb4 and utf8mb3 are most text columns.
                    row[step.name] = raw.decode("utf-8") if codec == "utf-8" else raw.decode(codec)
                    continue
                except UnicodeDecodeError:
                    pass
            convert = step.convert
            if convert is None:
                row[step.name] = value
            else:
                int_native = step.int_native
                row[step.name] = convert(value) if int_native is None else int_native.apply(value)
        return row, pos


def _uint(buf: bytes, pos: int, size: int) -> int:
    if size == 4:
        return buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16 | buf[pos + 3] << 24
    if size == 1:
        return buf[pos]
    if size == 2:
        return buf[pos] | buf[pos + 1] << 8
    if size == 8:  # BIGINT: two 4-byte halves (int.from_bytes costs a slice and a method call)
        low = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16 | buf[pos + 3] << 24
        return low | (buf[pos + 4] | buf[pos + 5] << 8 | buf[pos + 6] << 16 | buf[pos + 7] << 24) << 32
    if pos + size > len(buf):
        raise IndexError("integer runs past the row data")
    return int.from_bytes(buf[pos : pos + size], "little")
