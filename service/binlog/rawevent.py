"""`RawEvent`: one whole event's bytes that know where they sit in their file.

A module of its own, left interpreted by the optional mypyc build (service/devtools/build_decoder.py):
a compiled (native) class cannot subclass bytes. `read_binlog_file` (files.py) is compiled.
"""

from __future__ import annotations

__all__ = ["RawEvent"]


class RawEvent(bytes):
    """One whole event's bytes, plus `offset`: where it starts in its file.

    A bytes subclass, so it can be passed straight to BinlogDecoder.feed(), which
    picks the offset up."""

    offset: int
    file: str

    def __new__(cls, data: bytes, offset: int, file: str = "") -> RawEvent:
        obj = super().__new__(cls, data)
        obj.offset = offset
        obj.file = file
        return obj
