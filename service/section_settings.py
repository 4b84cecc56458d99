"""A `[table."pattern"]` section as the settings read it (service/settings.py builds them;
service/shaping.py resolves them against the tables), and its fingerprint: recorded with the rows
written in its shape (`{prefix}:__shapes`), so that a start with other settings copies the table
again."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

__all__ = [
    "SHAPE_FORMAT",
    "IndexSettings",
    "SectionSettings",
    "TtlSettings",
    "section_fingerprint",
    "value_of",
]


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """One `[[table."pattern".index]]` entry."""

    kind: str  # unique | set | zset
    key: str  # its key template
    score: str | None = None  # zset: the column whose value is the score


@dataclass(frozen=True, slots=True)
class TtlSettings:
    """A section's `ttl` as settings read it: `at` a column, or `seconds`."""

    at: str | None = None
    seconds: int | None = None
    offset: int = 0  # seconds east of UTC of a DATETIME/DATE `at` column's wall time


@dataclass(frozen=True, slots=True)
class SectionSettings:
    """One `[table."pattern"]` section as settings read it (service.settings.TableShapeSettings)."""

    key: str | None = None
    columns: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    rename: tuple[tuple[str, str], ...] = ()
    indexes: tuple[IndexSettings, ...] = ()
    ttl: TtlSettings | None = None
    value: str | None = None  # "hash" | "json": the rows' form; None: the global value_mode


SHAPE_FORMAT = 1  # bumped when the same settings come to mean other rows


def section_fingerprint(section: SectionSettings) -> str:
    """`{format}:{16 hex}` of the section's settings (list order of columns/exclude/rename not
    counted: it changes no row)."""
    canon: dict[str, object] = {
        "key": section.key,
        "columns": sorted(section.columns) if section.columns is not None else None,
        "exclude": sorted(section.exclude),
        "rename": sorted(section.rename),
        "index": [[i.kind, i.key, i.score] for i in section.indexes],
    }
    if section.ttl is not None:  # (a section without one keeps the fingerprint it had)
        canon["ttl"] = [section.ttl.at, section.ttl.seconds, section.ttl.offset]
    digest = hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()[:16]
    # a `value` is named in the clear: a start that finds the rows in the other form empties the
    # table before copying it again (`value_of`)
    return f"{SHAPE_FORMAT}:{digest}" + (f":{section.value}" if section.value else "")


def value_of(fingerprint: str, json_mode: bool) -> str:
    """The value form ("hash"/"json") of rows written in the shape `fingerprint` ("" unshaped)."""
    named = fingerprint.split(":")[2:]
    return named[0] if named else "json" if json_mode else "hash"
