"""Build the mypyc-compiled decoder into every `pip install .` and wheel, when it can.

pyproject.toml holds the metadata; this file only adds the compiled extension modules (the list is
service/devtools/build_decoder.py's, shared with `make fast`). They are built inside `build_ext`,
not at import: pip runs this file several times (metadata, requirements) and mypyc type-checks
the sources each time it is called.

Falls back to the pure-Python build, with one warning, when there is no C compiler or Python
headers (or the compile fails); BINLOG_MIRROR_COMPILE=0 asks for the pure build. Editable installs
(`pip install -e`) stay pure: compiled modules in the source tree would shadow the .py being
edited (`make fast` builds them in place on purpose, and the Makefile rebuilds them on change).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_build_decoder", ROOT / "service/devtools/build_decoder.py")
assert _spec is not None and _spec.loader is not None
build_decoder: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_decoder)


class CompiledDistribution(Distribution):
    """Always a platform build, so build_ext runs and the wheel is tagged for this interpreter."""

    def has_ext_modules(self) -> bool:
        return True


class OptionalMypycBuild(build_ext):
    reason: str | None = None  # why this build is pure, or None

    def finalize_options(self) -> None:
        # The extensions are known before setuptools finalizes them (it annotates each one).
        if getattr(self, "editable_mode", False) or self.inplace:
            self.reason = "editable"  # pure for development; see the module docstring
        else:
            self.reason = build_decoder.pure_build_reason()
        if self.reason is None:
            try:
                self.distribution.ext_modules = build_decoder.extensions()
            except (Exception, SystemExit) as exc:  # mypyc refused the sources (it exits): ship pure
                self.reason = f"mypyc failed ({type(exc).__name__}: {str(exc)[:500]})"
        super().finalize_options()

    def run(self) -> None:
        if self.reason is None:
            try:
                super().run()
                return
            except Exception as exc:  # a failed compile: ship the pure build rather than nothing
                self.reason = f"the C compile failed ({type(exc).__name__}: {str(exc)[:500]})"
                self._remove_partial_outputs()
                self.extensions = []
        if self.reason not in ("editable", build_decoder.PURE_REQUESTED):
            sys.stderr.write(f"WARNING: {build_decoder.fallback_warning(self.reason)}\n")

    def _remove_partial_outputs(self) -> None:
        # A compiled module without the shared runtime library (or the other way round) fails to
        # import: leave no .so from a half-done build.
        for ext in self.extensions:
            Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)

    def get_outputs(self) -> list[str]:
        return super().get_outputs() if self.extensions else []


setup(distclass=CompiledDistribution, cmdclass={"build_ext": OptionalMypycBuild})
