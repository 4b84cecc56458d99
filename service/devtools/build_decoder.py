"""The compiled build: service.binlog, and the stream's and the sink's per-event layers around it
(STREAM_MODULES), compiled with mypyc.

`pip install .` and wheels build these modules (setup.py calls `extensions()`); this script builds
them in place for a source checkout (`make`'s venv, `make fast`):

    python -m service.devtools.build_decoder               # build (about 60 s on 2 cores)
    python -m service.devtools.build_decoder --if-possible # the same, or one warning and pure Python
    python -m service.devtools.build_decoder --clean       # remove the compiled modules
    python service/devtools/build_decoder.py --list        # the compiled sources (the Makefile's)

It lives outside service/binlog on purpose (in service/devtools, with the other dev tooling):
running it must not import that package, whose stale compiled modules may no longer match its
sources; setup.py loads this file by path, so it imports nothing from service at module level.
Without a C compiler or Python's headers, or with BINLOG_MIRROR_COMPILE=0, the build is pure.

The build writes one extension module next to each compiled .py (*.so, git-ignored) and
Python imports it instead of the .py. The .py files stay the reference and the fallback:
without a build, or after --clean, the same code runs interpreted.
Rebuild (or clean) after editing any compiled module, or the stale .so keeps running.
tests/unit/test_compiled_build.py runs the unit tests against a fresh build.

Not compiled, on purpose:
  rawevent.py              RawEvent subclasses bytes, which native classes cannot
  utctext.py               UtcText subclasses str, likewise
  files.py                 its generators hold an open file: a compiled generator that is
                           dropped unfinished is not closed, so the file would leak
  jsonb.py                 JsonNull's class-level singleton is not a native-class pattern
  __init__.py
Row images are read by imagereader.StepReader in the compiled build (rows.py's exec()-generated
readers would stay interpreted: exec'd code is never compiled).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sysconfig
from pathlib import Path
from typing import Any

__all__ = [
    "PURE_REQUESTED",
    "compiled_modules",
    "extensions",
    "fallback_warning",
    "is_compiled",
    "main",
    "pure_build_reason",
]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "service" / "binlog"
INTERPRETED = frozenset({"__init__.py", "rawevent.py", "files.py", "jsonb.py", "utctext.py"})
# The per-event and per-row layers around the decoder (pure code, no I/O): packet splitting, the
# event pump, the position tracker, the transaction assembler and the queue of the stream; the
# Redis sink's planner and its derived entries; the JSON lines of `decode`.
STREAM_MODULES = (
    "service/checkpoint.py",
    "service/gtids.py",
    "service/jsonlines.py",
    "service/queues.py",
    "service/transactions.py",
    "service/transport/packets.py",
    "service/transport/pump.py",
    "service/sink/codec.py",
    "service/sink/derive.py",
    "service/sink/keys.py",
    "service/sink/marks.py",
    "service/sink/plain.py",
    "service/sink/plan.py",
    "service/sink/tablework.py",
    "service/sink/values.py",
)
GROUP = "service.binlog._mypyc"  # the shared runtime library lands in service/binlog/ too

PURE_REQUESTED = "BINLOG_MIRROR_COMPILE=0"

log = logging.getLogger(__name__)


def compiled_modules() -> list[str]:
    """Paths (relative to the repository root) of the modules mypyc compiles."""
    core = [str(p.relative_to(ROOT)) for p in PACKAGE.glob("*.py") if p.name not in INTERPRETED]
    return sorted(core) + list(STREAM_MODULES)


def is_compiled() -> bool:
    """True when the decoder runs from a mypyc build."""
    from service.binlog import decoder

    return not (decoder.__file__ or "").endswith(".py")


def pure_build_reason() -> str | None:
    """Why this machine builds pure Python, or None when it can compile."""
    if os.environ.get("BINLOG_MIRROR_COMPILE", "1") == "0":
        return PURE_REQUESTED
    # The compiler setuptools will call: $CC, else the one Python was built with.
    cc = (os.environ.get("CC") or str(sysconfig.get_config_var("CC") or "cc")).split()
    if not cc or not shutil.which(cc[0]):
        return f"no C compiler ({cc[0] if cc else 'CC'}) on PATH"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (Python.h; the python3-dev package)"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypy (mypyc) is not installed"
    return None


def fallback_warning(reason: str) -> str:
    return (
        f"binlog-mirror: {reason}: building the pure-Python decoder (about half the speed; "
        "`binlog-mirror --version` says which build runs)"
    )


def extensions() -> list[Any]:
    """The setuptools extension modules of the compiled build (mypyc type-checks the sources)."""
    from mypyc.build import mypycify

    os.chdir(ROOT)  # mypyc names modules after paths relative to the working directory
    # Errors in the modules it only follows (settings, the transport's connection) are not its
    # business, and in pip's isolated build environment their libraries (pydantic, pymysql) are
    # absent: reported, they would fail every `pip install`.
    paths = ["--follow-imports=silent", *compiled_modules()]
    return list(mypycify(paths, opt_level="3", group_name=GROUP, target_dir="build/mypyc"))


def build() -> None:
    from setuptools import setup

    setup(
        name="binlog-mirror-binlog-compiled",
        ext_modules=extensions(),
        script_args=["build_ext", "--inplace", "--build-temp", "build/mypyc/temp"],
    )


def clean() -> None:
    stream = [(ROOT / m).with_suffix("") for m in STREAM_MODULES]
    for path in [*PACKAGE.glob("*.so"), *(so for m in stream for so in m.parent.glob(m.name + ".*.so"))]:
        path.unlink()
        log.info("removed %s", path.relative_to(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--clean", action="store_true", help="remove the compiled modules")
    what.add_argument(
        "--if-possible",
        action="store_true",
        help="without a C compiler (or with BINLOG_MIRROR_COMPILE=0), warn once and leave pure Python",
    )
    what.add_argument("--list", action="store_true", help="print the compiled modules' sources")
    args = parser.parse_args()
    if args.list:
        print("\n".join(compiled_modules()))  # noqa: T201
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    clean()  # never leave a stale .so from an older source behind
    if args.clean:
        return
    reason = pure_build_reason() if args.if_possible else None
    if reason is None:
        build()
    elif reason != PURE_REQUESTED:
        log.warning("WARNING: %s", fallback_warning(reason))


if __name__ == "__main__":
    main()
