"""lua/derive.lua against its Python twin (service/sink/derive.py) on a real redis-server: random
sequences of stored rows (writes, rewrites that move the row key and its entries, deletes) with
values a key must escape (`:`, `\\`, a leading `__`, binary, negative numbers, fractions of a
second, NULLs); after each step the key space the script keeps is the one the twin computes from
the rows alive, byte for byte: the row copies, unique keys, set and zset members, the entries
recorded in `__derived` and how many entries each index holds (`__derivedcounts`): the rows alive
that have one. A change of spec (a changed section) moves the counts to the new spec's fields.
With hidden fields (a column a template names but columns/exclude leave out: derive.HIDDEN + its
name) the entries read them and the copies leave them out."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
import redis as redis_sync
from hypothesis import given, settings
from hypothesis import strategies as st

from service.sink.derive import (
    HIDDEN,
    Derivation,
    IndexSpec,
    Part,
    Ttl,
    counts_field,
    decode_entries,
    encode_entries,
    key_part,
    score_of,
)
from service.sink.keys import EXPIRY_SUFFIX
from service.sink.scripts import _COMMON, SWEEP
from service.sink.values import json_document
from service.verify.entries import stored_text

pytestmark = pytest.mark.redis

DERIVE = _COMMON + "derive(derive_spec(ARGV[1]), ARGV[2], ARGV[3], ARGV[4])\nreturn 1\n"
DERIVE_GONE = _COMMON + "return derive(derive_spec(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]) and 1 or 0\n"
BASE, DERIVED, COUNTS = "m:db:t:", "m:db:t:__derived", "m:db:t:__derivedcounts"

SPEC = Derivation(
    key=(Part("app:"), Part("tenant", field=True, integer=True), Part(":u:"), Part("id", field=True)),
    indexes=(
        IndexSpec("u", (Part("app:by-email:"), Part("email", field=True))),
        IndexSpec("s", (Part("app:by-status:"), Part("status", field=True))),
        IndexSpec("s", (Part("app:by-token:"), Part("token", field=True, binary=True))),
        IndexSpec("z", (Part("app:by-created"),), score="created", temporal=True),
        IndexSpec("z", (Part("app:by-amount:"), Part("tenant", field=True)), score="amount"),
    ),
)

texts = st.text(alphabet=st.sampled_from(["a", ":", "\\", "_", "é", "0", "-", " "]), min_size=0, max_size=6)
temporal = st.one_of(
    st.dates().map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat(" ")),
    st.just("0000-00-00 00:00:00"),
)
rows = st.fixed_dictionaries(
    {
        "tenant": st.integers(-3, 3).map(str),
        "status": st.one_of(st.none(), texts),
        "token": st.one_of(st.none(), st.binary(max_size=4)),
        "created": st.one_of(st.none(), temporal),
        "amount": st.one_of(
            st.none(),
            st.integers(-(2**63), 2**63).map(str),
            st.decimals(places=2, allow_nan=False, allow_infinity=False).map(str),
        ),
    }
)
steps = st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), rows)), min_size=1, max_size=12)


def stored(suffix: str, version: int, row: dict[str, Any]) -> dict[str, str | bytes]:
    # the unique column differs per row (the source's UNIQUE index guarantees it)
    out: dict[str, str | bytes] = {"id": suffix, "email": f"{suffix}@{version}:x"}
    out.update({k: v for k, v in row.items() if v is not None})
    return out


def hide(spec: Derivation, field: str) -> Derivation:
    """`spec` with `field` stored hidden (its templates and scores read `HIDDEN + field`)."""

    def parts(ps: tuple[Part, ...]) -> tuple[Part, ...]:
        return tuple(replace(p, text=HIDDEN + p.text) if p.field and p.text == field else p for p in ps)

    return replace(
        spec,
        key=parts(spec.key) if spec.key is not None else None,
        indexes=tuple(
            replace(i, parts=parts(i.parts), score=HIDDEN + field if i.score == field else i.score)
            for i in spec.indexes
        ),
        hidden=True,
    )


def hidden_row(row: dict[str, Any], field: str) -> dict[str, Any]:
    return {HIDDEN + k if k == field else k: v for k, v in row.items()}


def expected(alive: dict[str, dict[str, str | bytes]], spec: Derivation = SPEC) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    counts: dict[bytes, bytes] = {}
    for suffix, row in alive.items():
        member, entries = spec.entries(row, BASE + suffix)
        assert member is not None
        record = encode_entries(spec.tag, member, entries).encode()
        out.setdefault(DERIVED.encode(), {})[suffix.encode()] = record
        for e in entries:  # counted from the rows, not from the record
            f = counts_field(spec.tag, e.index).encode()
            counts[f] = str(int(counts.get(f, b"0")) + 1).encode()
        if spec.key is not None:
            assert [e.index for e in entries if e.kind == "k"] == [0]
        for e in entries:
            key = e.key.encode()
            if e.kind == "k":  # (less the hidden fields)
                out[key] = {
                    k.encode(): v if isinstance(v, bytes) else v.encode()
                    for k, v in row.items()
                    if not k.startswith(HIDDEN)
                }
            elif e.kind == "u":
                out[key] = member.encode()
            elif e.kind == "s":
                out.setdefault(key, set()).add(member.encode())
            else:
                out.setdefault(key, {})[member.encode()] = float(e.score)
    if counts:
        out[COUNTS.encode()] = counts
    return out


def keyspace(r: redis_sync.Redis) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    for key in r.scan_iter(count=1000):
        if key.startswith(BASE.encode()) and key not in (DERIVED.encode(), COUNTS.encode()):
            continue  # the stored rows themselves (written by the test)
        kind = r.type(key)
        if kind == b"hash":
            out[key] = r.hgetall(key)
        elif kind == b"string":
            out[key] = r.get(key)
        elif kind == b"set":
            out[key] = r.smembers(key)
        else:
            out[key] = dict(r.zrange(key, 0, -1, withscores=True))
    return out


# the same table in another shape: the status index gone, the others renumbered, no key template
RESHAPED = Derivation(key=None, indexes=(SPEC.indexes[0], SPEC.indexes[3], SPEC.indexes[2]))


@settings(settings.get_profile("sink-differential"))
@given(steps, st.booleans(), st.sampled_from([None, "tenant", "status", "created"]))
def test_derive_lua_keeps_what_its_twin_computes(
    sink_redis: redis_sync.Redis, plan: list[Any], reshape: bool, hidden: str | None
) -> None:
    r = sink_redis
    r.flushdb()
    script = r.register_script(DERIVE)
    derivation = hide(SPEC, hidden) if hidden else SPEC
    spec = derivation.spec_text()
    alive: dict[str, dict[str, str | bytes]] = {}
    for version, (n, row) in enumerate(plan):
        suffix = f"r{n}"
        key = BASE + suffix
        r.delete(key)
        if row is None:
            alive.pop(suffix, None)
        else:
            alive[suffix] = hidden_row(stored(suffix, version, row), hidden or "")
            r.hset(key, mapping=alive[suffix])  # type: ignore[arg-type]
        script(args=[spec, key, DERIVED, suffix])
        assert keyspace(r) == expected(alive, derivation)
    if hidden:  # the twin's entries of the hidden row are those of the row with the field shown
        for suffix, row in alive.items():
            shown = {k.removeprefix(HIDDEN): v for k, v in row.items()}
            assert derivation.entries(row, BASE + suffix) == SPEC.entries(shown, BASE + suffix)
        return
    if reshape:  # a changed section: every row derived again in the new shape (a resync)
        for suffix in sorted(alive):
            script(args=[RESHAPED.spec_text(), BASE + suffix, DERIVED, suffix])
        assert keyspace(r) == expected(alive, RESHAPED)
        n_copies, per_index = RESHAPED.counts(r.hgetall(COUNTS))
        assert n_copies == 0 and per_index[0] == len(alive)  # (the unique column: every row has one)


def test_records_carry_the_spec_tag_and_index_numbers_the_counts_are_of() -> None:
    member, entries = SPEC.entries({"tenant": "1", "id": "7", "email": "e", "amount": "2"}, BASE + "r")
    assert member == "app:1:u:7" and [(e.kind, e.index) for e in entries] == [("k", 0), ("u", 1), ("z", 5)]
    raw = encode_entries(SPEC.tag, member, entries)
    assert raw.startswith(f"12:{SPEC.tag}9:{member}k") and decode_entries(raw) == (SPEC.tag, member, entries)
    fields = {counts_field(SPEC.tag, 0): "3", counts_field(SPEC.tag, 5): "2", counts_field("other", 1): "9"}
    assert SPEC.counts(fields) == (3, (0, 0, 0, 0, 2))  # another shape's fields are not counted
    assert SPEC.counts({k.encode(): v.encode() for k, v in fields.items()}) == (3, (0, 0, 0, 0, 2))


def test_key_parts_and_scores_as_documented() -> None:
    assert key_part("__a:b\\c", False) == "\\__a\\:b\\\\c" and key_part(b"\x00\xff", True) == "0x00ff"
    assert score_of("1970-01-02", True) == "86400" and score_of("1969-12-31 23:59:59.5", True) == "-0.5"
    assert score_of("0000-00-00", True) is None and score_of("12.50", False) == "12.5"


TTL_SPEC = Derivation(
    key=(Part("app:u:"), Part("id", field=True)),
    indexes=(IndexSpec("s", (Part("app:by-status:"), Part("status", field=True))),),
    ttl=Ttl(at="created", temporal=True),
)
EXPIRY = BASE + EXPIRY_SUFFIX


@settings(settings.get_profile("sink-differential"))
@given(
    st.one_of(
        st.none(),
        st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(
            lambda d: d.isoformat(" ")
        ),
        st.just("0000-00-00 00:00:00"),
    ),
    st.sampled_from([0, 3600, -5400]),
)
def test_derive_lua_sets_the_expiry_its_twin_computes(
    sink_redis: redis_sync.Redis, created: str | None, offset: int
) -> None:
    """`ttl.at`: the row and its copy expire at the instant the twin computes (PEXPIRETIME, ms); a
    NULL or zero date: no expiry; an instant already past: the row and every entry go now."""
    r = sink_redis
    r.flushdb()
    spec = replace(TTL_SPEC, ttl=Ttl(at="created", temporal=True, offset=offset))
    row: dict[str, str | bytes] = {"id": "7", "status": "new"} | ({"created": created} if created else {})
    key = BASE + "7"
    r.hset(key, mapping=row)  # type: ignore[arg-type]
    gone = r.register_script(DERIVE_GONE)(args=[spec.spec_text(), key, DERIVED, "7"])
    now_ms = int(r.time()[0]) * 1000
    assert spec.ttl is not None
    at = spec.ttl.expires_ms(row, now_ms)
    if at is not None and at <= now_ms:
        assert gone == 1 and r.keys("*") == [], "an expiry already past leaves no key"
        return
    if at is not None and at <= now_ms + 2000:
        return  # past by the script's clock or not: either is right
    assert gone == 0
    assert r.hgetall("app:u:7") == {k.encode(): v.encode() for k, v in row.items()}  # type: ignore[union-attr]
    assert r.smembers("app:by-status:new") == {b"app:u:7"}
    if at is None:
        assert r.pttl(key) == -1 and r.pttl("app:u:7") == -1 and r.zscore(EXPIRY, "7") is None
    else:
        assert r.pexpiretime(key) == at and r.pexpiretime("app:u:7") == at
        assert r.zscore(EXPIRY, "7") == at


def test_seconds_renew_and_the_sweep_removes_expired_rows_entries(sink_redis: redis_sync.Redis) -> None:
    """`ttl.seconds`: each derive sets now + seconds on the row and its copy; once Redis expired
    them, lua/sweep.lua removes the set member, the unique key, `__derived` and the `__keys`
    member, and corrects the entry of a row written again since."""
    r = sink_redis
    r.flushdb()
    spec = Derivation(
        key=(Part("app:u:"), Part("id", field=True)),
        indexes=(
            IndexSpec("u", (Part("app:by-email:"), Part("email", field=True))),
            IndexSpec("s", (Part("app:by-status:"), Part("status", field=True))),
        ),
        ttl=Ttl(seconds=1),
    ).spec_text()
    derive, sweep = r.register_script(DERIVE_GONE), r.register_script(SWEEP)
    index = BASE + "__keys"
    for n in (1, 2):
        r.hset(f"{BASE}{n}", mapping={"id": str(n), "email": f"{n}@x", "status": "new"})
        r.sadd(index, str(n))
        assert derive(args=[spec, f"{BASE}{n}", DERIVED, str(n)]) == 0
        assert 0 < r.pttl(f"{BASE}{n}") <= 1000 and 0 < r.pttl(f"app:u:{n}") <= 1000
    r.persist(f"{BASE}2")  # as if written again with no expiry since
    deadline = time.monotonic() + 10
    while r.exists(f"{BASE}1") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sweep(args=[BASE.rstrip(":"), index, 1000]) == [1, 2]
    assert not r.exists("app:by-email:1@x", "app:u:1") and r.smembers("app:by-status:new") == {b"app:u:2"}
    assert r.smembers(index) == {b"2"} and r.hkeys(DERIVED) == [b"2"] and r.zcard(EXPIRY) == 0


JSON_SPEC = replace(SPEC, json=(("created", "t"), ("token", "b")))
typed_rows = st.fixed_dictionaries(
    {
        "tenant": st.integers(-(2**63), 2**64 - 1),
        "status": st.one_of(st.none(), st.text(max_size=6)),  # control characters, quotes, emoji
        "token": st.one_of(st.none(), st.binary(max_size=5)),
        "created": st.one_of(
            st.none(),
            st.datetimes(timezones=st.just(dt.UTC)),
        ),
        "amount": st.one_of(st.none(), st.decimals(places=2, allow_nan=False, allow_infinity=False)),
    }
)


@settings(settings.get_profile("sink-differential"))
@given(
    st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), typed_rows)), min_size=1, max_size=8),
    st.sampled_from([None, "tenant", "token"]),
)
def test_derive_lua_reads_json_rows_as_their_hash_text(
    sink_redis: redis_sync.Redis, plan: list[Any], hidden: str | None
) -> None:
    """value_mode json: derive reads the fields from the document (numbers as their literal text,
    strings unescaped, base64 binary, TIMESTAMP's `T`/`Z`) and keeps the entries the twin computes
    from the hash text of the same row; the copy is the document (less a hidden member)."""
    r = sink_redis
    r.flushdb()
    script = r.register_script(DERIVE)
    derivation = JSON_SPEC
    if hidden:
        conv = tuple((HIDDEN + f if f == hidden else f, c) for f, c in JSON_SPEC.json or ())
        derivation = replace(hide(JSON_SPEC, hidden), json=tuple(sorted(conv)))
    spec = derivation.spec_text()
    shown: dict[str, bytes] = {}
    docs: dict[str, bytes] = {}
    for version, (n, row) in enumerate(plan):
        suffix = f"r{n}"
        key = BASE + suffix
        if row is None:
            docs.pop(suffix, None)
            r.delete(key)
        else:
            typed = {"id": suffix, "email": f"{suffix}@{version}:x", **row}
            shown[suffix] = json_document({k: v for k, v in typed.items() if k != hidden})
            typed = hidden_row(typed, hidden or "")
            docs[suffix] = json_document(typed)
            r.set(key, docs[suffix])
            assert derivation.stored_fields(docs[suffix]) == stored_text(typed)
        script(args=[spec, key, DERIVED, suffix])
    want: dict[bytes, Any] = {}
    for suffix, doc in docs.items():
        member, entries = derivation.entries(derivation.stored_fields(doc), BASE + suffix)
        assert member is not None
        want.setdefault(DERIVED.encode(), {})[suffix.encode()] = encode_entries(
            derivation.tag, member, entries
        ).encode()
        for e in entries:
            key_b = e.key.encode()
            if e.kind == "k":
                want[key_b] = shown[suffix]  # the document less its hidden member
            elif e.kind == "u":
                want[key_b] = member.encode()
            elif e.kind == "s":
                want.setdefault(key_b, set()).add(member.encode())
            else:
                want.setdefault(key_b, {})[member.encode()] = float(e.score)
    got = {k: v for k, v in keyspace(r).items() if not k.startswith(BASE.encode()) or k == DERIVED.encode()}
    assert got == want
