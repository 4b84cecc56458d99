"""`InPlaceConverter`: a fixed-width value's converter that can read it inside a larger buffer.

Called as `convert(raw)` on the value's own bytes, or as `convert(buf, at)` on a row image at
the value's offset: the compiled row reader (imagereader.py) skips a slice per value that way.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

__all__ = ["InPlaceConverter"]

T_co = TypeVar("T_co", covariant=True)


class InPlaceConverter(Protocol[T_co]):
    def __call__(self, raw: bytes, at: int = 0, /) -> T_co: ...
