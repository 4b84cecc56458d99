"""The checkpoint hash's one codec (service/sink/checkpoints.py): the stored form is unchanged, so
mirrors written before it keep loading."""

from __future__ import annotations

import pytest

from service.checkpoint import BinlogPosition, Checkpoint, EventMark
from service.sink.checkpoints import checkpoint_fields, decode_checkpoint, recopy_reason

END = Checkpoint(BinlogPosition("mysql-bin.000003", 1234), "0-1-100,1-2-5", 1_700_000_000)


def test_fields_are_the_stored_form() -> None:
    # field for field, in order, as the apply script and the snapshot always wrote them
    assert list(checkpoint_fields(END, "0-1-100", "json").items()) == [
        ("id", "mysql-bin.000003:1234"),
        ("file", "mysql-bin.000003"),
        ("pos", "1234"),
        ("gtid_set", "0-1-100,1-2-5"),
        ("ts", "1700000000"),
        ("gtid", "0-1-100"),
        ("values", "json"),
        ("event", ""),
        ("recopy", ""),
        ("source", ""),  # added with failover (issue 39): older hashes lack them
        ("txn_event", ""),
    ]


def test_ts_falls_back_to_the_transactions() -> None:
    no_ts = Checkpoint(END.position, "", 0)
    assert checkpoint_fields(no_ts, None, ts=7)["ts"] == "7"
    assert checkpoint_fields(no_ts)["ts"] == "0" and checkpoint_fields(no_ts)["gtid"] == ""


@pytest.mark.parametrize("as_bytes", [True, False], ids=["hgetall-bytes", "decoded-str"])
def test_round_trip(as_bytes: bool) -> None:
    fields = checkpoint_fields(END, "0-1-100", "hash")
    raw = {k.encode(): v.encode() for k, v in fields.items()} if as_bytes else fields
    stored = decode_checkpoint(raw)
    assert stored is not None
    assert stored.checkpoint == END and stored.id == "mysql-bin.000003:1234" and stored.values == "hash"


def test_a_hash_written_before_values_was_recorded() -> None:
    stored = decode_checkpoint({b"id": b"b.000001:4", b"file": b"b.000001", b"pos": b"4"})
    assert stored is not None
    assert stored.checkpoint == Checkpoint(BinlogPosition("b.000001", 4)) and stored.values is None


def test_no_checkpoint() -> None:
    assert decode_checkpoint({}) is None


def test_the_event_mark_round_trips_and_a_hash_without_it_is_unmarked() -> None:
    mark = EventMark(1207, 16, 1, 1_700_000_000, 42)
    fields = checkpoint_fields(Checkpoint(END.position, END.gtid_set, END.ts, mark), "0-1-100")
    assert fields["event"] == "1207 16 1 1700000000 42"
    stored = decode_checkpoint(fields)
    assert stored is not None and stored.checkpoint.mark == mark and stored.marked
    old = decode_checkpoint({"id": "b.000001:4", "file": "b.000001", "pos": "4"})
    assert old is not None and old.checkpoint.mark is None and not old.marked


def test_the_recopy_marker() -> None:
    fields = checkpoint_fields(END)
    assert recopy_reason(fields) is None  # every apply clears it
    assert recopy_reason({**fields, "recopy": "Redis evicted keys"}) == "Redis evicted keys"
    # only the marker left (the checkpoint itself was lost): no checkpoint, still a recopy
    assert decode_checkpoint({b"recopy": b"x"}) is None and recopy_reason({b"recopy": b"x"}) == "x"


def test_the_history_identity_round_trips() -> None:
    # a file's FORMAT_DESCRIPTION (a bootstrap or a file start), the last GTID and the server read from
    fde, xid = EventMark(4, 15, 1, 1_700_000_000, 99), EventMark(1207, 16, 1, 1_699_999_999, 24)
    end = Checkpoint(END.position, "0-1-100", END.ts, fde, "0-1-100", "server_id=1 domain=0", xid)
    fields = checkpoint_fields(end)
    assert (fields["gtid"], fields["source"]) == ("0-1-100", "server_id=1 domain=0")
    assert fields["txn_event"] == "1207 16 1 1699999999 24"
    stored = decode_checkpoint(fields)
    assert stored is not None
    got = stored.checkpoint
    assert (got.mark, got.gtid, got.source, got.txn_mark) == (fde, "0-1-100", "server_id=1 domain=0", xid)
    assert not got.ends_transaction and got.last_commit == xid
    assert Checkpoint(END.position, mark=EventMark(1207, 16, 1, 1, 42)).ends_transaction
    old = decode_checkpoint({"id": "b.000001:4", "file": "b.000001", "pos": "4", "gtid": "0-1-5"})
    assert old is not None and old.checkpoint.source == "" and old.checkpoint.gtid == "0-1-5"
