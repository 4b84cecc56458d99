"""The jobs' local side, without a JVM: when a job may run on this machine instead of Spark
(`local_paths`), and its output written under a temporary name there (`staged_local`). Used by
`compact` (service.batch.compact_arrow) and `replay` (service.batch.replay_local); kept apart from
them so that a replay does not import numpy and pyarrow.compute for these two functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pyarrow.fs as pafs

from service.batch.changes import output_root, pyarrow_writes
from service.errors import ConfigError

__all__ = ["local_paths", "staged_local"]


def local_paths(master: str, *paths: str) -> bool:
    """Whether `replay`, `compact` and `load` can run without a JVM: a local master (the work runs on this
    machine anyway) and paths pyarrow reads and writes."""
    return (master == "local" or master.startswith("local[")) and all(pyarrow_writes(p) for p in paths)


@contextlib.contextmanager
def staged_local(out: str, *, overwrite: bool) -> Iterator[str]:
    """session.staged_output on a path pyarrow writes (no JVM): `<out>.__tmp__` (in `out`'s form:
    a local path or a URI) to write to, renamed to `out` when the block ends without error and
    deleted when it fails; one left by a killed run is deleted first."""
    out = out.rstrip("/")
    fs, root = output_root(out)
    if fs.get_file_info(root).type != pafs.FileType.NotFound and not overwrite:
        raise ConfigError(f"{out} exists: pass --overwrite to replace it")
    tmp = f"{root}.__tmp__"
    if fs.get_file_info(tmp).type != pafs.FileType.NotFound:
        fs.delete_dir(tmp)  # left by a run that was killed
    try:
        yield f"{out}.__tmp__"
    except BaseException:
        if fs.get_file_info(tmp).type != pafs.FileType.NotFound:
            fs.delete_dir(tmp)
        raise
    if fs.get_file_info(root).type != pafs.FileType.NotFound:
        fs.delete_dir(root)
    fs.move(tmp, root)
