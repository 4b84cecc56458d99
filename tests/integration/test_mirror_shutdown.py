"""Clean shutdown of `python -m service run` on SIGTERM/SIGINT under load, and the random workload in
`--value-mode json`."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from tests.integration.mirror_helpers import (
    Workload,
    actual,
    actual_json,
    create_schema,
    expected,
    master_position,
    stored_position,
    unique_names,
    wait_applied,
)
from tests.integration.test_mirror_crash import (
    _ledger_ids,
    _start,
    _stop,
    _wait_advance,
    _Writer,
)

pytestmark = pytest.mark.integration


def _settle(redis_url: str, prefix: str, stack: LocalStack, db: str, json: bool) -> None:
    """Catch up with the source, then Redis == SELECT * (a resync after the last ALTER may still run)."""
    wait_applied(redis_url, prefix, master_position(stack), timeout=40)
    mirror = actual_json if json else actual
    for _ in range(100):
        if mirror(redis_url, prefix, db) == expected(stack, db, json=json):
            break
        time.sleep(0.1)
    assert mirror(redis_url, prefix, db) == expected(stack, db, json=json)


def _end_on_commit(wl: Workload) -> None:
    """The last thing on the source is a commit (after a FLUSH BINARY LOGS the source's position
    would lie past the last transaction)."""
    wl.ledger += 1
    with wl.conn.cursor() as cur:
        cur.execute("INSERT INTO ledger VALUES (%s, 'last')", (wl.ledger,))
    wl.conn.commit()


@pytest.mark.parametrize(
    ("sig", "mode"), [(signal.SIGTERM, "hash"), (signal.SIGINT, "json")], ids=["SIGTERM", "SIGINT-json"]
)
def test_signal_stops_cleanly_under_load_and_restart_resumes(
    stack: LocalStack, tmp_path: Path, sig: signal.Signals, mode: str
) -> None:
    """A signal while transactions flow: exit 0 within seconds, the lease released at once (its ttl
    here is 30 s, so a lease left behind would still be there and block the restart), and a new
    process resumes exactly: Redis == SELECT *, every ledger transaction applied once."""
    info = stack.load()
    assert info is not None
    db, prefix = unique_names()
    create_schema(stack, db)
    log = tmp_path / "run.log"
    args = ("--value-mode", mode)
    proc = _start(stack, db, prefix, log, *args, lease_ttl=30)
    wl = Workload(stack, db, seed=17)
    writer = _Writer(wl)
    try:
        wait_applied(info.redis_url, prefix, None, timeout=40)  # bootstrapped
        writer.start()
        for _ in range(3):  # applying the workload, several batches in
            _wait_advance(info.redis_url, prefix, stored_position(info.redis_url, prefix))
            time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(10)
        took = time.monotonic() - sent
        r = redis_sync.Redis.from_url(info.redis_url)
        lease = r.get(f"{prefix}:__lease")
        r.close()
        text = log.read_text(errors="replace")
        assert code == 0, text[-3000:]
        assert took < 5, took
        assert lease is None, "the writer lease was not released"
        assert f"{sig.name} received" in text and "stopped cleanly at" in text, text[-3000:]
        assert "writer lease released" in text and "Traceback" not in text, text[-3000:]

        stopped_at = stored_position(info.redis_url, prefix)
        restarted = time.monotonic()
        proc = _start(stack, db, prefix, log, *args, lease_ttl=30)
        _wait_advance(info.redis_url, prefix, stopped_at, timeout=20)  # the writer kept committing
        assert time.monotonic() - restarted < 10  # no wait for a leftover lease
        time.sleep(0.5)
        writer.done.set()
        writer.join()
        assert writer.error is None, writer.error
        _end_on_commit(wl)
        _settle(info.redis_url, prefix, stack, db, json=mode == "json")
        assert _ledger_ids(info.redis_url, prefix) == list(range(1, wl.ledger + 1))
        assert writer.steps > 30, writer.steps
    finally:
        writer.done.set()
        _stop(proc)
        wl.close()
    assert "Traceback" not in log.read_text(errors="replace")
