"""The unit tests (tests/unit) pass in the mypyc-compiled build too.

Why this exists: `python -m service.build_decoder` compiles service/binlog and the stream's
position tracker, assembler and packet splitter with mypyc, but the
rest of the suite runs whatever build the working tree holds (normally pure Python), so a bug
only the compiled build had (a hint missing from an error message) went unnoticed. This test
copies the sources into tmp_path, compiles them there (never in the shared working tree, whose
.so files others use) and runs tests/unit against the copy. It takes a minute or two.
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
    # The copy's `service` must win over the editable install of ROOT (cwd alone does not cover
    # the subprocesses the tests start from other directories).
    env = {**os.environ, "PYTHONPATH": str(copy)}

    def run(*args: str, timeout: float) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"{args} failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
        return done.stdout

    run("-m", "service.build_decoder", timeout=900)
    check = "import service, service.build_decoder as b; print(service.__file__, b.is_compiled())"
    assert run("-c", check, timeout=60).split() == [str(copy / "service" / "__init__.py"), "True"]
    out = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit", f"--ignore={THIS}", timeout=1500)
    assert " passed" in out and " failed" not in out, out[-3000:]
