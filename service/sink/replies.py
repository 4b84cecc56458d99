"""Redis errors mapped to the error tree (here and only here, for the sink), and the replies of
the script calls a batch wrote (`SentBatch`), read after later calls were written."""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from redis import exceptions as rexc
from redis.asyncio import Redis

from service.errors import LeaseLost, RowsMissing, SinkAccessDenied, SinkError, SinkTlsRefused
from service.sink.channel import ScriptChannel
from service.sink.diagnose import rows_keyed_otherwise
from service.sink.keys import split_key
from service.sink.plan import Planner
from service.sink.unreachable import UNREACHABLE

__all__ = ["SentBatch", "map_redis_errors", "redis_access_denied"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def map_redis_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (rexc.AuthenticationError, rexc.AuthorizationError, rexc.NoPermissionError) as exc:
        raise redis_access_denied(what, exc) from exc
    except rexc.ResponseError as exc:
        if str(exc).startswith(("WRONGPASS", "NOAUTH", "NOPERM")):
            raise redis_access_denied(what, exc) from exc
        if str(exc).startswith("LEASE_LOST"):
            raise LeaseLost(f"{what}: {exc}") from exc
        if str(exc).startswith("ROWS_MISSING "):
            raise _rows_missing(what, str(exc)) from exc
        if isinstance(exc, rexc.OutOfMemoryError):  # refused at the call's first write
            raise SinkError(f"{what}: Redis is full (maxmemory), nothing was written: OOM {exc}") from exc
        raise SinkError(f"{what}: {exc}") from exc
    except UNREACHABLE as exc:
        if (refused := _certificate_refused(exc)) is not None:
            raise SinkTlsRefused(
                f"redis: TLS: the server's certificate was refused ({refused.verify_message}), {what} "
                "(check BINLOG_MIRROR_REDIS_TLS_CA_FILE or --redis-tls-ca-file: the CA that signed "
                "the Redis server's certificate; and the server's name in the URL)"
            ) from exc
        # str, not repr: redis-py's exceptions repr as just "network:ConnectionError"
        raise SinkError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _certificate_refused(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification error behind a connection error (redis-py raises its own
    ConnectionError from within the handler of the ssl one)."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None or isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def redis_access_denied(what: str, exc: Exception) -> SinkAccessDenied:
    setting = SinkAccessDenied.setting
    return SinkAccessDenied(f"redis: access denied: {exc}, {what} (check {setting} or --redis)")


def _rows_missing(what: str, reply: str) -> RowsMissing:
    """From `ROWS_MISSING resync {n}:{table id}` or `ROWS_MISSING row {n}:{table id} {key}`
    (n: the table id's length in bytes)."""
    kind, rest = reply.removeprefix("ROWS_MISSING ").split(" ", 1)
    size, named = rest.split(":", 1)
    raw = named.encode()
    tid, key = raw[: int(size)].decode(), raw[int(size) + 1 :].decode()
    why = f"table {tid} is being resynced" if kind == "resync" else f"no row at {key}"
    return RowsMissing(
        f"{what}: updates sent without whole rows, but {why}: nothing was written", tid, kind == "resync"
    )


@dataclass(slots=True)
class SentBatch:
    """The script calls written for one batch, in order: `replies()` waits for them."""

    channel: ScriptChannel
    epoch: int  # the channel's connection they were written on
    planner: Planner  # told which tables' updates must carry whole rows (RowsMissing)
    calls: list[tuple[str, Sequence[int]]] = field(default_factory=list)  # what; offsets of its txns
    redis: Redis | None = None  # to say why a row was missing (diagnose.rows_keyed_otherwise)

    async def replies(self) -> list[int]:
        """The first change sequence number of each transaction; raises the first call's error
        (SinkError, LeaseLost): the later calls of the batch then applied nothing either."""
        firsts: list[int] = []
        calls, self.calls = self.calls, []
        for what, offsets in calls:
            try:
                with map_redis_errors(what):
                    if self.channel.epoch != self.epoch:
                        raise rexc.ConnectionError("the connection was closed before the reply came")
                    first = int(await self.channel.reply())
            except RowsMissing as exc:
                await _whole_rows_for(self.planner, exc, self.redis)
                raise
            firsts += [first + o for o in offsets]
        return firsts


async def _whole_rows_for(planner: Planner, exc: RowsMissing, redis: Redis | None) -> None:
    """After RowsMissing, the table's updates carry whole rows (until its resync ends)."""
    if exc.resync:
        planner.marks.resync_in_flight(exc.table_id)
        return
    planner.marks.gap(exc.table_id)
    parts = split_key(exc.table_id)
    key = planner.key_columns(parts[0], parts[1]) if len(parts) == 2 else None
    if (
        redis is not None
        and key
        and await rows_keyed_otherwise(
            redis, planner.layout, parts[0], parts[1], key, planner.table_keys(parts[0], parts[1]).json
        )
    ):
        log.warning(
            "%s. The rows of %s in Redis are keyed by other columns than its current key (%s): a DDL "
            "that changed its primary key lies ahead in the binlog (the mirror is catching up, and "
            "information_schema already gives the new key). Its updates now carry whole rows; the "
            "resync that DDL starts rebuilds the table under the new key",
            exc,
            exc.table_id,
            ", ".join(key),
        )
    else:
        log.warning(
            "%s. The mirror of %s lacked a row that an UPDATE changed, and its other rows are keyed "
            "as its current key says: the row was removed from Redis outside binlog-mirror (deleted "
            "by hand, or evicted). Its updates now carry whole rows, which "
            "fills in each row they change; a resync of the table restores the rest",
            exc,
            exc.table_id,
        )
