"""`record`: the decorator of the decoder's value classes (events, headers, row changes).

A record is a slotted dataclass that type checkers treat as frozen (`dataclass_transform`
with `frozen_default=True`: mypy rejects any assignment to a field), with equality, repr,
hashing and `dataclasses.replace` as `@dataclass(frozen=True, slots=True)` gives them.

Why not `frozen=True` at run time: a frozen dataclass must store each field through
`object.__setattr__` (its own __setattr__ refuses), which makes construction about three
times dearer (EventHeader: 0.65 µs -> 0.22 µs; RowChange: 0.62 µs -> 0.22 µs), and the
decoder builds one header per event and one RowChange per row. Immutability is enforced
where it is cheap: by mypy --strict on all of service/ and api/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

__all__ = ["record"]

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def record(*, eq: bool = True) -> Callable[[type[T]], type[T]]:
    """Class decorator: `@record()` (or `@record(eq=False)` for identity equality and hash)."""

    def wrap(cls: type[T]) -> type[T]:
        # unsafe_hash: the field-based __hash__ a frozen dataclass would get (eq=False keeps
        # identity hashing, as frozen dataclasses do).
        return dataclass(slots=True, eq=eq, unsafe_hash=eq)(cls)

    return wrap
