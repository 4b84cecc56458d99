"""Collation id -> Python codec for text columns.

MySQL's `latin1` is Windows-1252 with the five undefined cp1252 bytes mapped to the
C1 controls U+0081, U+008D, U+008F, U+0090, U+009D; we decode it exactly that way.
Collation ids come from MySQL's and MariaDB's `SHOW COLLATION`; MariaDB >= 10.10 UCA-14.0.0
collations (ids 2048..3327) carry the character set in bits 8..10.
"""

from __future__ import annotations

__all__ = ["BINARY_COLLATION", "codec_for_collation", "collation_for_charset", "decode_latin1"]

BINARY_COLLATION = 63

_RANGES: dict[str, tuple[int, ...]] = {
    "utf-8": (
        # utf8mb4
        45,
        46,
        *range(224, 248),
        *range(255, 324),
        *range(2304, 2560),
        # utf8mb3 (decodes as utf-8; 4-byte sequences never occur)
        33,
        76,
        83,
        *range(192, 216),
        223,
        *range(2048, 2304),
    ),
    "latin1": (5, 8, 15, 31, 47, 48, 49, 94),
    "ascii": (11, 65),
    "utf-16-be": (35, 90, *range(128, 152), 159, 54, 55, *range(101, 125), *range(2560, 3072)),
    "utf-16-le": (56, 62),
    "utf-32-be": (60, 61, *range(160, 184), *range(3072, 3328)),
    "gbk": (28, 87),
    "gb2312": (24, 86),
    "gb18030": (248, 249, 250),
    "big5": (1, 84),
    "shift_jis": (13, 88),
    "cp932": (95, 96),
    "euc_kr": (19, 85),
    "euc_jp": (12, 91, 97, 98),
    "koi8_r": (7, 74),
    "koi8_u": (22, 75),
    "cp1251": (14, 23, 50, 51, 52),
    "cp1250": (26, 34, 44, 66, 99),
    "cp1256": (57, 67),
    "cp1257": (29, 58, 59),
    "iso8859_7": (25, 70),
    "iso8859_8": (16, 71),
    "iso8859_2": (9, 21, 27, 77),
    "iso8859_9": (30, 78),
    "iso8859_13": (20, 41, 42, 79),
    "cp850": (4, 80),
    "cp852": (40, 81),
    "cp866": (36, 68),
    "tis_620": (18, 69),
    "mac_roman": (39, 53),
    "mac_latin2": (38, 43),
    "hp_roman8": (6, 72),
    "binary": (BINARY_COLLATION,),
}

_CODECS: dict[int, str] = {cid: name for name, ids in _RANGES.items() for cid in ids}

# cp1252 for 0x80..0x9F, keeping MySQL's identity mapping for the five undefined bytes.
_CP1252_HIGH = {
    0x80 + i: ord(bytes([0x80 + i]).decode("cp1252", errors="strict"))
    for i in range(32)
    if 0x80 + i not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}


def decode_latin1(raw: bytes) -> str:
    text = raw.decode("latin-1")
    return text if text.isascii() else text.translate(_CP1252_HIGH)


def codec_for_collation(collation: int | None) -> str | None:
    """The Python codec name, "binary" for the binary collation, None when unknown."""
    if collation is None:
        return None
    return _CODECS.get(collation)


# Character set name (information_schema CHARACTER_SET_NAME, SHOW CHARACTER SET) -> its default
# collation id, for a schema that names the character set but not the collation: only the
# character set matters to decoding. A name not here has no codec (decoded losslessly, as unknown).
_DEFAULT_COLLATION = {
    "big5": 1, "hp8": 6, "koi8r": 7, "latin1": 8, "latin2": 9, "ujis": 12, "sjis": 13,
    "hebrew": 16, "tis620": 18, "euckr": 19, "koi8u": 22, "gb2312": 24, "greek": 25, "cp1250": 26,
    "gbk": 28, "cp1257": 59, "latin5": 30, "utf8mb3": 33, "utf8": 33, "ucs2": 35, "cp866": 36,
    "macce": 38, "macroman": 39, "cp852": 40, "latin7": 41, "cp1251": 51, "utf16": 54,
    "utf16le": 56, "cp1256": 57, "utf32": 60, "binary": BINARY_COLLATION, "ascii": 11,
    "cp850": 4, "cp932": 95, "eucjpms": 97, "utf8mb4": 45, "gb18030": 248,
}  # fmt: skip


def collation_for_charset(charset: str | None) -> int | None:
    """A collation id of the named character set that codec_for_collation knows, else None."""
    if charset is None:
        return None
    cid = _DEFAULT_COLLATION.get(charset.lower())
    return cid if cid is not None and cid in _CODECS else None
