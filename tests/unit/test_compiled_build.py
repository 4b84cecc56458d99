"""The unit tests (tests/unit) pass in the mypyc-compiled build too.

Why this exists: `python -m service.devtools.build_decoder` compiles service/binlog and the stream's
position tracker, assembler and packet splitter with mypyc, but the
rest of the suite runs whatever build the working tree holds (normally pure Python), so a bug
only the compiled build had (a hint missing from an error message) went unnoticed. This test
copies the sources into tmp_path, compiles them there (never in the shared working tree, whose
.so files others use) and runs tests/unit against the copy. It takes a minute or two.
It also checks that `pip install .` ships the build (the *.so files are package data; the
Dockerfile relies on that) and, from a copy without a build, the pure-Python one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).relative_to(ROOT).as_posix()
PACKAGES = ("binlog", "transport", "sink")  # the subpackages with compiled modules
NO_BUILD = shutil.ignore_patterns("*.so", "build", "__pycache__", ".mypy_cache")


def _missing_toolchain() -> str | None:
    if not (shutil.which("cc") or shutil.which("gcc")):
        return "no C compiler (cc/gcc) on PATH"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (Python.h)"
    return None


@pytest.mark.skipif(_missing_toolchain() is not None, reason=str(_missing_toolchain()))
@pytest.mark.timeout(1800)
def test_unit_tests_pass_in_the_compiled_build(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "service", copy / "service", ignore=NO_BUILD)
    shutil.copytree(ROOT / "docs", copy / "docs")  # test_binlog_docs reads docs/decoder.md
    shutil.copytree(ROOT / "tests/unit", copy / "tests/unit", ignore=NO_BUILD)
    shutil.copytree(ROOT / "tests/fixtures", copy / "tests/fixtures", ignore=NO_BUILD)
    shutil.copy2(ROOT / "tests/conftest.py", copy / "tests/conftest.py")
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    shutil.copy2(ROOT / "README.md", copy / "README.md")  # pyproject's readme, for `pip install`
    # The copy's `service` must win over the editable install of ROOT (cwd alone does not cover
    # the subprocesses the tests start from other directories).
    env = {**os.environ, "PYTHONPATH": str(copy)}

    def run(*args: str, timeout: float) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"{args} failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
        return done.stdout

    check = "import service, service.devtools.build_decoder as b; print(service.__file__, b.is_compiled())"

    def install(target: Path) -> list[str]:
        """`pip install` the copy (no dependencies) into target; import it from another directory."""
        run("-m", "pip", "install", "-q", "--no-deps", "--target", str(target), ".", timeout=300)
        probe = f"{check}; import service.transport.pump as p; print(p.__file__)"
        target_env = {**os.environ, "PYTHONPATH": str(target)}
        done = subprocess.run(
            [sys.executable, "-P", "-c", probe],
            cwd=tmp_path,
            env=target_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr[-6000:]
        return done.stdout.split()

    pure = tmp_path / "pure"  # installed before the build: no .so, the pure-Python build
    assert install(pure) == [f"{pure}/service/__init__.py", "False", f"{pure}/service/transport/pump.py"]
    run("-m", "service.devtools.build_decoder", timeout=900)
    assert run("-c", check, timeout=60).split() == [str(copy / "service" / "__init__.py"), "True"]
    built = sorted(so.relative_to(copy).as_posix() for so in copy.glob("service/**/*.so"))
    assert {so.rsplit("/", 1)[0] for so in built} == {"service", *(f"service/{p}" for p in PACKAGES)}
    installed = tmp_path / "installed"  # the Dockerfile's `pip install .` after the build
    assert install(installed)[:2] == [f"{installed}/service/__init__.py", "True"]
    assert sorted(so.relative_to(installed).as_posix() for so in installed.glob("service/**/*.so")) == built
    out = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit", f"--ignore={THIS}", timeout=1500)
    assert " passed" in out and " failed" not in out, out[-3000:]
