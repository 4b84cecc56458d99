"""The one error tree of binlog-mirror.

    ReplicatorError                    retriable = False unless noted
    ├── ConfigError                    a setting is missing or malformed (stops startup)
    ├── DecodeError                    bad bytes: never retried; message names file/offset
    │   ├── TruncatedEvent             an event or value ends before its declared length
    │   ├── ChecksumMismatch           CRC32 of an event does not match its trailer
    │   ├── MissingTableMap            a rows event names a table id with no TABLE_MAP
    │   ├── UnknownEvent               an event type we cannot decode and may not skip
    │   ├── UnknownColumnType          a column type code we cannot decode
    │   ├── UnsupportedBinlog          binlog version != 4, encrypted binlog, ...
    │   └── InvalidValue               a column value whose bytes make no sense
    ├── SourceError                    (retriable) MySQL lost, timed out, or refused
    │   ├── PositionLost               (not retriable) ERR 1236: position purged/unknown
    │   ├── PreflightError             (not retriable) the source is not configured to be read
    │   ├── HistoryMismatch            (not retriable) the source's event at the checkpoint is not
    │   │   │                          the one applied: another server, or a rebuilt one
    │   │   └── SourceBehind           the source lacks transactions the mirror applied (a replica
    │   │                              that lagged at a failover): named by GTID
    │   └── SourceAccessDenied         (permanent) wrong user/password, missing privilege
    ├── SinkError                      (retriable) Redis unavailable
    │   ├── LeaseLost                  (not retriable here) another instance holds the writer lease
    │   ├── SinkAccessDenied           (permanent) wrong Redis password/user, command not permitted
    │   │   └── SinkTlsRefused         (permanent) the Redis server's certificate is not trusted
    │   ├── CatalogMiss                (retriable) a change of a table whose definition is not loaded
    │   └── RowsMissing                (retriable) an update sent without the whole row met no row
    └── StackError                     the local MariaDB/Redis stack could not start

Loops decide what to do from `retriable`, never from isinstance lists. `permanent` marks a
retriable error that only an operator can fix (a password, a grant): at startup it stops the
process with one line naming `setting`; once running it is retried with backoff, shown as state
`failed` with its reason, and logged once a minute (service/pipeline/failures.py).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CatalogMiss",
    "ChecksumMismatch",
    "ConfigError",
    "DecodeError",
    "HistoryMismatch",
    "InvalidValue",
    "LeaseLost",
    "MissingTableMap",
    "PositionLost",
    "PreflightError",
    "ReplicatorError",
    "RowsMissing",
    "SinkAccessDenied",
    "SinkError",
    "SinkTlsRefused",
    "SourceAccessDenied",
    "SourceBehind",
    "SourceError",
    "StackError",
    "TruncatedEvent",
    "UnknownColumnType",
    "UnknownEvent",
    "UnsupportedBinlog",
]


class ReplicatorError(Exception):
    retriable: ClassVar[bool] = False
    permanent: ClassVar[bool] = False  # retrying cannot help until an operator acts
    setting: ClassVar[str | None] = None  # the setting to check, named in the one-line error


class ConfigError(ReplicatorError):
    pass


class DecodeError(ReplicatorError):
    pass


class TruncatedEvent(DecodeError):
    pass


class ChecksumMismatch(DecodeError):
    pass


class MissingTableMap(DecodeError):
    pass


class UnknownEvent(DecodeError):
    pass


class UnknownColumnType(DecodeError):
    pass


class UnsupportedBinlog(DecodeError):
    pass


class InvalidValue(DecodeError):
    pass


class SourceError(ReplicatorError):
    retriable = True


class PositionLost(SourceError):
    retriable = False


class PreflightError(SourceError):
    retriable = False


class HistoryMismatch(SourceError):
    """The event ending at the stored checkpoint is not, on this source, the event the mirror
    applied last (service/checkpoint.py EventMark): following the checkpoint would apply another
    history's transactions on top of this one's rows."""

    retriable = False
    setting = "BINLOG_MIRROR_ON_HISTORY_MISMATCH"


class SourceBehind(HistoryMismatch):
    """The source's GTIDs lack transactions the mirror applied (service/history.py): following it
    would drop them from the history and mix in the ones it wrote instead."""


class SourceAccessDenied(SourceError):
    """Authentication or privilege failure on the source (ERR 1044/1045/1142/1227/...)."""

    permanent = True
    setting = "BINLOG_MIRROR_MYSQL"


class SinkError(ReplicatorError):
    retriable = True


class LeaseLost(SinkError):
    retriable = False


class SinkAccessDenied(SinkError):
    """Redis refused the credentials (WRONGPASS, NOAUTH) or a command (NOPERM)."""

    permanent = True
    setting = "BINLOG_MIRROR_REDIS"


class SinkTlsRefused(SinkAccessDenied):
    """The Redis server's TLS certificate failed verification against redis_tls_ca_file."""

    setting = "BINLOG_MIRROR_REDIS_TLS_CA_FILE"


class CatalogMiss(SinkError):
    """Planning met a table the catalog has not loaded: retried from the stored checkpoint,
    never planned as "no usable key" (that would skip its rows silently)."""


class RowsMissing(SinkError):
    """A call's updates sent only their changed columns (the mirror holds the row), and Redis
    lacked the row, or the table was being resynced: nothing of the call was written. Retried
    from the stored checkpoint; that table's updates then carry whole rows."""

    def __init__(self, message: str, table_id: str, resync: bool) -> None:
        super().__init__(message)
        self.table_id = table_id
        self.resync = resync  # the table has a resync in flight (no row was missing)


class StackError(ReplicatorError):
    pass
