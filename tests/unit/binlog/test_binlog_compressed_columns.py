"""MariaDB `COMPRESSED` columns (types 140 BLOB_COMPRESSED and 141 VARCHAR_COMPRESSED) on the real
bytes of fixture 10-compressed-columns (tests/fixtures/make_mariadb_binlogs.py): the values the
generator inserted, updated and deleted; the stored forms mariadb-binlog prints (so compression
really happened: raw deflate and zlib-wrapped, 1- to 3-byte original lengths, values stored
as is); and corrupted compressed values, which are `InvalidValue` naming the column. The
row-for-row comparison with mariadb-binlog is test_binlog_vs_mariadb_binlog.py."""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from binlog_text import FIXTURES, compressed_stored_values, uncompress_stored

from service.binlog import BinlogDecoder, ColumnType, Op, RowChange, RowsEvent, canonical, read_binlog_file
from service.errors import InvalidValue

PATH = FIXTURES / "mariadb-10.11" / "10-compressed-columns.000010"
RAWS = [bytes(raw) for raw in read_binlog_file(PATH)]

NAMES = ("vcz", "vc", "vcz_latin", "vbz", "tbz", "blz", "bl", "mbz", "lbz", "ttz", "txz", "mtz", "ltz")
TEXT = {"vcz", "vc", "vcz_latin", "ttz", "txz", "mtz", "ltz"}


def _sha512(*seeds: str) -> bytes:
    return b"".join(hashlib.sha512(s.encode()).digest() for s in seeds)


def _row(id_: int, **values: Any) -> dict[str, Any]:
    return {"id": id_, **{n: values.get(n) for n in NAMES}}


ROW1 = _row(1, vcz="short é", vc="plain", vcz_latin="déjà vu", vbz=b"\x00\xff\x01", tbz=b"\x00",
            blz=b"\xde\xad\xbe\xef", bl=b"\x01", mbz=b"small", lbz=b"long", ttz="tiny", txz="short é",
            mtz="😀 medium 🐬", ltz="long 😀")  # fmt: skip
ROW2 = _row(2, vcz="compressed " * 30, vc="z" * 20, vcz_latin="é" * 150, vbz=b"ab" * 150, tbz=b"\x7f" * 200,
            blz=b"blob " * 1000, bl=b"b" * 300, mbz=b"0123456789" * 7000, lbz=b"long blob " * 2000,
            ttz="t" * 255, txz="Zürich " * 500, mtz="😀🐬" * 300, ltz="utf8mb4 😀 text " * 1000)  # fmt: skip
ROW3 = _row(3, **{n: "" if n in TEXT else b"" for n in NAMES})
ROW4 = _row(4)
ROW5 = _row(5, vcz="😀" * 100, vbz=_sha512("a", "b", "c"), blz=_sha512("d", "e", "f", "g"), mbz=b"x" * 99)
ROW6 = _row(6, vcz="wrapped " * 20, blz=b"zlib wrapper " * 100, ltz="ü" * 5000)
UPDATED = {"vcz": "updated " * 40, "blz": b"now short", "txz": None, "ltz": "ß" * 200}


def _changes() -> list[RowChange]:
    decoder = BinlogDecoder(file=PATH.name)
    out = [
        c
        for raw in RAWS
        for ev in decoder.decode_events(raw)
        if isinstance(ev, RowsEvent)
        for c in ev.changes
    ]
    assert decoder.stats.invalid_text_values == 0
    return out


def test_values_are_the_ones_inserted_updated_and_deleted() -> None:
    got = [(c.op, c.before, c.after) for c in _changes()]
    assert got == [
        *[(Op.INSERT, None, row) for row in (ROW1, ROW2, ROW3, ROW4, ROW5, ROW6)],
        (Op.UPDATE, ROW1, {**ROW1, **UPDATED}),
        (Op.UPDATE, ROW2, {**ROW2, **UPDATED}),
        (Op.DELETE, {**ROW2, **UPDATED}, None),
        (Op.DELETE, ROW6, None),
    ]
    # the canonical JSON form is that of VARCHAR/TEXT (a string) and BLOB (base64)
    after = canonical.row_change_to_dict(_changes()[0])["after"]
    assert after["vcz"] == "short é" and after["ltz"] == "long 😀" and after["blz"] == "3q2+7w=="


