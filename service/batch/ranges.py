"""Split binlog files into ranges that decode independently, so one big file uses every core.

A range starts at a transaction boundary: a GTID event outside any transaction. Its task decodes
the file's FORMAT_DESCRIPTION (offset 4) and then its own events: every transaction carries the
TABLE_MAPs its rows need. The one thing a range cannot see is the GTID state before it (the
transactions' `gtid_set`), which the scan hands it.

The scan is cheap: it reads each event's 19-byte header (pread) and decodes only the small events
that move the GTID state or carry a table version (GTID, QUERY, XID, TABLE_MAP, ...); rows events,
nearly all of a file's bytes, are skipped. It also collects the table versions (the TABLE_MAPs'
column lists) that `replay` needs, before any row is written, for each table's union schema.
Runs in an executor, one task per file; pure but for reading the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from service.batch.tableversion import table_version
from service.binlog import BinlogDecoder, DecodeOptions
from service.binlog.constants import BINLOG_MAGIC, HEADER_LEN, EventType
from service.binlog.events import GtidListEvent, TableMapEvent, TransactionPayloadEvent
from service.checkpoint import BinlogPosition, CheckpointTracker
from service.errors import DecodeError
from service.gtids import parse_gtid_set
from service.transactions import TableFilter

__all__ = ["FileRange", "FileScan", "scan_file"]

E = EventType
# Events whose bodies the scan decodes: the GTID state, transaction boundaries, table versions.
_DECODED = frozenset(
    {
        E.FORMAT_DESCRIPTION, E.QUERY, E.XID, E.TABLE_MAP, E.GTID, E.ANONYMOUS_GTID, E.GTID_TAGGED,
        E.PREVIOUS_GTIDS, E.XA_PREPARE, E.TRANSACTION_PAYLOAD, E.MARIA_GTID, E.MARIA_GTID_LIST,
        E.MARIA_QUERY_COMPRESSED, E.ROTATE, E.STOP,
    }
)  # fmt: skip
_STARTS = frozenset({E.GTID, E.ANONYMOUS_GTID, E.GTID_TAGGED, E.MARIA_GTID})  # a transaction's first event


@dataclass(frozen=True, slots=True)
class FileRange:
    """One task of `replay`: the events of `path` that start in [start, stop)."""

    path: str
    index: int  # the file's index in the replayed list
    part: int  # the range's index in the file
    start: int
    stop: int | None  # None: to the end of the file
    gtids: str | None = None  # the executed GTID set before `start` (None: unknown / not tracked)

    @property
    def size(self) -> int:
        return (self.stop or os.path.getsize(self.path)) - self.start


@dataclass(slots=True)
class FileScan:
    ranges: list[FileRange]
    # (schema, table, version) of each TABLE_MAP that differs from the table's previous one, in order
    versions: list[tuple[str, str, str]] = field(default_factory=list)


def scan_file(
    path: str, index: int, tables: TableFilter, options: DecodeOptions, split_bytes: int
) -> FileScan:
    """The file's ranges (about `split_bytes` each; one when smaller) and table versions.

    A file the scan cannot read to its end (corrupt, truncated) gets no cuts past the bad spot:
    the range that holds it fails to decode there, with the decoder's error naming the offset."""
    name = os.path.basename(path)
    decoder = BinlogDecoder(options, file=name)
    tracker = CheckpointTracker(BinlogPosition(name, 4))
    cuts: list[tuple[int, str | None]] = [(4, None)]
    scan = FileScan([])
    last: dict[tuple[str, str], str] = {}
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if os.pread(fd, 4, 0) != BINLOG_MAGIC:
            return FileScan([FileRange(path, index, 0, 4, None)])
        offset = 4
        while offset + HEADER_LEN <= size:
            head = os.pread(fd, HEADER_LEN, offset)
            kind = head[4]
            length = int.from_bytes(head[9:13], "little")
            if length < HEADER_LEN or offset + length > size:
                break
            if (
                kind in _STARTS
                and not tracker.in_transaction
                and offset - cuts[-1][0] >= split_bytes
                and size - offset >= split_bytes // 4  # no sliver of a last range
            ):
                cuts.append((offset, tracker.checkpoint.gtid_set if tracker.gtids is not None else None))
            if kind in _DECODED:
                event = decoder.feed(head + os.pread(fd, length - HEADER_LEN, offset + HEADER_LEN), offset)
                inner = event.events if isinstance(event, TransactionPayloadEvent) else (event,)
                for ev in inner:
                    if ev is None:
                        continue
                    if isinstance(ev, GtidListEvent) and tracker.gtids is None and ev.gtids:
                        tracker.gtids = parse_gtid_set(",".join(ev.gtids))  # as the range's decode does
                    elif isinstance(ev, TableMapEvent) and tables.wants(ev.table.schema, ev.table.table):
                        t = ev.table
                        v = table_version(t)
                        if last.get((t.schema, t.table)) != v:
                            last[(t.schema, t.table)] = v
                            scan.versions.append((t.schema, t.table, v))
                    tracker.observe(ev)
            offset += length
    except DecodeError:
        pass  # planning stops here; the range's decode reports the error with its offset
    finally:
        os.close(fd)
    bounds = [c for c, _ in cuts[1:]] + [None]
    scan.ranges = [
        FileRange(path, index, part, start, stop, gtids)
        for part, ((start, gtids), stop) in enumerate(zip(cuts, bounds, strict=True))
    ]
    return scan
