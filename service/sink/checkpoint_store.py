"""Loading the stored checkpoint with what a restart resumes from: the chunked transaction a crash
interrupted (`__progress`) and the tables' resync and settle marks (`__resync`, `__settle`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from redis.asyncio import Redis

from service.checkpoint import BinlogPosition, Checkpoint
from service.errors import ConfigError
from service.sink.checkpoints import decode_checkpoint, recopy_reason
from service.sink.keys import GENERATION_FIELD, KeyLayout
from service.sink.replies import map_redis_errors

__all__ = ["CheckpointStore", "LoadedCheckpoint", "Progress", "as_str"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Progress:
    """`{prefix}:__progress`: the chunked transaction a crash interrupted."""

    txn: str  # its id (end position)
    rows: int  # row changes applied (in the selection of the run that applied them)
    first: int  # sequence number of its first change
    tables: dict[str, int] = field(default_factory=dict)  # table_id -> its changes applied

    @classmethod
    def parse(cls, raw: dict[str, str]) -> Progress | None:
        if "txn" not in raw or "rows" not in raw:  # none, or an older format: start the txn over
            return None
        tables = {k[2:]: int(v) for k, v in raw.items() if k.startswith("t:")}
        return cls(raw["txn"], int(raw["rows"]), int(raw.get("first", -1)), tables)


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    """What Redis holds for a writer that starts (or restarts) its session."""

    checkpoint: Checkpoint | None  # where to resume; None: nothing applied yet
    chain_id: str  # the id the next apply call must follow ("" with no checkpoint)
    recopy: str | None  # why the selected tables must be copied again (the recopy marker)
    resume: Progress | None  # a chunked transaction to resume
    resyncing: set[str]  # table ids with a resync in flight
    settling: dict[str, BinlogPosition]  # table id -> where its resync's copy ended


class CheckpointStore:
    def __init__(self, redis: Redis, layout: KeyLayout, values: str) -> None:
        self.redis = redis
        self.layout = layout
        self.values = values  # this writer's value mode, as the checkpoint says

    async def load(self) -> LoadedCheckpoint:
        """Read the checkpoint and the marks; ConfigError when its rows have the other value mode."""
        with map_redis_errors("loading the checkpoint"):
            raw = await self.redis.hgetall(self.layout.checkpoint_key)
            progress = await self.redis.hgetall(self.layout.progress_key)
            marks = await self.redis.hkeys(self.layout.resync_key)
            settle = await self.redis.hgetall(self.layout.settle_key)
        resyncing = {as_str(k) for k in marks} - {GENERATION_FIELD}
        settling = {as_str(k): BinlogPosition.parse(as_str(v)) for k, v in settle.items()}
        resume = Progress.parse({as_str(k): as_str(v) for k, v in progress.items()})
        stored = decode_checkpoint(raw)
        recopy = recopy_reason(raw)
        if stored is None:
            return LoadedCheckpoint(None, "", recopy, resume, resyncing, settling)
        if not stored.marked:
            log.info(
                "the checkpoint %s was stored without its event (written by an older version): "
                "resuming without the history check this once; the next apply stores it",
                stored.id,
            )
        mode = self.values
        if stored.values not in (None, mode):
            # the script would meet keys of the other type in the middle of a call
            raise ConfigError(
                f"the rows under key prefix {self.layout.prefix!r} were written with "
                f"value_mode={stored.values}, and value_mode={mode} is set: keep value_mode="
                f"{stored.values}, or mirror into a new key_prefix (copy the tables there with "
                "`binlog-mirror snapshot`)"
            )
        return LoadedCheckpoint(stored.checkpoint, stored.id, recopy, resume, resyncing, settling)


def as_str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
