"""The checkpoint's stored form: the one codec between a `Checkpoint` and the fields of the
mirror's checkpoint hash (`KeyLayout.checkpoint_key`). Written by the apply scripts (through
`RedisMirror`) and by the snapshot's hand-over; read by `RedisMirror.load_checkpoint` and by
anything else that looks at a mirror (tests, benchmarks, tools).

    id        "mysql-bin.000003:1234"  the chain head: the next apply call must name it
    file      "mysql-bin.000003"
    pos       "1234"
    gtid_set  executed GTID set after the transaction ("" outside GTID mode)
    ts        source timestamp of its commit
    gtid      the transaction's own GTID ("" when none)
    values    hash | json: the value mode the rows were written in
    event     the event ending at `pos` (`EventMark`: "offset type server_id timestamp detail"),
              or, for a checkpoint that ends no transaction (a bootstrap, a file's start after a
              ROTATE), its file's FORMAT_DESCRIPTION (offset 4): the history's identity, checked
              against the source at every resume; "" when not known (written before it existed)
    recopy    "" after every apply; a reason when the mirror is known incomplete (an eviction
              stop wrote it): the next start copies the selected tables again, which clears it
    source    the identity of the server the checkpoint was read from (`ServerInfo.identity`,
              e.g. "server_id=1 domain=0"): a resume from another one is a failover
    txn_event at a file's start (after a ROTATE): the commit event of `gtid`, the last transaction
              (in an earlier file), which a resume by GTID compares; "" otherwise

Field order and text are part of the format: existing mirrors must keep loading (a hash written
before `event` existed resumes unchecked; one with only `recopy` has no checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.checkpoint import BinlogPosition, Checkpoint, EventMark

__all__ = ["RECOPY_FIELD", "StoredCheckpoint", "checkpoint_fields", "decode_checkpoint", "recopy_reason"]

RECOPY_FIELD = "recopy"


def checkpoint_fields(
    end: Checkpoint, gtid: str | None = None, values: str = "hash", ts: int | None = None
) -> dict[str, str]:
    """The checkpoint hash for a transaction (or hand-over point) ending at `end`; `ts`: the
    transaction's timestamp when `end` has none."""
    return {
        "id": str(end.position),
        "file": end.position.file,
        "pos": str(end.position.pos),
        "gtid_set": end.gtid_set,
        "ts": str(end.ts or ts or 0),
        "gtid": gtid or end.gtid,
        "values": values,
        "event": str(end.mark) if end.mark is not None else "",
        RECOPY_FIELD: "",
        "source": end.source,
        "txn_event": str(end.txn_mark) if end.txn_mark is not None else "",
    }


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    checkpoint: Checkpoint
    id: str  # the chain head
    values: str | None  # the value mode recorded with it; None in a hash written before it was
    gtid: str | None = None  # the GTID of the transaction it ends (None: not in GTID mode)
    marked: bool = True  # False: written before the `event` field existed (resumed unchecked)


def decode_checkpoint(raw: Mapping[Any, bytes | str]) -> StoredCheckpoint | None:
    """The stored checkpoint from the hash's fields (as HGETALL returns them); None when empty."""
    f = {_text(k): _text(v) for k, v in raw.items()}
    if "file" not in f:
        return None  # empty, or only the recopy marker left when the checkpoint was lost
    position = BinlogPosition(f["file"], int(f["pos"]))
    event = f.get("event")
    mark = EventMark.parse(event) if event else None
    txn_event = f.get("txn_event")
    checkpoint = Checkpoint(
        position, f.get("gtid_set", ""), int(f.get("ts", 0)), mark, f.get("gtid", ""), f.get("source", ""),
        EventMark.parse(txn_event) if txn_event else None,
    )  # fmt: skip
    return StoredCheckpoint(checkpoint, f["id"], f.get("values"), f.get("gtid") or None, event is not None)


def recopy_reason(raw: Mapping[Any, bytes | str]) -> str | None:
    """The recopy marker's reason from the hash's fields; None when not set."""
    for k, v in raw.items():
        if _text(k) == RECOPY_FIELD:
            return _text(v) or None
    return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
