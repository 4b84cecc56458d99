"""Truncated, bit-flipped and random events built from real binlogs: only DecodeError escapes,
within a deadline, and no example allocates more than MAX_PEAK (tracemalloc): a declared size
(event_size, a compressed length, a transaction payload's event sizes) must never be allocated
before the bytes that fill it have been seen."""

from __future__ import annotations

import contextlib
import tempfile
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from functools import cache
from pathlib import Path

import pytest
from binlog_text import FIXTURES, VECTORS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.binlog import BinlogDecoder, DecodeOptions, read_binlog_file
from service.binlog.files import MAX_EVENT_SIZE
from service.errors import DecodeError, InvalidValue, TruncatedEvent

MAX_PEAK = 64 << 20  # bytes allocated at once while decoding one mutated event or file

SOURCES = sorted(
    p
    for p in [
        *(VECTORS / "mysql-5.7").iterdir(),
        *(VECTORS / "mysql-8").iterdir(),
        *(FIXTURES / "mariadb-10.11").iterdir(),
    ]
    # undecodable-*: real bytes no reader can decode (their own test expects the error)
    if p.suffix not in (".md", ".sql") and p.stat().st_size < 100_000 and not p.name.startswith("undecodable")
)


@cache
def events_of(path: Path) -> list[bytes]:
    return [bytes(r) for r in read_binlog_file(path)]


def bounded(work: Callable[[], object]) -> int:
    """Run `work` (DecodeError allowed) and return the peak bytes it allocated; assert the bound."""
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
    else:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with contextlib.suppress(DecodeError):
            work()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not tracing:
            tracemalloc.stop()
    assert peak < MAX_PEAK, f"decoding allocated {peak / 2**20:.1f} MiB at once"
    return peak


def _drain(decoder: BinlogDecoder, raws: list[bytes]) -> None:
    for raw in raws:
        for _ in decoder.decode_events(raw):
            pass


def _run(prefix: list[bytes], victim: bytes, verify: bool) -> None:
    decoder = BinlogDecoder(DecodeOptions(verify_checksum=verify))
    _drain(decoder, prefix)
    bounded(lambda: _drain(decoder, [victim]))


def _decode_file(path: str) -> None:
    decoder = BinlogDecoder(file=path)
    for ev in read_binlog_file(path):
        for _ in decoder.decode_events(ev):
            pass


# Generous per-example deadline (an example takes milliseconds): it catches a hang or a
# runaway loop, not a slow machine.
DEADLINE = timedelta(seconds=2)
FUZZ = settings(max_examples=250, deadline=DEADLINE, suppress_health_check=[HealthCheck.too_slow])


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


@settings(max_examples=60, deadline=DEADLINE)
@given(st.sampled_from(SOURCES), st.data())
def test_corrupt_files(path: Path, data: st.DataObject) -> None:
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    if data.draw(st.booleans()):  # an event declaring a size its file does not hold
        offsets = [4]
        for ev in events_of(path)[:-1]:
            offsets.append(offsets[-1] + len(ev))
        at = data.draw(st.sampled_from(offsets)) + 9
        raw[at : at + 4] = data.draw(st.integers(19, MAX_EVENT_SIZE)).to_bytes(4, "little")
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    with tempfile.NamedTemporaryFile(suffix=".bin") as fh:
        fh.write(raw)
        fh.flush()
        bounded(lambda: _decode_file(fh.name))


def test_declared_sizes_are_not_allocated_up_front(tmp_path: Path) -> None:
    """The largest sizes the limits allow, declared by one field of a real event."""
    src = bytearray((VECTORS / "mysql-5.7" / "mysql-bin.checksum-none").read_bytes())
    src[4 + 9 : 4 + 13] = MAX_EVENT_SIZE.to_bytes(4, "little")  # the FDE's event_size: 1 GiB
    huge = tmp_path / "huge-event.000001"
    huge.write_bytes(src)
    with pytest.raises(TruncatedEvent, match="file ends inside an event"):
        _decode_file(str(huge))
    assert bounded(lambda: _decode_file(str(huge))) < 4 << 20
    # A MariaDB compressed rows event (log_bin_compress=ON): ONE byte changed, its compression
    # header 0x82 (zlib, 2-byte length) -> 0x84 (4-byte length), so it declares the next four
    # bytes, 0x04c4789c (~76 MiB) uncompressed bytes, and the zlib stream starts 2 bytes late.
    path = FIXTURES / "mariadb-10.11" / "04-compressed.000004"
    evs = events_of(path)
    i = next(k for k, ev in enumerate(evs) if ev[4] == 166)  # WRITE_ROWS_COMPRESSED_EVENT_V1
    victim = bytearray(evs[i])
    head = 19 + 8 + 1 + (victim[19 + 8] + 7) // 8  # post-header, column count, columns bitmap
    assert victim[head : head + 3] == bytes.fromhex("8204c4")
    victim[head] = 0x84
    decoder = BinlogDecoder(DecodeOptions(verify_checksum=False))
    _drain(decoder, evs[:i])
    with pytest.raises(InvalidValue):
        _drain(decoder, [bytes(victim)])
    assert bounded(lambda: _drain(decoder, [bytes(victim)])) < 4 << 20
