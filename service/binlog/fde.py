"""FORMAT_DESCRIPTION_EVENT -> StreamFormat (the facts every later event is decoded with)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.binlog.constants import HEADER_LEN, ChecksumAlg, EventType
from service.binlog.reader import ByteReader
from service.errors import TruncatedEvent, UnsupportedBinlog

__all__ = ["StreamFormat", "parse_format_description"]

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class StreamFormat:
    server_version: str
    binlog_version: int = 4
    checksum: ChecksumAlg = ChecksumAlg.OFF
    header_len: int = HEADER_LEN
    post_header_lens: bytes = b""  # index i = post-header length of event type i + 1
    mariadb: bool = False

    def post_header_len(self, type_code: int, default: int = 0) -> int:
        idx = type_code - 1
        if 0 <= idx < len(self.post_header_lens):
            return self.post_header_lens[idx]
        return default

    @property
    def table_id_width(self) -> int:
        """6, or 4 when TABLE_MAP's post-header is 6 bytes (MySQL < 5.1.4)."""
        return 4 if self.post_header_len(EventType.TABLE_MAP, 8) == 6 else 6

    @property
    def checksum_len(self) -> int:
        return 4 if self.checksum == ChecksumAlg.CRC32 else 0


def _version_tuple(version: str) -> tuple[int, int, int]:
    m = _VERSION_RE.match(version)
    if m is None:
        return (0, 0, 0)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def checksum_capable(version: str) -> bool:
    """Servers from MySQL 5.6.1 / MariaDB 5.3.0 end the FDE with a checksum-alg byte."""
    split = (5, 3, 0) if "mariadb" in version.lower() else (5, 6, 1)
    return _version_tuple(version) >= split


def parse_format_description(body: bytes) -> tuple[int, str, int, StreamFormat]:
    """Parse an FDE body (the bytes after the 19-byte header, trailer included).

    Returns (binlog_version, server_version, create_timestamp, StreamFormat).
    """
    r = ByteReader(body, base=HEADER_LEN)
    binlog_version = r.uint(2)
    if binlog_version != 4:
        raise UnsupportedBinlog(f"binlog version {binlog_version} (only v4 is supported)")
    server_version = r.take(50).split(b"\x00", 1)[0].decode("ascii", "replace")
    create_ts = r.uint(4)
    header_len = r.u8()
    if header_len < HEADER_LEN:
        raise TruncatedEvent(f"FDE declares a {header_len}-byte event header (< {HEADER_LEN})")
    rest = r.rest()
    checksum = ChecksumAlg.UNDEF
    post = rest
    if checksum_capable(server_version):
        if len(rest) < 5:
            raise TruncatedEvent("FDE too short for its checksum-algorithm byte")
        alg = rest[-5]
        post = rest[:-5]
        if alg == ChecksumAlg.CRC32:
            checksum = ChecksumAlg.CRC32
        elif alg == ChecksumAlg.OFF:
            checksum = ChecksumAlg.OFF
        elif alg == ChecksumAlg.UNDEF:
            checksum = ChecksumAlg.UNDEF
        else:
            raise UnsupportedBinlog(f"unknown binlog checksum algorithm {alg}")
    fmt = StreamFormat(
        server_version=server_version,
        binlog_version=binlog_version,
        checksum=checksum if checksum == ChecksumAlg.CRC32 else ChecksumAlg.OFF,
        header_len=header_len,
        post_header_lens=bytes(post),
        mariadb="mariadb" in server_version.lower(),
    )
    return binlog_version, server_version, create_ts, fmt
