"""Where a dump connection starts, and the checks that bind it to the mirror's history
(docs/mirror.md, "History check" and "Source failover"): `BinlogSource` resolves its start point
here (`resolve`), asks how to resume a checkpoint (`gtid_resume`: by GTID after the source's GTIDs
were checked; else `history_mark`: by file and position against the event that ends it), and,
for a start point, for its file's identity (`file_mark`)."""

from __future__ import annotations

from dataclasses import dataclass

import aiomysql

from service.binlog import BinlogDecoder, DecodeOptions
from service.binlog.constants import EventType
from service.binlog.events import FormatDescriptionEvent
from service.checkpoint import BinlogPosition, Checkpoint, EventMark, MariadbGtidPos, MysqlGtidSet, StartPoint
from service.errors import SourceError
from service.history import GtidResume, plan_mariadb, plan_mysql
from service.transport.connection import ServerInfo, binlog_files, current_checkpoint, fetch
from service.transport.stream import BinlogStream

__all__ = ["Resume", "failover_note", "file_mark", "gtid_resume", "history_mark", "resolve"]

_HEARTBEATS = (int(EventType.HEARTBEAT), int(EventType.HEARTBEAT_V2))


@dataclass(slots=True)
class Resume:
    """Where the next connection starts."""

    checkpoint: Checkpoint
    gtid_mode: bool  # dump by GTID set (else by file/pos)
    skip_until: BinlogPosition | None = None  # drop transactions ending at or before this
    expect: EventMark | None = None  # the history check of the dump being opened (_open)
    by_gtid: GtidResume | None = None  # the dump being opened resumes by GTID (service/history.py)


async def resolve(ctl: aiomysql.Connection, info: ServerInfo, start: StartPoint) -> Resume:
    """Where a source started at `start` dumps from first."""
    if isinstance(start, Checkpoint):
        if start.position.file:
            return Resume(start, gtid_mode=False)
        return Resume(start, gtid_mode=True)
    if isinstance(start, MysqlGtidSet | MariadbGtidPos):
        if isinstance(start, MariadbGtidPos) != info.mariadb:
            raise SourceError(f"GTID set {start} is not in the {info.flavour} form")
        return Resume(Checkpoint(BinlogPosition("", 4), str(start)), gtid_mode=True)
    if start == "now":
        return Resume(await current_checkpoint(ctl, info), gtid_mode=False)
    if start == "start":
        files = await binlog_files(ctl)
        if not files:
            raise SourceError("SHOW BINARY LOGS is empty: is binary logging on?")
        begin = BinlogPosition(files[0][0], 4)
        return Resume(Checkpoint(begin, await _gtid_at(ctl, info, begin)), gtid_mode=False)
    assert isinstance(start, BinlogPosition)
    # An explicit FILE:POS may point inside a transaction: read the file from its start and
    # hand out transactions that end after POS, so the one holding POS comes out whole.
    begin = BinlogPosition(start.file, 4)
    skip = start if start.pos > 4 else None
    return Resume(Checkpoint(begin, await _gtid_at(ctl, info, begin)), gtid_mode=False, skip_until=skip)


async def _gtid_at(ctl: aiomysql.Connection, info: ServerInfo, position: BinlogPosition) -> str:
    if not info.mariadb:
        return ""  # MySQL: the set is learnt from the GTID events that follow
    rows = await fetch(ctl, "SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
    return str(rows[0][0] or "") if rows else ""


def history_mark(cp: Checkpoint) -> EventMark | None:
    """The event to check when resuming from `cp` by file and position: its mark, when it is in
    `cp`'s file before `cp` (a commit ending at it, or the file's FORMAT_DESCRIPTION)."""
    mark = cp.mark
    if mark is None or not cp.position.file or not 4 <= mark.offset < cp.position.pos:
        return None
    return mark


async def gtid_resume(ctl: aiomysql.Connection, info: ServerInfo, cp: Checkpoint) -> GtidResume | None:
    """How to resume `cp` by GTID on this source (service/history.py), after checking the
    source holds what the mirror applied (raises SourceBehind, PositionLost); None: by file and
    position (no GTIDs, or no transaction of the checkpoint to check)."""
    if (cp.mark is None and cp.txn_mark is None) or not cp.gtid_set or not info.gtids:
        return None  # a start point, a checkpoint from before marks, or no GTIDs
    if info.mariadb:
        rows = await fetch(ctl, "SELECT @@gtid_binlog_pos")
        return plan_mariadb(cp, MariadbGtidPos.parse(str(rows[0][0] or "")))
    rows = await fetch(ctl, "SELECT @@gtid_executed, @@gtid_purged")
    executed, purged = (MysqlGtidSet.parse(str(v or "")) for v in rows[0])
    return plan_mysql(cp, executed, purged)


async def file_mark(stream: BinlogStream, file: str, head: list[bytes]) -> EventMark | None:
    """The mark of the FORMAT_DESCRIPTION of the file a dump starts in: the first event it sends
    after the fake ROTATE. The events read for it are appended to `head` (the pump's first
    batch). None when the dump does not start with one."""
    decoder = BinlogDecoder(DecodeOptions(), file=file)
    while True:
        raws = await stream.read_batch()
        if raws is None:
            return None
        head += raws
        for raw in raws:
            if len(raw) > 4 and raw[4] in _HEARTBEATS:
                continue
            event = decoder.feed(raw)
            if isinstance(event, FormatDescriptionEvent):
                return EventMark.of_file(event)
            if event is not None and event.header.type_code != EventType.ROTATE:
                return None


def failover_note(before: str, found: Checkpoint, was: BinlogPosition) -> str | None:
    """What a GTID resume that found the last applied transaction again at `found` means: a
    failover ("old -> new at GTID") when the checkpoint was read from another server (`before`,
    its stored identity; without one, another binlog position than `was`); else None."""
    moved = before != found.source if before else found.position != was
    return f"{before or 'unknown'} -> {found.source} at {found.gtid}" if moved else None
