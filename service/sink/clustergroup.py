"""A Redis Cluster's slot group (service/sink/cluster.py): the single-node mirror on one table's
keys (`GroupMirror`), and the channel that sends its script calls through the cluster client,
routed by a key of the group (`ClusterChannel`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

from redis import exceptions as rexc
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from service.checkpoint import Checkpoint
from service.sink.channel import ScriptChannel
from service.sink.codec import Arg, CallEncoder
from service.sink.fks import ForeignKeys
from service.sink.ir import ApplyCall
from service.sink.keys import GroupLayout
from service.sink.mirror import MirrorOptions, RedisMirror
from service.sink.plan import KeyColumns, SkipCounter
from service.sink.scripts import APPLY

__all__ = ["ClusterChannel", "GroupMirror", "as_text"]


class ClusterChannel(ScriptChannel):
    """The apply script's calls for one slot group, through redis-py's cluster client: routed by
    `key` (a key of the group, passed as the call's only KEYS entry: the script reads ARGV only),
    following MOVED/ASK redirects; a node without the script (a new master after a failover, or
    one that joined) gets it loaded again (NOSCRIPT).

    Each call is waited for as it is written (no pipelining across a cluster client); its reply,
    or error reply, is kept for `reply` in order, as ScriptChannel does."""

    def __init__(self, cluster: RedisCluster, script: str, key: str, encoder: CallEncoder) -> None:
        super().__init__(cast(Redis, cluster), script, encoder=encoder)
        self._cluster = cluster
        self._key = key
        self._replies: deque[Any] = deque()

    async def _eval(self, args: Sequence[Arg]) -> Any:
        if not self._sha:
            self._sha = as_text(await self._cluster.script_load(self._script))  # on every master
        try:
            return await self._cluster.evalsha(self._sha, 1, self._key, *args)
        except rexc.NoScriptError:
            self._sha = as_text(await self._cluster.script_load(self._script))
            return await self._cluster.evalsha(self._sha, 1, self._key, *args)

    async def send(self, call: ApplyCall | Sequence[Arg]) -> None:
        try:
            value: Any = await self._eval(self._args(call))
        except rexc.ResponseError as exc:  # an error reply: raised by `reply`, in order
            value = exc
        except BaseException:
            await self.close()
            raise
        self._replies.append(value)

    async def call(self, args: ApplyCall | Sequence[Arg]) -> Any:
        return await self._eval(self._args(args))

    async def reply(self) -> Any:
        value = self._replies.popleft()
        if isinstance(value, BaseException):
            raise value
        return value

    async def close(self) -> None:
        self.epoch += 1
        self._replies.clear()


class GroupMirror(RedisMirror):
    """One slot group: the single-node mirror on its `GroupLayout` keys (one table's, or a
    document group's tables')."""

    def __init__(
        self,
        cluster: RedisCluster,
        layout: GroupLayout,
        key_columns: KeyColumns,
        options: MirrorOptions,
        skipped: SkipCounter,
        shape_of: Callable[[str, str], str] | None = None,
        derive_of: Callable[[str, str], str] | None = None,
        json_of: Callable[[str, str], bool] | None = None,
        foreign_keys: Callable[[], ForeignKeys] | None = None,
    ) -> None:
        # the change log and `__seq` are the global group's (a group's own `__seq` only counts)
        opts = replace(options, changelog_maxlen=None, plain_inserts=False)  # one script per call
        super().__init__(
            cast(Redis, cluster),
            layout,
            key_columns,
            opts,
            token="#0",
            skipped=skipped,
            shape_of=shape_of,
            derive_of=derive_of,
            json_of=json_of,
            foreign_keys=foreign_keys,  # a document group's own cascades
        )
        self.chain.channel = ClusterChannel(cluster, APPLY, layout.checkpoint_key, self.encoder)
        self.resyncs.route = [layout.checkpoint_key]
        self.sweeper.route = [layout.checkpoint_key]
        self.at: Checkpoint | None = None  # the group's stored checkpoint: what it has applied

    async def check_server(self) -> None:
        """Done once for every master by ClusterMirror.check_server."""


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
