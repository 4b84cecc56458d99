"""The differential harness: one apply call through the reference executor and through the real
Lua on a real Redis, and the two keyspaces dumped in one form to compare byte for byte.

`encode` is the wire encoder (service/sink/codec.py's CallEncoder): the harness takes it as a
function, so it tests whichever path turns the IR into the script's ARGV.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import redis as redis_sync

from service.sink import ir
from service.sink.keys import KeyLayout
from service.sink.plain import plain_call
from service.sink.reference import Reply, ScriptError, execute
from service.sink.reference_keyspace import Arg, Dump, Keyspace
from service.sink.scripts import APPLY, GUARD

Encode = Callable[[ir.ApplyCall], list[Arg]]
Outcome = tuple[str, object]  # ("reply", int | bytes) or ("error", message)
MAX_UNIT_CALLS = 500  # a table-work unit loops until done: a bound, so a bug cannot hang the test


def redis_dump(r: redis_sync.Redis) -> Dump:
    """Every key of `r` as (type, contents), as Keyspace.dump gives them (stream ids left out)."""
    keys = sorted(r.scan_iter(count=1000))
    with r.pipeline(transaction=False) as p:
        for k in keys:
            p.type(k)
        types = [t.decode() for t in p.execute()]
        for k, t in zip(keys, types, strict=True):
            if t == "zset":  # a shaped table's index (service/sink/derive.py)
                p.zrange(k, 0, -1, withscores=True)
            else:
                {"string": p.get, "hash": p.hgetall, "set": p.smembers, "stream": p.xrange}[t](k)
        contents = p.execute()
    out: Dump = {}
    for k, t, c in zip(keys, types, contents, strict=True):
        if t == "set":
            c = frozenset(c)
        elif t == "zset":
            c = dict(c)
        elif t == "stream":
            c = [tuple(x for kv in fields.items() for x in kv) for _, fields in c]
        out[k] = (t, c)
    return out


@dataclass
class Twin:
    """The same calls through both executors; `check` compares what they did."""

    r: redis_sync.Redis
    layout: KeyLayout
    json_mode: bool
    encode: Encode
    ks: Keyspace

    def __post_init__(self) -> None:
        self.r.flushdb()  # its own database (tests/sink/conftest.py)
        self._script = self.r.register_script(APPLY)

    def _in_mode(self, op: ir.Op) -> ir.Op:
        t = getattr(op, "table", None)
        if isinstance(t, ir.TableKeys) and t.json != self.json_mode:
            return replace(op, table=replace(t, json=self.json_mode))  # type: ignore[call-arg]
        return op

    def _real(self, call: ir.ApplyCall) -> Outcome:
        try:
            return ("reply", self._script(args=self.encode(call)))
        except redis_sync.ResponseError as exc:
            return ("error", str(exc))

    def _ref(self, call: ir.ApplyCall) -> Outcome:
        try:
            reply: Reply = execute(self.ks, call, self.layout)
        except ScriptError as exc:
            return ("error", str(exc))
        return ("reply", reply)

    def call(self, call: ir.ApplyCall) -> Outcome:
        """One call through both; their replies (or error texts) must be equal, and so must the
        keyspaces after it. Its row ops' tables are in the twin's value mode (`TableKeys.json`)."""
        call = replace(call, ops=[self._in_mode(op) for op in call.ops])
        real, ref = self._real(call), self._ref(call)
        assert ref == real, f"reply: reference {ref!r}, Lua {real!r}"
        self.check()
        return real

    def unit(
        self, header: ir.ApplyHeader, first: Sequence[ir.Op], each: Sequence[ir.Op], unit: ir.Op
    ) -> None:
        """A unit of whole-table work, called again (with the cursor it replies, for CopyMembers)
        until it is done, as RedisMirror._run_table_work does: `first` (the fence) goes with the
        first call, `each` (op FC) with every call. SPOP and SSCAN pick members their own way, so
        the keyspaces are compared once the unit is done, not between its calls."""
        for ex, run in ((self._real, "Lua"), (self._ref, "reference")):
            op, ops = unit, [*first, *each, unit]
            for _ in range(MAX_UNIT_CALLS):
                kind, reply = ex(ir.ApplyCall(header, ops))
                assert kind == "reply", f"{run}: table work failed: {reply!r}"
                if reply in (0, b"0"):
                    break
                if isinstance(op, ir.CopyMembers):
                    assert isinstance(reply, bytes)
                    op = replace(op, cursor=reply.decode())
                ops = [*each, op]
            else:
                raise AssertionError(f"{run}: table work {unit!r} not done after {MAX_UNIT_CALLS} calls")
        self.check()

    def check(self) -> None:
        real, ref = redis_dump(self.r), self.ks.dump()
        if real != ref:
            diff = {
                k: (ref.get(k), real.get(k)) for k in real.keys() | ref.keys() if real.get(k) != ref.get(k)
            }
            raise AssertionError(f"keyspaces differ (key: (reference, Lua)): {diff!r}")


def plain_form(r: redis_sync.Redis, layout: KeyLayout, call: ir.ApplyCall) -> Outcome | None:
    """`call` in its plain MULTI/EXEC form (service/sink/plain.py) on `r`, as ScriptChannel sends
    it: ("reply", first sequence number), ("refused", the guard's reason), or None when the call
    has no plain form."""
    plain = plain_call(call, layout.tables_key, r.script_load(GUARD), layout.guard_key, layout.fence_key, ())
    if plain is None:
        return None
    conn = r.connection_pool.get_connection()
    try:
        conn.send_packed_command([plain.packed])
        replies = [conn.read_response(disable_decoding=True) for _ in range(plain.replies)]
    finally:
        r.connection_pool.release(conn)
    executed = replies[-1]
    if executed is None:  # the guard refused: the EXEC wrote nothing
        return ("refused", replies[1])
    return ("reply", executed[0] - call.header.nseq + 1)
