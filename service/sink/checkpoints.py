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

Field order and text are part of the format: existing mirrors must keep loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.checkpoint import BinlogPosition, Checkpoint

__all__ = ["StoredCheckpoint", "checkpoint_fields", "decode_checkpoint"]


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
        "gtid": gtid or "",
        "values": values,
    }


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    checkpoint: Checkpoint
    id: str  # the chain head
    values: str | None  # the value mode recorded with it; None in a hash written before it was
    gtid: str | None = None  # the GTID of the transaction it ends (None: not in GTID mode)


def decode_checkpoint(raw: Mapping[Any, bytes | str]) -> StoredCheckpoint | None:
    """The stored checkpoint from the hash's fields (as HGETALL returns them); None when empty."""
    if not raw:
        return None
    f = {_text(k): _text(v) for k, v in raw.items()}
    position = BinlogPosition(f["file"], int(f["pos"]))
    checkpoint = Checkpoint(position, f.get("gtid_set", ""), int(f.get("ts", 0)))
    return StoredCheckpoint(checkpoint, f["id"], f.get("values"), f.get("gtid") or None)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
