"""Installs are what was tested: the venv the suite runs in holds exactly constraints.txt's
versions (make, .ci/run and the Dockerfile install with it), and those versions are inside
pyproject.toml's ranges. `make test-latest` runs the suite on the newest allowed versions
instead (BINLOG_MIRROR_UNLOCKED=1 skips the first check there)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import sysconfig
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not name==version"
            out[_name(name)] = version
    return out


@pytest.mark.skipif(
    os.environ.get("BINLOG_MIRROR_UNLOCKED") == "1", reason="make test-latest: newer versions on purpose"
)
def test_the_installed_versions_are_the_locked_ones() -> None:
    locked = _locked()
    # the venv's site-packages only: sys.path may hold more once a test imported setuptools (its
    # vendored packages) or pyspark
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {
        _name(d.metadata["Name"]): d.version
        for d in importlib.metadata.distributions(path=site)
        if _name(d.metadata["Name"]) != "binlog-mirror"
    }
    drift = {n: (locked.get(n, "not locked"), v) for n, v in sorted(installed.items()) if locked.get(n) != v}
    assert not drift, (
        f"the venv differs from constraints.txt (locked, installed): {drift}; reinstall it "
        "(make clean && make), or to take newer versions: make test-latest, then make lock"
    )


def test_the_locked_versions_are_inside_the_ranges() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *(r for extra in project["project"]["optional-dependencies"].values() for r in extra),
    ]
    locked = _locked()
    for spec in wanted:
        req = Requirement(spec)
        assert _name(req.name) in locked, f"{req.name} is not in constraints.txt"
        assert req.specifier.contains(locked[_name(req.name)], prereleases=True), (
            spec,
            locked[_name(req.name)],
        )
