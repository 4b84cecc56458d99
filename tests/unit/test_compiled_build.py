"""Both builds pass the unit tests, and installs get the compiled one without needing a compiler.

`make` compiles the decoder in place (service/devtools/build_decoder.py; the *.so next to their
.py), so the suite normally runs the compiled build; the pure-Python source stays the reference,
and `test_unit_tests_pass_in_the_pure_build` runs tests/unit against a copy of the sources without
the *.so. When the working tree is pure instead (`make pure`, no compiler), the wheel test runs
tests/unit against the wheel's compiled modules. Whichever build the suite did not run, one test
here runs the unit tests in it (a minute or two), never both.

The wheel test is the CI wheel build: `pip wheel .` (setup.py compiles with mypyc) must hold every
compiled module, and install and import compiled in a fresh venv with no C compiler on PATH.
Everything happens in tmp_path: never in the shared working tree, whose .so files others use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from service.devtools import build_decoder

pytestmark = pytest.mark.build  # minutes: out of `make check`

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).relative_to(ROOT).as_posix()
NO_BUILD = shutil.ignore_patterns("*.so", "build", "dist", "__pycache__", ".mypy_cache", "*.egg-info")
TREE_COMPILED = build_decoder.is_compiled()  # the build the rest of the suite runs
# whether the decoder runs compiled, and where a compiled stream module came from
PROBE = (
    "import service.devtools.build_decoder as b, service.transactions as t; "
    "print(b.is_compiled(), t.__file__)"
)


def _copy(tmp_path: Path) -> Path:
    """The sources, the unit tests and their fixtures, without any build output."""
    copy = tmp_path / "repo"
    for tree in ("service", "api", "docs", "tests/unit", "tests/fixtures"):  # docs: test_binlog_docs
        shutil.copytree(ROOT / tree, copy / tree, ignore=NO_BUILD)
    (copy / "deploy").mkdir()
    for name in (
        "tests/conftest.py",
        "tests/server_markers.py",  # the conftest's marker rule
        "tests/fixture_changes.py",  # the sink tests' vectors
        "pyproject.toml",
        "constraints.txt",
        "setup.py",
        "README.md",
        "deploy/binlog-mirror.example.toml",  # test_settings_doc
    ):
        shutil.copy2(ROOT / name, copy / name)
    return copy


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return done.stdout + done.stderr


def _unit_tests(copy: Path) -> None:
    # The copy's `service` must win over the editable install of ROOT (cwd alone does not cover
    # the subprocesses the tests start from other directories).
    env = {**os.environ, "PYTHONPATH": str(copy)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit", f"--ignore={THIS}"]
    out = _run(cmd, copy, env, timeout=1500)
    assert " passed" in out and " failed" not in out, out[-3000:]


def _probe(python: str, path: Path, env: dict[str, str] | None = None) -> list[str]:
    env = {**(env or os.environ), "PYTHONPATH": str(path)}
    return _run([python, "-P", "-c", PROBE], path.parent, env, timeout=120).split()


@pytest.mark.skipif(not TREE_COMPILED, reason="the working tree is pure: the whole suite ran the pure build")
@pytest.mark.timeout(1800)
def test_unit_tests_pass_in_the_pure_build(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    assert _probe(sys.executable, copy) == ["False", f"{copy}/service/transactions.py"]
    _unit_tests(copy)


@pytest.mark.skipif(
    build_decoder.pure_build_reason() is not None,
    reason=f"cannot compile: {build_decoder.pure_build_reason()}",
)
@pytest.mark.timeout(1800)
def test_the_wheel_carries_the_compiled_build_and_installs_without_a_compiler(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), "."],
        copy,
        dict(os.environ),
        1500,
    )
    (wheel,) = dist.glob("*.whl")
    assert "-none-any" not in wheel.name, wheel.name  # tagged for this interpreter and platform
    with zipfile.ZipFile(wheel) as whl:
        built = sorted(n for n in whl.namelist() if n.endswith(".so"))
        modules = {n.split(".", 1)[0] for n in built}
        # one extension per compiled source, plus mypyc's shared runtime library
        assert modules - {m.removesuffix(".py") for m in build_decoder.compiled_modules()} == {
            build_decoder.GROUP.replace(".", "/") + "__mypyc"
        }, built
        assert len(built) == len(build_decoder.compiled_modules()) + 1, built

        # A fresh venv whose PATH has no compiler: the wheel installs and imports compiled.
        venv = tmp_path / "fresh"
        _run([sys.executable, "-m", "venv", str(venv)], tmp_path, dict(os.environ), 300)
        env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path)}
        assert shutil.which("gcc", path=env["PATH"]) is None and shutil.which("cc", path=env["PATH"]) is None
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--no-index", str(wheel)]
        _run(pip, tmp_path, env, 300)
        probe = [str(venv / "bin" / "python"), "-P", "-c", PROBE]
        out = _run(probe, tmp_path, env, 120).split()
        assert out[0] == "True" and out[1].endswith(".so") and out[1].startswith(str(venv)), out

        if not TREE_COMPILED:  # the suite ran pure: run the unit tests against the wheel's build
            for name in built:
                whl.extract(name, copy)
            assert _probe(sys.executable, copy)[0] == "True"
            _unit_tests(copy)


@pytest.mark.timeout(900)
def test_without_a_compiler_pip_installs_the_pure_build_with_one_warning(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    target = tmp_path / "target"
    # PATH has this venv's python and pip, and no C compiler; CC names none either.
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "CC": "no-such-cc"}
    pip = [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--target", str(target), "."]
    out = _run(pip, copy, env, 900)
    warnings = [line for line in out.splitlines() if "WARNING: binlog-mirror:" in line]
    assert len(warnings) == 1 and "no C compiler (no-such-cc)" in warnings[0], warnings
    assert not list(target.glob("service/**/*.so"))
    assert _probe(sys.executable, target) == ["False", f"{target}/service/transactions.py"]
