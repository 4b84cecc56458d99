"""The rule that keeps `make check` fast and honest: a test that starts a server carries the marker
that selects it (pytest -m). tests/conftest.py enforces it twice: a test that asks for a server
fixture needs its marker, and an audit hook refuses any process start of a server program in a
test without one (a server started by hand, a fixture of a module's own). Pure: no I/O."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["FIXTURE_MARKERS", "SERVER_MARKERS", "missing_markers", "started_programs"]

# A program a test may start -> the markers that allow it (any one of them).
SERVER_MARKERS: Mapping[str, frozenset[str]] = {
    "mariadbd": frozenset({"integration"}),
    "mysqld": frozenset({"integration"}),
    "mariadb-install-db": frozenset({"integration"}),
    "redis-server": frozenset({"redis", "integration"}),
    "spark-submit": frozenset({"spark"}),  # pyspark's JVM
    "run-driver": frozenset({"browser"}),  # Playwright's driver, which starts chromium
    "chromium": frozenset({"browser"}),
    "buildah": frozenset({"image"}),
    "mmdebstrap": frozenset({"image"}),
}

# A fixture that starts (or shares) a server -> the markers that allow a test to use it.
FIXTURE_MARKERS: Mapping[str, frozenset[str]] = {
    "stack": frozenset({"integration"}),
    "cluster_stack": frozenset({"integration"}),
    "redis_url": frozenset({"redis", "integration"}),
    "redis_cluster": frozenset({"redis", "integration"}),
    "spark": frozenset({"spark"}),
}


def started_programs(argv: object) -> set[str]:
    """The server programs a process start would run: any word of its argv (or shell command)
    whose base name is one, so `sh -c '"$@" ...' out /usr/sbin/mariadbd ...` counts too."""
    items: Iterable[object] = argv if isinstance(argv, list | tuple) else [argv]
    found = set()
    for item in items:
        text = os.fsdecode(item) if isinstance(item, bytes | os.PathLike) else str(item)
        for word in text.split():
            name = os.path.basename(word.strip("'\""))
            if name in SERVER_MARKERS:
                found.add(name)
    return found


def missing_markers(needs: Mapping[str, frozenset[str]], what: Iterable[str], markers: set[str]) -> list[str]:
    """What of `what` (programs or fixtures) `markers` do not allow, each with the markers that
    would: ["redis-server (mark it redis or integration)", ...]."""
    return [
        f"{name} (mark it {' or '.join(sorted(needs[name]))})"
        for name in sorted(set(what))
        if name in needs and not needs[name] & markers
    ]
