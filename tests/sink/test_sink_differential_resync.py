"""Differential tests of the resync scripts (lua/resync_rows.lua, resync_reread.lua,
resync_finish.lua): after random apply calls (the world of test_sink_differential.py), random
resync calls of the current generation or a stale one run through service/sink/reference_resync.py
and the real Lua; the replies and the keyspaces must agree."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
import redis as redis_sync
from hypothesis import given, settings
from hypothesis import strategies as st

from service.sink import ir
from service.sink.codec import resync_finish_args, resync_reread_args, resync_rows_args
from service.sink.keys import parse_mark
from service.sink.reference import partial_key_of
from service.sink.reference_keyspace import ScriptError
from service.sink.reference_resync import resync_finish, resync_reread, resync_rows
from service.sink.scripts import RESYNC_FINISH, RESYNC_REREAD, RESYNC_ROWS
from tests.sink.differential import MAX_UNIT_CALLS, Twin
from tests.sink.test_sink_differential import LAY, TABLES, drive, ids, rows, rule, start, steps
from tests.sink.test_sink_differential_plan import DERIVED, JSON_DERIVED

pytestmark = pytest.mark.redis


@dataclass
class ResyncCall:
    kind: str  # rows, reread, finish
    table: str
    stale_generation: bool
    rows: list[ir.WriteRow]
    merges: list[tuple[int, bool, bool]]  # reread: (id, its entry's merges as stored?, found)
    limit: int = 1
    copied_at: str = ""


@st.composite
def resync_calls(draw: st.DrawFn) -> ResyncCall:
    name = draw(st.sampled_from(list(TABLES)))
    kind = draw(st.sampled_from(["rows", "reread", "finish", "finish"]))
    new_rows = [
        ir.WriteRow(TABLES[name], str(n), draw(rows(name, n))) for n in draw(st.lists(ids, max_size=4))
    ]
    merges = draw(st.lists(st.tuples(ids, st.booleans(), st.booleans()), max_size=4))
    limit, copied = draw(st.sampled_from([1, 2, 100])), draw(st.sampled_from(["", "f.1:7"]))
    return ResyncCall(kind, name, draw(st.integers(0, 5)) == 0, new_rows, merges, limit, copied)


def generation(r: redis_sync.Redis, tid: str) -> int:
    """The generation a resync call of the table's resync in flight carries (-1: fenced)."""
    v = r.hget(LAY.resync_key, tid)
    if v is None:
        return 1
    gen, _ = parse_mark(v.decode("utf-8", "surrogateescape"))
    return -1 if gen is None else gen


def run(twin: Twin, call: ResyncCall, json_mode: bool, scripts: dict[str, Any]) -> None:
    t = TABLES[call.table]
    gen = generation(twin.r, t.tid) + (7 if call.stale_generation else 0)
    h = ir.ResyncHeader(LAY.lease_key, "tok", LAY.resync_key, t, gen)
    stale = LAY.stale_key("s", call.table)
    if call.kind == "rows":
        real = scripts["rows"](args=resync_rows_args(h, stale, call.rows))
        assert resync_rows(twin.ks, h, stale, call.rows) == real
    elif call.kind == "reread":
        partial = partial_key_of(t.touched)
        entries = []
        for n, stored, found in call.merges:
            merges = twin.r.hget(partial, str(n)) if stored else None
            row = ir.WriteRow(t, str(n), {"id": n, "a": n}) if found else None
            entries.append((str(n), merges.decode() if merges else "3", row))
        real = scripts["reread"](args=resync_reread_args(h, entries))
        assert resync_reread(twin.ks, h, entries) == real
    else:  # SPOP picks its own members: called until no stale row is left, compared then
        args = (h, stale, call.limit, LAY.settle_key, call.copied_at)
        for ex in (
            lambda: scripts["finish"](args=resync_finish_args(*args)),
            lambda: resync_finish(twin.ks, *args),
        ):
            for _ in range(MAX_UNIT_CALLS):
                reply = ex()
                if reply == -1 or reply[1] == 0:
                    break
    twin.check()


@pytest.mark.parametrize(
    ("json_mode", "derived"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["hash", "json", "hash-derived", "json-derived"],
)
def test_resync_calls_leave_the_same_keyspace(
    sink_redis: redis_sync.Redis, json_mode: bool, derived: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, t in list(TABLES.items()):  # the value mode: each table's (TableKeys.json)
        monkeypatch.setitem(TABLES, name, replace(t, json=json_mode))
    if derived:  # table "u" shaped: its entries follow the copies and the stale rows' removal
        monkeypatch.setitem(TABLES, "u", replace(TABLES["u"], derive=JSON_DERIVED if json_mode else DERIVED))
    scripts = {
        "rows": sink_redis.register_script(RESYNC_ROWS),
        "reread": sink_redis.register_script(RESYNC_REREAD),
        "finish": sink_redis.register_script(RESYNC_FINISH),
    }

    @settings(settings.get_profile("sink-differential"))
    @given(
        plan=steps(json_mode),
        on=st.tuples(rule, rule, rule, rule),
        calls=st.lists(resync_calls(), max_size=6),
    )
    def check(plan: Any, on: tuple[str, str, str, str], calls: list[ResyncCall]) -> None:
        twin = start(sink_redis, json_mode)
        drive(twin, plan, json_mode, {"c": on[:2], "g": on[2:]})
        for call in calls:
            try:
                run(twin, call, json_mode, scripts)
            except ScriptError as exc:  # the token is the lease's: no call is refused
                raise AssertionError(exc) from exc

    check()
