"""Websocket sends share the event loop with the apply, the lease and the health checks: the
pacer holds them to a share of the loop's time while other work waits (issue 25)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

__all__ = ["SendPacer"]


class SendPacer:
    """Holds websocket sends to `share` of the event loop's CPU time while other work wants it,
    and lets them use the loop's idle time otherwise.

    A sender waits for credit (`wait`), times its send (`timed`: the thread's CPU time, or
    nothing when the send suspended, as it does on a socket whose buffers are full: it waited,
    it did not work), and pays for it (`charge`), which also yields to the loop: between any two
    sends everything else that is ready runs. Credit is earned by the CPU time the rest of the
    loop takes, at `share / (1 - share)` per second (at 0.5: a second of sends per second of
    anything else), and kept up to BURST. While it is spent, senders queue (FIFO, woken one at a
    time: 200 senders woken at once cost more than their sends) and the first of them takes turns
    of the loop; a turn that took almost no CPU (nothing else ran) refills the credit. So an idle
    mirror fans out at full speed, and a busy one keeps at least `1 - share` of the loop under
    any number of subscribers. CPU time, not wall time: a process the OS keeps waiting earns
    nothing."""

    IDLE_TURN = 0.0002  # a loop turn that took less CPU than this ran nothing but the probe
    BURST = 0.002  # the most credit kept: sends run in slices of about this much

    def __init__(self, share: float = 0.5) -> None:
        if not 0 < share < 1:
            raise ValueError("share must be between 0 and 1")
        self.ratio = share / (1 - share)
        self._credit = self.BURST
        self._at = time.thread_time()
        self._queue = asyncio.Lock()  # senders waiting for credit, first come first served
        self.waits = 0  # loop turns senders waited for credit (contention)

    async def wait(self) -> None:
        """Return once there is credit for a send."""
        if self._credit >= 0 and not self._queue.locked():
            return
        async with self._queue:
            while self._credit < 0:
                self.waits += 1
                start = time.thread_time()
                await asyncio.sleep(0)
                if time.thread_time() - start < self.IDLE_TURN:  # nothing else wanted the loop
                    self._credit = self.BURST
                    self._at = time.thread_time()
                else:
                    self._refill()

    @staticmethod
    async def timed(send: Awaitable[None]) -> float:
        """Await `send`; the CPU seconds it took, or 0.0 when it suspended."""
        ran: list[bool] = []  # the loop ran its callbacks: the send suspended
        handle = asyncio.get_running_loop().call_soon(ran.append, True)
        start = time.thread_time()
        try:
            await send
        finally:
            handle.cancel()
        return 0.0 if ran else time.thread_time() - start

    async def charge(self, seconds: float) -> None:
        """Pay for a send that took `seconds` of CPU, and give the loop a turn."""
        self._refill()
        # the refill counted the send's own time as earning: take that back with the charge
        self._credit -= seconds * (1 + self.ratio)
        await asyncio.sleep(0)

    def _refill(self) -> None:
        now = time.thread_time()
        self._credit = min(self.BURST, self._credit + (now - self._at) * self.ratio)
        self._at = now
