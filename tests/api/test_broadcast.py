"""The Broadcaster as pure logic: filters, sequence numbers, ring buffer, gaps, drops."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pytest
from apihelpers import change, txn

from api.broadcast import (
    CLOSE_GOING_AWAY,
    CLOSE_LAGGING,
    CLOSE_STREAM_RESET,
    MAX_BATCH_CHARS,
    Batch,
    Broadcaster,
    Closed,
    Entry,
    EventFilter,
    FilterError,
    Gap,
    Subscription,
    changes_messages,
)
from service.binlog.rowchange import Op


def drain(sub: Subscription) -> list[Entry | Gap | Closed]:
    """Everything a subscription would yield right now, up to and including a Closed."""
    out: list[Entry | Gap | Closed] = []
    while (item := sub.get_nowait()) is not None:
        out.append(item)
        if isinstance(item, Closed):
            break
    return out


def seqs(items: list[Entry | Gap | Closed]) -> list[int]:
    return [i.seq for i in items if isinstance(i, Entry)]


# --- filters --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tables", "schema", "table", "wanted"),
    [
        pytest.param(None, "a", "b", True, id="no-filter"),
        pytest.param("shop.*", "shop", "orders", True, id="schema-glob"),
        pytest.param("shop.*", "crm", "orders", False, id="schema-glob-other"),
        pytest.param(["shop.ord?rs", "crm.users"], "shop", "orders", True, id="question-mark"),
        pytest.param("shop.orders", "shop", "orders_archive", False, id="exact-not-prefix"),
        pytest.param("*.users", "crm", "users", True, id="table-glob"),
        pytest.param("Shop.orders", "shop", "orders", False, id="case-sensitive"),
        pytest.param("shop.[ab]*", "shop", "alpha", True, id="bracket"),
    ],
)
def test_table_patterns(tables: object, schema: str, table: str, wanted: bool) -> None:
    flt = EventFilter.parse(tables)  # type: ignore[arg-type]
    assert flt.wants_table(schema, table) is wanted
    assert flt.wants_table(schema, table) is wanted  # cached answer is the same


def test_ops_and_columns_filter() -> None:
    flt = EventFilter.parse("shop.*", "insert,DELETE", ["id"])
    assert flt.matches(change(Op.INSERT)) and flt.matches(change(Op.DELETE))
    assert not flt.matches(change(Op.UPDATE))
    assert flt.columns == ("id",)
    assert flt.describe() == {"tables": ["shop.*"], "ops": ["delete", "insert"], "columns": ["id"]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"tables": "orders"}, "must be schema.table", id="no-dot"),
        pytest.param({"tables": "a.b.c"}, "must be schema.table", id="two-dots"),
        pytest.param({"ops": "upsert"}, "unknown op", id="bad-op"),
        pytest.param({"columns": []}, "at least one column", id="empty-columns"),
        pytest.param({"tables": [1]}, "must be strings", id="not-a-string"),
    ],
)
def test_bad_filters_are_refused_with_a_reason(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(FilterError, match=message):
        EventFilter.parse(**kwargs)  # type: ignore[arg-type]


def test_exact_tables_are_the_patterns_without_globs() -> None:
    assert EventFilter.parse(["shop.orders", "crm.*", "x.y?"]).exact_tables == (("shop", "orders"),)


# --- sequence, order, fan-out ----------------------------------------------------------------


def test_each_subscriber_gets_exactly_its_matching_changes_in_order() -> None:
    hub = Broadcaster(buffer_size=100, queue_size=100)
    everything = hub.subscribe(EventFilter())
    orders = hub.subscribe(EventFilter.parse("shop.orders"))
    deletes = hub.subscribe(EventFilter.parse(ops="delete"))
    hub.on_applied(txn(change(Op.INSERT), change(Op.INSERT, table="users")), 1)
    hub.on_applied(txn(change(Op.DELETE, table="users")), 3)
    hub.on_applied(txn(change(Op.UPDATE), change(Op.DELETE)), 4)
    assert seqs(drain(everything)) == [1, 2, 3, 4, 5]
    assert seqs(drain(orders)) == [1, 4, 5]
    assert seqs(drain(deletes)) == [3, 5]
    assert hub.last_seq == 5 and hub.oldest_seq == 1 and hub.published == 5


def test_an_empty_transaction_keeps_the_sequence() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter())
    hub.on_applied(txn(change()), 1)
    hub.on_applied(txn(), 2)  # DDL only: no changes, same next seq
    hub.on_applied(txn(change()), 2)
    assert seqs(drain(sub)) == [1, 2]
    assert hub.gaps == 0


def test_encoding_is_the_row_change_plus_seq() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter.parse(columns="id,amount"))
    values: dict[str, Any] = {
        "id": 7,
        "amount": Decimal("1.50"),
        "blob": b"\x00\xff",
        "at": dt.datetime(2024, 1, 2, 3, 4, 5),
    }
    hub.on_applied(txn(change(Op.UPDATE, **values)), 10)
    (entry,) = drain(sub)
    assert isinstance(entry, Entry)
    projected = orjson.loads(entry.message(sub.filter.columns))
    assert projected["type"] == "change" and projected["seq"] == 10
    assert projected["op"] == "update" and (projected["schema"], projected["table"]) == ("shop", "orders")
    assert projected["before"] == projected["after"] == {"id": 7, "amount": "1.50"}
    full = orjson.loads(entry.message())
    assert full["after"]["blob"] == "AP8="  # canonical forms (docs/row-format.md)
    assert full["after"]["at"] == "2024-01-02 03:04:05"
    assert full["position"]["file"] == "bin.000001"
    assert entry.message() is entry.message()  # encoded once


# --- resume, ring buffer and gaps --------------------------------------------------------------


def test_resume_replays_only_newer_matching_changes() -> None:
    hub = Broadcaster(buffer_size=100)
    for i in range(1, 7):
        hub.on_applied(txn(change(table="orders" if i % 2 else "users")), i)
    sub = hub.subscribe(EventFilter.parse("shop.orders"), after=2, stream=hub.stream_id)
    hub.on_applied(txn(change()), 7)
    assert seqs(drain(sub)) == [3, 5, 7]


def test_resume_from_the_newest_seq_replays_nothing() -> None:
    hub = Broadcaster()
    hub.on_applied(txn(change(), change()), 1)
    sub = hub.subscribe(EventFilter(), after=2)
    assert drain(sub) == []


def test_resume_older_than_the_ring_gets_a_gap_first() -> None:
    hub = Broadcaster(buffer_size=3)
    for i in range(1, 11):
        hub.on_applied(txn(change()), i)
    assert hub.oldest_seq == 8
    items = drain(hub.subscribe(EventFilter(), after=4))
    assert items[0] == Gap(5, 7, "requested changes are no longer buffered")
    assert seqs(items) == [8, 9, 10]
    assert orjson.loads(items[0].message()) == {
        "type": "gap",
        "from_seq": 5,
        "to_seq": 7,
        "reason": "requested changes are no longer buffered",
    }
    assert hub.gaps == 1


def test_resume_with_no_ring_at_all_is_a_gap() -> None:
    hub = Broadcaster(buffer_size=0)
    hub.on_applied(txn(change(), change()), 1)
    items = drain(hub.subscribe(EventFilter(), after=0))
    assert items == [Gap(1, 2, "requested changes are no longer buffered")]


def test_resume_from_another_stream_or_the_future_is_an_open_gap() -> None:
    hub = Broadcaster()
    hub.on_applied(txn(change()), 1)
    (gap,) = drain(hub.subscribe(EventFilter(), after=0, stream="someone-else"))
    assert isinstance(gap, Gap) and gap.first == 1 and gap.last is None and "gone" in gap.reason
    (ahead,) = drain(hub.subscribe(EventFilter(), after=50))
    assert isinstance(ahead, Gap) and ahead.last is None and "ahead" in ahead.reason


@pytest.mark.parametrize(
    ("after", "first_seq", "expected"),
    [
        pytest.param(9, 10, [10], id="contiguous"),
        pytest.param(9, 15, [Gap(10, 14, "applied before this server started"), 15], id="missed-some"),
        pytest.param(
            20, 15, [Gap(21, None, "seq 20 is ahead of this stream (next is 15)"), 15], id="counter-reset"
        ),
    ],
)
def test_resume_on_a_fresh_hub_is_settled_at_the_first_publish(
    after: int, first_seq: int, expected: list[object]
) -> None:
    """Seqs outlive the process (Redis counter): a restarted server checks continuity later."""
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter(), after=after)
    assert drain(sub) == []
    hub.on_applied(txn(change()), first_seq)
    hub.on_applied(txn(change()), first_seq + 1)
    got = [i.seq if isinstance(i, Entry) else i for i in drain(sub)]
    assert got == [*expected, first_seq + 1]


def test_a_stream_id_from_a_previous_process_is_a_gap_even_if_numbers_look_contiguous() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter(), after=9, stream="old-process")
    hub.on_applied(txn(change()), 10)
    items = drain(sub)
    assert isinstance(items[0], Gap) and items[0].last is None and seqs(items) == [10]


def test_a_hole_in_the_sequence_is_a_gap_for_everyone() -> None:
    hub = Broadcaster()
    live = hub.subscribe(EventFilter())
    hub.on_applied(txn(change()), 1)
    hub.on_applied(txn(change()), 5)
    items = drain(live)
    assert seqs(items) == [1, 5]
    assert items[1] == Gap(2, 4, "changes were not published (sequence hole)")
    # a later resume from before the hole is told about it too
    resumed = drain(hub.subscribe(EventFilter(), after=0))
    assert isinstance(resumed[0], Gap) and resumed[0].last == 4 and seqs(resumed) == [5]


def test_a_sequence_going_back_starts_a_new_stream() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter())
    old = hub.stream_id
    hub.on_applied(txn(change(), change()), 1)
    hub.on_applied(txn(change()), 1)
    items = drain(sub)
    assert items[-1] == Closed(CLOSE_STREAM_RESET, "stream restarted: resubscribe without 'after'")
    assert hub.stream_id != old and hub.oldest_seq == 1 and hub.last_seq == 1


# --- backpressure ----------------------------------------------------------------------------


def test_a_full_queue_drops_only_that_subscriber() -> None:
    hub = Broadcaster(queue_size=3)
    slow = hub.subscribe(EventFilter())
    fast = hub.subscribe(EventFilter())
    for i in range(1, 4):
        hub.on_applied(txn(change()), i)
    assert seqs(drain(fast)) == [1, 2, 3]
    hub.on_applied(txn(change()), 4)  # slow already holds 3: overflow
    assert drain(slow) == [Closed(CLOSE_LAGGING, "subscriber lagging: more than 3 events queued")]
    assert slow.pending == 0  # its queue was released
    assert seqs(drain(fast)) == [4]
    assert hub.dropped == 1 and hub.subscribers == 1
    hub.on_applied(txn(change()), 5)
    assert seqs(drain(fast)) == [5]


def test_a_transaction_larger_than_the_queue_reaches_a_reader_that_keeps_up() -> None:
    hub = Broadcaster(queue_size=3)
    sub = hub.subscribe(EventFilter())
    hub.on_applied(txn(*(change() for _ in range(10))), 1)
    assert seqs(drain(sub)) == list(range(1, 11))
    hub.on_applied(txn(change()), 11)
    assert seqs(drain(sub)) == [11] and hub.dropped == 0


def test_lag_is_judged_per_burst_of_the_event_loop() -> None:
    async def scenario() -> tuple[list[int], list[object]]:
        hub = Broadcaster(queue_size=3)
        reader, idle = hub.subscribe(EventFilter()), hub.subscribe(EventFilter())
        for first in (1, 6, 11):  # one applied batch: three 5-row transactions, no await between
            hub.on_applied(txn(*(change() for _ in range(5))), first)
        got = seqs(drain(reader))
        await asyncio.sleep(0)  # the loop runs: the burst is over
        hub.on_applied(txn(change()), 16)  # idle still holds 15 changes from the last burst
        return got + seqs(drain(reader)), drain(idle)

    got, idle = asyncio.run(scenario())
    assert got == list(range(1, 17))
    assert idle == [Closed(CLOSE_LAGGING, "subscriber lagging: more than 3 events queued")]


def test_a_replay_larger_than_the_queue_is_not_counted_against_it() -> None:
    hub = Broadcaster(buffer_size=50, queue_size=2)
    for i in range(1, 21):
        hub.on_applied(txn(change()), i)
    sub = hub.subscribe(EventFilter(), after=0)
    hub.on_applied(txn(change()), 21)
    hub.on_applied(txn(change()), 22)
    assert seqs(drain(sub)) == list(range(1, 23))
    assert hub.dropped == 0


def test_publish_never_awaits_and_a_waiting_reader_wakes_up() -> None:
    async def scenario() -> list[int]:
        hub = Broadcaster()
        sub = hub.subscribe(EventFilter())
        reader = asyncio.create_task(sub.get())
        await asyncio.sleep(0)
        assert not reader.done()
        hub.on_applied(txn(change()), 1)
        item = await asyncio.wait_for(reader, 1)
        assert isinstance(item, Entry)
        return [item.seq]

    assert asyncio.run(scenario()) == [1]


def test_close_ends_every_subscription_with_1001_and_ignores_later_publishes() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter())
    hub.close()
    hub.on_applied(txn(change()), 1)
    assert drain(sub) == [Closed(CLOSE_GOING_AWAY, "server shutting down")]
    assert hub.published == 0
    with pytest.raises(RuntimeError):
        hub.subscribe(EventFilter())


def test_unsubscribe_stops_delivery() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter())
    hub.unsubscribe(sub)
    hub.on_applied(txn(change()), 1)
    assert drain(sub) == [] and hub.subscribers == 0


# --- groups and batches: matching and encoding once per filter --------------------------------


def test_equal_filters_share_one_batch_per_burst_and_encode_it_once() -> None:
    async def scenario() -> None:
        hub = Broadcaster()
        a, b = hub.subscribe(EventFilter.parse("shop.*")), hub.subscribe(EventFilter.parse("shop.*"))
        other = hub.subscribe(EventFilter.parse("shop.*", columns="id"))
        hub.on_applied(txn(change(id=1), change(table="x", id=2)), 1)
        hub.on_applied(txn(change(schema="crm", id=3)), 3)  # same burst, matches nobody
        hub.on_applied(txn(change(id=4)), 4)
        batch_a, batch_b, batch_other = a.take_nowait(), b.take_nowait(), other.take_nowait()
        assert isinstance(batch_a, Batch) and isinstance(batch_other, Batch)
        assert batch_a is batch_b and batch_other is not batch_a
        assert [e.seq for e in batch_a.entries] == [e.seq for e in batch_other.entries] == [1, 2, 4]
        assert batch_a.messages() is batch_b.messages()  # built once for both readers
        (message,) = batch_other.messages()
        assert [c["after"] for c in orjson.loads(message)["changes"]] == [{"id": 1}, {"id": 2}, {"id": 4}]
        assert a.take_nowait() is None
        await asyncio.sleep(0)  # the burst ends: the next publish starts new batches
        hub.on_applied(txn(change(id=5)), 5)
        assert seqs(drain(a)) == [5] and seqs(drain(b)) == [5]

    asyncio.run(scenario())


def test_a_subscriber_joining_mid_burst_gets_only_later_changes() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        hub = Broadcaster()
        early = hub.subscribe(EventFilter())
        hub.on_applied(txn(change()), 1)
        late = hub.subscribe(EventFilter())  # same filter, same burst
        hub.on_applied(txn(change()), 2)
        return seqs(drain(early)), seqs(drain(late))

    assert asyncio.run(scenario()) == ([1, 2], [2])


def test_a_batch_stops_growing_once_a_reader_has_taken_it() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter())
    hub._burst_open = True  # as if the loop never ran between the publishes
    hub.on_applied(txn(change()), 1)
    first = sub.take_nowait()
    hub.on_applied(txn(change()), 2)
    second = sub.take_nowait()
    assert isinstance(first, Batch) and isinstance(second, Batch)
    assert [e.seq for e in first.entries] == [1] and [e.seq for e in second.entries] == [2]


def test_a_gap_in_a_burst_splits_the_batch_around_it() -> None:
    async def scenario() -> list[object]:
        hub = Broadcaster()
        sub = hub.subscribe(EventFilter())
        hub.on_applied(txn(change()), 1)
        hub.on_applied(txn(change()), 5)  # a hole in the same burst
        out: list[object] = []
        while (item := sub.take_nowait()) is not None:
            out.append([e.seq for e in item.entries] if isinstance(item, Batch) else item)
        return out

    assert asyncio.run(scenario()) == [[1], Gap(2, 4, "changes were not published (sequence hole)"), [5]]


def test_get_after_take_and_take_after_get_see_each_change_once() -> None:
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter())
    hub.on_applied(txn(change(), change(), change()), 1)
    hub.on_applied(txn(change()), 4)
    first = sub.get_nowait()
    rest = sub.take_nowait()
    assert isinstance(first, Entry) and first.seq == 1
    assert isinstance(rest, Batch) and [e.seq for e in rest.entries] == [2, 3]
    assert sub.pending == 1 and seqs(drain(sub)) == [4]


def test_changes_messages_split_by_size_and_keep_order() -> None:
    small = [orjson.dumps({"type": "change", "seq": i}).decode() for i in range(3)]
    big = '{"type":"change","seq":9,"v":"' + "x" * MAX_BATCH_CHARS + '"}'
    messages = changes_messages([*small, big, *small])
    assert len(messages) == 3  # the big one travels alone
    decoded = [orjson.loads(m) for m in messages]
    assert all(d["type"] == "changes" for d in decoded)
    assert [[c["seq"] for c in d["changes"]] for d in decoded] == [[0, 1, 2], [9], [0, 1, 2]]
    assert all(len(m) <= MAX_BATCH_CHARS + 64 for m in (messages[0], messages[2]))
    many = changes_messages([orjson.dumps({"seq": i}).decode() for i in range(60_000)])
    assert len(many) > 1 and all(len(m) <= MAX_BATCH_CHARS + 64 for m in many)
    assert [c["seq"] for m in many for c in orjson.loads(m)["changes"]] == list(range(60_000))


def test_replayed_batches_do_not_count_against_the_queue_bound() -> None:
    hub = Broadcaster(buffer_size=50, queue_size=2)
    for i in range(1, 11):
        hub.on_applied(txn(change()), i)
    sub = hub.subscribe(EventFilter(), after=0)
    replay = sub.take_nowait()
    assert isinstance(replay, Batch) and replay.replayed and len(replay) == 10
    assert not sub.lagging


def test_close_sends_what_is_queued_first_and_counts_until_unsubscribed() -> None:
    """Shutdown: the applied changes a subscriber has not taken yet still go out, then 1001; the
    subscriber stays counted until its handler unsubscribes (run waits for that)."""
    hub = Broadcaster()
    sub = hub.subscribe(EventFilter())
    batched = hub.subscribe(EventFilter())
    hub.on_applied(txn(change(), change()), 1)
    hub.close()
    assert hub.subscribers == 2
    items = drain(sub)
    assert seqs(items) == [1, 2] and items[-1] == Closed(CLOSE_GOING_AWAY, "server shutting down")
    first = batched.take_nowait()
    assert isinstance(first, Batch) and [e.seq for e in first.entries] == [1, 2]
    assert batched.take_nowait() == Closed(CLOSE_GOING_AWAY, "server shutting down")
    hub.unsubscribe(sub)
    hub.unsubscribe(batched)
    assert hub.subscribers == 0
