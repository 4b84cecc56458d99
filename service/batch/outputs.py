"""Where the batch jobs write: whether pyarrow can write a path itself, and its filesystem."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["output_root", "pyarrow_writes"]


def pyarrow_writes(path: str) -> bool:
    """Whether pyarrow can write under `path` (local, file:, and what its filesystems know: s3://,
    gs://, hdfs:// with libhdfs); else the output goes through Spark's Hadoop writers."""
    if "://" not in path:
        return True
    try:
        pafs.FileSystem.from_uri(path)
    except (pa.ArrowException, OSError):  # an unknown scheme, or a filesystem this build lacks
        return False
    return True


def output_root(path: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for an output path: local paths (and file:), or hdfs://, s3://, gs://."""
    if "://" not in path:
        path = os.path.abspath(path.removeprefix("file:"))
    fs, root = pafs.FileSystem.from_uri(path)
    return fs, str(root)
