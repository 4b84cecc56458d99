"""Optional speed-up: compile service.binlog, and the stream's and the sink's per-event layers
around it (STREAM_MODULES), with mypyc, in place.

    python -m service.devtools.build_decoder            # build (about 60 s on 2 cores)
    python -m service.devtools.build_decoder --clean    # remove the compiled modules

It lives outside service/binlog on purpose (in service/devtools, with the other dev tooling):
running it must not import that package, whose stale compiled modules may no longer match its
sources.

The build writes one extension module next to each compiled .py (*.so, git-ignored) and
Python imports it instead of the .py. The .py files stay the reference and the fallback:
without a build, or after --clean, the same code runs interpreted.
Rebuild (or clean) after editing any compiled module, or the stale .so keeps running.
tests/unit/test_compiled_build.py runs the unit tests against a fresh build.

Not compiled, on purpose:
  rawevent.py              RawEvent subclasses bytes, which native classes cannot
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
from pathlib import Path

__all__ = ["compiled_modules", "is_compiled", "main"]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "service" / "binlog"
INTERPRETED = frozenset({"__init__.py", "rawevent.py", "files.py", "jsonb.py"})
# The per-event and per-row layers around the decoder (pure code, no I/O): packet splitting, the
# event pump, the position tracker, the transaction assembler and the queue of the stream; the
# Redis sink's planner.
STREAM_MODULES = (
    "service/checkpoint.py",
    "service/gtids.py",
    "service/queues.py",
    "service/transactions.py",
    "service/transport/packets.py",
    "service/transport/pump.py",
    "service/sink/keys.py",
    "service/sink/plan.py",
    "service/sink/values.py",
)
GROUP = "service.binlog._mypyc"  # the shared runtime library lands in service/binlog/ too

log = logging.getLogger(__name__)


def compiled_modules() -> list[str]:
    """Paths (relative to the repository root) of the modules mypyc compiles."""
    core = [str(p.relative_to(ROOT)) for p in PACKAGE.glob("*.py") if p.name not in INTERPRETED]
    return sorted(core) + list(STREAM_MODULES)


def is_compiled() -> bool:
    """True when the decoder runs from a mypyc build."""
    from service.binlog import decoder

    return not (decoder.__file__ or "").endswith(".py")


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    os.chdir(ROOT)  # mypyc names modules after paths relative to the working directory
    setup(
        name="binlog-mirror-binlog-compiled",
        ext_modules=mypycify(compiled_modules(), opt_level="3", group_name=GROUP, target_dir="build/mypyc"),
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
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    clean()  # never leave a stale .so from an older source behind
    if not args.clean:
        build()


if __name__ == "__main__":
    main()
