"""Truncated, bit-flipped and random events built from real binlogs: only DecodeError escapes."""

from __future__ import annotations

import contextlib
import tempfile
from functools import cache
from pathlib import Path

from binlog_text import FIXTURES, VECTORS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.binlog import BinlogDecoder, DecodeOptions, read_binlog_file
from service.errors import DecodeError

SOURCES = sorted(
    p
    for p in [
        *(VECTORS / "mysql-5.7").iterdir(),
        *(VECTORS / "mysql-8").iterdir(),
        *(FIXTURES / "mariadb-10.11").iterdir(),
    ]
    if p.suffix not in (".md", ".sql") and p.stat().st_size < 100_000
)


@cache
def events_of(path: Path) -> list[bytes]:
    return [bytes(r) for r in read_binlog_file(path)]


def _run(prefix: list[bytes], victim: bytes, verify: bool) -> None:
    decoder = BinlogDecoder(DecodeOptions(verify_checksum=verify))
    for raw in prefix:
        for _ in decoder.decode_events(raw):
            pass
    with contextlib.suppress(DecodeError):
        for _ in decoder.decode_events(victim):
            pass


FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.data())
def test_mutated_real_events(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(SOURCES))
    evs = events_of(path)
    i = data.draw(st.integers(1, len(evs) - 1))
    raw = bytearray(evs[i])
    kind = data.draw(st.sampled_from(["flip", "truncate", "splice"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            pos = data.draw(st.integers(0, len(raw) - 1))
            raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        if len(raw) >= 13 and data.draw(st.booleans()):
            raw[9:13] = len(raw).to_bytes(4, "little")  # keep the framing consistent
    else:
        pos = data.draw(st.integers(19, max(19, len(raw) - 1)))
        raw[pos:] = data.draw(st.binary(max_size=64))
        if len(raw) >= 13:
            raw[9:13] = len(raw).to_bytes(4, "little")
    _run(evs[:i], bytes(raw), verify=data.draw(st.booleans()))


@FUZZ
@given(st.sampled_from(SOURCES), st.binary(max_size=512), st.integers(0, 255))
def test_random_bodies(path: Path, body: bytes, type_code: int) -> None:
    evs = events_of(path)
    size = 19 + len(body)
    header = b"\x00\x00\x00\x00" + bytes([type_code]) + b"\x01\x00\x00\x00" + size.to_bytes(4, "little")
    header += (1000).to_bytes(4, "little") + b"\x00\x00"
    _run(evs[:1], header + body, verify=False)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SOURCES), st.data())
def test_corrupt_files(path: Path, data: st.DataObject) -> None:
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    with tempfile.NamedTemporaryFile(suffix=".bin") as fh:
        fh.write(raw)
        fh.flush()
        decoder = BinlogDecoder(file=fh.name)
        with contextlib.suppress(DecodeError):
            for ev in read_binlog_file(fh.name):
                for _ in decoder.decode_events(ev):
                    pass
