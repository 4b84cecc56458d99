"""What redis-py raises when a Redis does not answer (or answers with a connection-level error):
the errors the mirror retries rather than stops on."""

from __future__ import annotations

from redis import exceptions as rexc

__all__ = ["UNREACHABLE"]

# A Redis Cluster none of whose nodes answers raises RedisClusterException, which is no RedisError.
UNREACHABLE = (rexc.RedisError, rexc.RedisClusterException, OSError, TimeoutError)