def test_table_map_types_metadata_and_charsets() -> None:
    decoder = BinlogDecoder()
    table = next(ev.table for raw in RAWS for ev in decoder.decode_events(raw) if isinstance(ev, RowsEvent))
    cols = {c.name: c for c in table.columns}
    varchar, blob = ColumnType.VARCHAR_COMPRESSED, ColumnType.BLOB_COMPRESSED
    # VARCHAR: the byte capacity, the header byte included (VARCHAR(100) utf8mb4: 401); BLOB: pack length
    assert [(cols[n].type, cols[n].meta) for n in ("vcz", "vcz_latin", "vbz")] == [
        (varchar, 401),
        (varchar, 201),
        (varchar, 301),
    ]
    assert [
        (cols[n].type, cols[n].meta) for n in ("tbz", "blz", "mbz", "lbz", "ttz", "txz", "mtz", "ltz")
    ] == [(blob, m) for m in (1, 2, 3, 4, 1, 2, 3, 4)]
    # compressed columns have their place in the charset metadata, between uncompressed ones
    assert [cols[n].charset for n in NAMES] == [45, 8, 8, 63, 63, 63, 63, 63, 63, 45, 8, 45, 45]


def _kind(stored: bytes) -> str:
    if not stored:
        return "empty"
    head = stored[0]
    if head == 0:
        return "as is, long" if len(stored) > 100 else "as is"
    assert head >> 4 == 8, f"header 0x{head:02x}"
    return f"{'deflate' if head & 0x08 else 'zlib'}, {head & 0x07}-byte length"


def test_the_fixture_holds_every_stored_form() -> None:
    """What mariadb-binlog prints (the stored bytes): values really compressed, raw deflate
    (column_compression_zlib_wrap=OFF) and with the zlib wrapper, original lengths of 1 to 3
    bytes; short values and the incompressible SHA2 bytes stored as is after a 0x00 header;
    '' stored as no bytes."""
    stored = compressed_stored_values(PATH)
    kinds = {_kind(s) for s in stored}
    assert kinds == {
        "empty",
        "as is",
        "as is, long",
        "deflate, 1-byte length",
        "deflate, 2-byte length",
        "deflate, 3-byte length",
        "zlib, 1-byte length",
        "zlib, 2-byte length",
    }
    by_header = {s[0]: uncompress_stored(s) for s in stored if s}
    assert by_header[0x81] == b"wrapped " * 20 and by_header[0x8B] == b"0123456789" * 7000


def _with_crc(raw: bytes, at: int, new: bytes) -> bytes:
    """`raw` with `new` at `at` and its CRC32 recomputed, so only the intended fault remains."""
    out = raw[:at] + new + raw[at + len(new) :]
    return out[:-4] + struct.pack("<I", zlib.crc32(out[:-4]))


def _locate(value: bytes, wrapped: bool) -> tuple[int, int, bytes]:
    """(event index, offset in the event, stored bytes) of the compressed value of `value`."""
    stored = next(
        s
        for s in compressed_stored_values(PATH)
        if s[:1] and s[0] >> 4 == 8 and bool(s[0] & 0x08) != wrapped and uncompress_stored(s) == value
    )
    i = next(i for i, raw in enumerate(RAWS) if stored in raw)  # the first event holding it
    return i, RAWS[i].find(stored), stored


def _decode(i: int, victim: bytes) -> list[RowChange]:
    decoder = BinlogDecoder(file=PATH.name)
    for raw in RAWS[:i]:
        decoder.feed(raw)
    event = decoder.feed(victim)
    assert isinstance(event, RowsEvent)
    return event.changes


