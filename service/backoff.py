"""Reconnect delays: a pure value object, shared by the transport's reconnect loop and the
pipeline's retry loop (each owns its sleeping); hence outside both packages."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: delay(n) is uniform in [0, min(cap, base * 2**n)].
    `failures` counts consecutive failed attempts; tests pin `random.seed`."""

    base: float = 0.5
    cap: float = 30.0

    def ceiling(self, failures: int) -> float:
        return min(self.cap, self.base * 2.0 ** min(failures, 32))

    def delay(self, failures: int) -> float:
        return random.uniform(0, self.ceiling(failures))
