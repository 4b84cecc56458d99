"""What build is running: the package version and whether the decoder runs compiled (mypyc)."""

from __future__ import annotations

from importlib import metadata

__all__ = ["compiled", "version"]


def version() -> str:
    try:
        return metadata.version("binlog-mirror")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def compiled() -> bool:
    """True when the decoder's extension modules are loaded (service/build_decoder.py builds them)."""
    from service.binlog import decoder

    return not (decoder.__file__ or "").endswith(".py")