def test_every_byte_flipped_in_a_zlib_stream_is_invalid_value() -> None:
    """The zlib-wrapped BLOB value of row 6 (column_compression_zlib_wrap=ON): each byte of the
    stream (zlib header, deflate data, Adler-32) inverted in turn, in the real event with its CRC
    recomputed, is an InvalidValue naming the column, never zlib.error or IndexError."""
    i, at, stored = _locate(b"zlib wrapper " * 100, wrapped=True)
    assert _decode(i, RAWS[i])[0].after == ROW6
    start = at + 1 + (stored[0] & 0x07)  # after the header byte and the original length
    assert stored[start - at] == 0x78  # zlib's CMF byte: deflate, 32 KiB window
    for pos in range(start, at + len(stored)):
        with pytest.raises(InvalidValue, match="column blz: "):
            _decode(i, _with_crc(RAWS[i], pos, bytes([RAWS[i][pos] ^ 0xFF])))


def test_flipped_bytes_in_raw_deflate_data_never_escape_as_another_error() -> None:
    """Raw deflate (the default) has no checksum: an inverted byte is an InvalidValue when the
    data no longer inflates to the original length, else a different value; nothing else."""
    i, at, stored = _locate(b"blob " * 1000, wrapped=False)
    invalid = 0
    for pos in range(at + 1 + (stored[0] & 0x07), at + len(stored)):
        try:
            changes = _decode(i, _with_crc(RAWS[i], pos, bytes([RAWS[i][pos] ^ 0xFF])))
        except InvalidValue as exc:
            assert "column blz: " in str(exc)
            invalid += 1
        else:
            assert changes[0].after is not None and changes[0].after["blz"] != b"blob " * 1000
    assert invalid > (len(stored) - 3) // 2


WRAPPED = b"zlib wrapper " * 100  # row 6's blz: zlib-wrapped, a 2-byte original length (1300)
LATIN = "é".encode("latin1") * 150  # row 2's vcz_latin, VARCHAR(200): raw deflate, a 1-byte length
CORRUPT_HEADERS: dict[str, tuple[bytes, str, Callable[[bytes], bytes], str]] = {
    "method 9": (WRAPPED, "blz", lambda s: bytes([0x90 | s[0] & 0x0F]), "unknown compression method 9"),
    "length size 0": (WRAPPED, "blz", lambda s: bytes([s[0] & 0xF8]), "bad compressed length size 0"),
    "length size 7": (WRAPPED, "blz", lambda s: bytes([s[0] | 0x07]), "bad compressed length size 7"),
    "length + 1": (WRAPPED, "blz", lambda s: s[:2] + bytes([s[2] + 1]), "1300 bytes, header says 1301"),
    "length - 1": (WRAPPED, "blz", lambda s: s[:2] + bytes([s[2] - 1]), "1300 bytes, header says 1299"),
    "over capacity": (LATIN, "vcz_latin", lambda s: s[:1] + b"\xff", "declares 255 bytes, column holds 201"),
}


@pytest.mark.parametrize("case", CORRUPT_HEADERS)
def test_corrupt_headers_are_invalid_value(case: str) -> None:
    value, column, patch, message = CORRUPT_HEADERS[case]
    i, at, stored = _locate(value, wrapped=column == "blz")
    with pytest.raises(InvalidValue, match=f"column {column}: .*{message}"):
        _decode(i, _with_crc(RAWS[i], at, patch(stored)))


def test_an_unknown_method_on_a_value_stored_as_is_is_invalid_value() -> None:
    stored = b"\x00short \xc3\xa9"  # row 1's vcz, stored as is after a 0x00 header
    i = next(i for i, raw in enumerate(RAWS) if stored in raw)
    at = RAWS[i].find(stored)
    assert _decode(i, RAWS[i])[0].after == ROW1
    with pytest.raises(InvalidValue, match="column vcz: unknown compression method 1"):
        _decode(i, _with_crc(RAWS[i], at, b"\x10"))
