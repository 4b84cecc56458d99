"""`--tables` patterns that select nothing: a typo mirrors nothing, so say so.

Checked against the mirrored tables (the selected tables the source has, excluded ones left out)
at bootstrap and after each DDL pass; each pattern that matches none is logged as a WARNING
naming it, and listed in the status (`unmatched_tables` in GET /tables and GET /position).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from fnmatch import fnmatchcase

__all__ = ["UnmatchedPatterns"]

log = logging.getLogger(__name__)


class UnmatchedPatterns:
    def __init__(self, patterns: Iterable[str]) -> None:
        self._patterns = tuple(patterns)
        self.current: tuple[str, ...] = ()  # patterns that matched nothing at the last check

    def check(self, tables: Iterable[tuple[str, str]], when: str) -> None:
        names = [f"{s}.{t}" for s, t in tables]
        self.current = tuple(p for p in self._patterns if not any(fnmatchcase(n, p) for n in names))
        for pattern in self.current:
            log.warning(
                "--tables pattern %r matches no table of the source (%s): nothing is mirrored for it",
                pattern,
                when,
                extra={"pattern": pattern},
            )
