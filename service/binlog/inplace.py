"""`InPlaceConverter`: a fixed-width value's converter that can read it inside a larger buffer.

Called as `convert(raw)` on the value's own bytes, or as `convert(buf, at)` on a row image at
the value's offset: the compiled row reader (imagereader.py) skips a slice per value that way.

`InPlace` is the base of the converters written as classes (the text converters of decimal.py
and temporaltext.py): in the compiled build the row reader calls their `read` natively, a C call
instead of the Python call protocol (argument parsing, a bound call) for every value.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

__all__ = ["InPlace", "InPlaceConverter", "IntConvert"]

T_co = TypeVar("T_co", covariant=True)


class InPlaceConverter(Protocol[T_co]):
    def __call__(self, raw: bytes, at: int = 0, /) -> T_co: ...


class InPlace:
    """An InPlaceConverter as a class: subclasses define `read(raw, at)`."""

    def read(self, raw: bytes, at: int) -> Any:
        raise NotImplementedError

    def __call__(self, raw: bytes, at: int = 0) -> Any:
        return self.read(raw, at)


class IntConvert:
    """An integer column's converter as a class (ENUM's member names): the compiled row reader
    calls `apply` natively, as InPlace's `read`."""

    def apply(self, value: int) -> Any:
        raise NotImplementedError

    def __call__(self, value: int) -> Any:
        return self.apply(value)
