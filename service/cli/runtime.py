"""Process settings for the long-running commands (`stream`, `run`)."""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "tune_gc"]

# Each decoded row allocates objects (its RowChange, tuples) that live until its transaction is
# applied. At CPython's default threshold (700) the collector runs every 700 of them, re-walking
# the transaction in flight each time: about 20% of the CPU of streaming 1,000-row transactions
# (docs/BENCHMARKS.md). They are freed by reference counting anyway (the decoder builds no
# cycles), so collecting 70 times less often costs little memory.
GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Call once started: start-up objects (modules, settings, connections) live for good and
    leave the collector's passes (`gc.freeze`); young collections run every GEN0_THRESHOLD
    allocations."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
