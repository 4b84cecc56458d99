"""How the replicator's retry loop reports errors, kept out of the loop itself.

A retriable error is logged on every attempt (state `reconnecting`). A permanent one (an error
only an operator can fix: a password, a grant; `ReplicatorError.permanent`) is still retried with
backoff, but shows as state `failed` across the retry attempts (a new attempt's `starting` does
not hide it) and is logged once per `interval` (or when its message changes), not per attempt.
The state changes of a retry cycle (reconnecting/failed <-> starting) are logged at DEBUG.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from service.pipeline.status import State

__all__ = ["FailureLog"]

_RETRY_CYCLE = frozenset({(State.RECONNECTING, State.STARTING), (State.FAILED, State.STARTING)})


class FailureLog:
    def __init__(
        self, log: logging.Logger, *, interval: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = log
        self._interval = interval
        self._clock = clock
        self._last: tuple[str, float] | None = None  # (message, when) of the last permanent error logged
        self.suppressed = 0  # permanent-error attempts not logged since the last line

    @staticmethod
    def state(exc: BaseException) -> State:
        """The state while `exc` is retried."""
        return State.FAILED if getattr(exc, "permanent", False) else State.RECONNECTING

    @staticmethod
    def held(old: State, new: State) -> State:
        """A retry attempt of a failed replicator stays `failed` until it streams again."""
        return State.FAILED if old is State.FAILED and new is State.STARTING else new

    @staticmethod
    def level(old: State, new: State) -> int:
        """The log level of a state change: the steps of a retry cycle are DEBUG."""
        if (old, new) in _RETRY_CYCLE or (new, old) in _RETRY_CYCLE:
            return logging.DEBUG
        return logging.INFO

    def report(self, exc: BaseException, delay: float) -> None:
        """Log one retried error (every time, or once per interval when permanent)."""
        if not getattr(exc, "permanent", False):
            self._last = None
            self._log.warning("replication interrupted: %s; retrying in %.2fs", exc, delay)
            return
        now, message = self._clock(), str(exc)
        if self._last is not None and self._last[0] == message and now - self._last[1] < self._interval:
            self.suppressed += 1
            return
        same = self._last is not None and self._last[0] == message
        more = f" ({self.suppressed} more attempts failed alike)" if self.suppressed and same else ""
        self._log.error(
            "replication failed: %s; retrying with backoff, logged again in %gs%s",
            message,
            self._interval,
            more,
        )
        self._last, self.suppressed = (message, now), 0
