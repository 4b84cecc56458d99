"""Following the source's history by GTID (service/history.py, issue 39), in pure code: what a
source must hold before the mirror follows it (MariaDB @@gtid_binlog_pos; MySQL @@gtid_executed
and @@gtid_purged, as their docs define them), where the dump starts (just before the last
applied transaction), and the comparison of that transaction when the source sends it again.
Plus the identity every checkpoint carries (a file's FORMAT_DESCRIPTION after a ROTATE)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.binlog import BinlogDecoder, read_binlog_file
from service.binlog.events import Event
from service.checkpoint import BinlogPosition, Checkpoint, CheckpointTracker, EventMark
from service.errors import HistoryMismatch, PositionLost, SourceBehind
from service.gtids import MariadbGtidPos, MysqlGtidSet
from service.history import ExpectedTransaction, gtid_stream, plan_mariadb, plan_mysql
from service.transactions import TableFilter, TransactionAssembler

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "b9b4712a-df64-11e3-b391-60672090eb04"
XID = EventMark(1207, 16, 1, 1_700_000_000, 24)  # the commit of the last applied transaction
FDE = EventMark(4, 15, 1, 1_699_999_000, 77)  # a file's FORMAT_DESCRIPTION (a bootstrap's mark)
AT = BinlogPosition("mysql-bin.000007", 1238)
FIXTURES = Path(__file__).parents[1] / "fixtures" / "binlog" / "mariadb-10.11"


def mariadb_cp(gtid_set: str, gtid: str = "", mark: EventMark | None = XID) -> Checkpoint:
    return Checkpoint(AT, gtid_set, 1, mark, gtid, "server_id=1 domain=0")


# --- MariaDB ------------------------------------------------------------------------------------


def test_mariadb_a_replica_with_everything_is_resumed_just_before_the_last_transaction() -> None:
    # promoted with gtid_strict_mode: its own GTIDs continue the domain's sequence numbers
    plan = plan_mariadb(mariadb_cp("0-1-125", "0-1-125"), MariadbGtidPos.parse("0-2-130"))
    assert plan is not None and not plan.strict
    assert str(plan.dump_from) == "0-1-124"  # named by seq: 124 may have another server_id
    assert plan.expect.gtid == "0-1-125" and plan.expect.mark == XID and plan.expect.position == AT


def test_mariadb_other_domains_stay_where_the_mirror_is() -> None:
    plan = plan_mariadb(mariadb_cp("0-1-125,1-5-9", "1-5-9"), MariadbGtidPos.parse("0-1-125,1-5-12"))
    assert plan is not None and str(plan.dump_from) == "0-1-125,1-5-8"


@pytest.mark.parametrize(
    ("server", "named"),
    [
        pytest.param("0-2-122", "the source's binlog ends at 0-2-122", id="lagging-replica"),
        pytest.param("1-2-500", "nothing in domain 0", id="domain-missing"),
        pytest.param("", "@@gtid_binlog_pos empty", id="empty-binlog"),
    ],
)
def test_mariadb_a_source_that_lacks_applied_transactions_is_refused_naming_them(
    server: str, named: str
) -> None:
    with pytest.raises(SourceBehind) as err:
        plan_mariadb(mariadb_cp("0-1-125", "0-1-125"), MariadbGtidPos.parse(server))
    message = str(err.value)
    assert "the source lacks transactions the mirror applied" in message
    assert "applied up to 0-1-125" in message and named in message
    assert isinstance(err.value, HistoryMismatch)  # on_history_mismatch applies to it too


def test_mariadb_a_file_start_is_resumed_by_its_last_transaction() -> None:
    # after a ROTATE (a FLUSH BINARY LOGS on an idle primary, then a failover)
    cp = Checkpoint(AT, "0-1-125", 1, FDE, "0-1-125", "server_id=1 domain=0", XID)
    plan = plan_mariadb(cp, MariadbGtidPos.parse("0-2-126"))
    assert plan is not None and str(plan.dump_from) == "0-1-124" and plan.expect.mark == XID


def test_mariadb_a_checkpoint_naming_no_transaction_is_checked_then_resumed_by_position() -> None:
    # a bootstrap's (its file's FORMAT_DESCRIPTION as mark), one without its GTID, one without GTIDs
    server = MariadbGtidPos.parse("0-1-125")
    assert plan_mariadb(mariadb_cp("0-1-125", "", FDE), server) is None
    assert plan_mariadb(mariadb_cp("0-1-125", ""), server) is None
    assert plan_mariadb(mariadb_cp(""), server) is None
    with pytest.raises(SourceBehind):  # the containment check still runs
        plan_mariadb(mariadb_cp("0-1-125", "", FDE), MariadbGtidPos.parse("0-1-100"))


# --- MySQL --------------------------------------------------------------------------------------


def mysql_cp(gtid_set: str, gtid: str) -> Checkpoint:
    return Checkpoint(AT, gtid_set, 1, XID, gtid, f"server_id=1 uuid={U1}")


def test_mysql_a_subset_of_gtid_executed_is_resumed_without_the_last_transaction() -> None:
    cp = mysql_cp(f"{U1}:1-100,{U2}:1-5", f"{U1}:100")
    executed = MysqlGtidSet.parse(f"{U1}:1-100,{U2}:1-9")  # the replica wrote U2:6-9 since
    plan = plan_mysql(cp, executed, MysqlGtidSet.parse(f"{U1}:1-40"))
    assert plan is not None and plan.strict
    assert plan.dump_from == MysqlGtidSet.parse(f"{U1}:1-99,{U2}:1-5") and plan.expect.gtid == f"{U1}:100"


def test_mysql_tagged_gtids() -> None:
    cp = mysql_cp(f"{U1}:1-10:etl:1-3", f"{U1}:etl:3")
    plan = plan_mysql(cp, MysqlGtidSet.parse(f"{U1}:1-10:etl:1-3"), MysqlGtidSet())
    assert plan is not None and plan.dump_from == MysqlGtidSet.parse(f"{U1}:1-10:etl:1-2")


def test_mysql_a_source_missing_applied_transactions_is_refused_naming_them() -> None:
    cp = mysql_cp(f"{U1}:1-100", f"{U1}:100")
    with pytest.raises(SourceBehind) as err:
        plan_mysql(cp, MysqlGtidSet.parse(f"{U1}:1-90:95"), MysqlGtidSet())
    assert f"{U1}:91-94:96-100 are not in its @@gtid_executed" in str(err.value)


def test_mysql_purged_transactions_the_mirror_needs_stop_it() -> None:
    executed = MysqlGtidSet.parse(f"{U1}:1-100,{U2}:1-20")
    # the dump would need U2:6-10, purged: MySQL would refuse it (ER_MASTER_HAS_PURGED_REQUIRED_GTIDS)
    with pytest.raises(PositionLost) as err:
        plan_mysql(mysql_cp(f"{U1}:1-100,{U2}:1-5", f"{U1}:100"), executed, MysqlGtidSet.parse(f"{U2}:1-10"))
    assert f"{U2}:6-10" in str(err.value)
    # the last applied transaction itself purged: its history cannot be checked
    with pytest.raises(PositionLost) as err:
        plan_mysql(mysql_cp(f"{U1}:1-100", f"{U1}:100"), executed, MysqlGtidSet.parse(f"{U1}:1-100"))
    assert f"the source purged {U1}:100, the transaction the mirror applied last" in str(err.value)


# --- the transaction sent again ---------------------------------------------------------------


def expected(gtid: str = "0-1-125") -> ExpectedTransaction:
    return ExpectedTransaction(gtid, XID, AT, "0-1-124")


def end(
    mark: EventMark | None, where: BinlogPosition = BinlogPosition("mysql-bin.000002", 999)
) -> Checkpoint:
    return Checkpoint(where, "0-1-125", 1, mark)


def test_the_same_transaction_from_a_replica_is_accepted() -> None:
    # log_slave_updates: origin server_id and timestamp kept; the offset and the XID are the replica's
    replica = EventMark(968, 16, 1, XID.timestamp, 31)
    assert expected().check("0-1-125", end(replica))


def test_another_stream_passes_through() -> None:
    assert not expected().check("1-3-7", end(XID))  # another MariaDB domain: new, not compared
    assert not expected().check(None, end(None))  # no GTID (a file start's empty transaction)
    assert not ExpectedTransaction(f"{U1}:100", XID, AT, "").check(f"{U2}:100", end(XID))
    assert gtid_stream(f"{U1}:etl:3") == f"{U1}:etl" and gtid_stream("12-1-5") == "12"


@pytest.mark.parametrize(
    ("gtid", "mark", "words"),
    [
        pytest.param(
            "0-2-125", XID, "after 0-1-124 the source's binlog has 0-2-125, not 0-1-125", id="other-gtid"
        ),
        pytest.param("0-1-126", XID, "has 0-1-126, not 0-1-125", id="diverged"),
        pytest.param(
            "0-1-125",
            EventMark(1207, 16, 1, XID.timestamp + 1, 24),
            "the source's transaction 0-1-125 is not the one the mirror applied",
            id="rebuilt-same-gtids",
        ),
        pytest.param(
            "0-1-125", EventMark(1207, 2, 1, XID.timestamp, 5), "stored XID at 1207", id="other-type"
        ),
    ],
)
def test_another_transaction_in_the_stream_is_another_history(gtid: str, mark: EventMark, words: str) -> None:
    with pytest.raises(HistoryMismatch) as err:
        expected().check(gtid, end(mark))
    assert words in str(err.value)


def test_a_statement_commit_compares_its_text() -> None:
    commit = EventMark(500, 2, 1, 7, 1234)  # a QUERY (DDL, COMMIT): CRC32 of its text
    assert commit.same_transaction(EventMark(900, 2, 1, 7, 1234))
    assert not commit.same_transaction(EventMark(500, 2, 1, 7, 4321))


# --- the identity every checkpoint carries ------------------------------------------------------


def _events(*paths: Path) -> list[Event]:
    decoder = BinlogDecoder(file=paths[0].name)
    return [ev for path in paths for raw in read_binlog_file(path) if (ev := decoder.feed(raw)) is not None]


def test_a_file_start_after_a_rotate_carries_the_new_files_format_description() -> None:
    first, second = FIXTURES / "01-setup.000001", FIXTURES / "02-full.000002"
    tracker = CheckpointTracker(BinlogPosition(first.name, 4), source="server_id=1 domain=0")
    asm = TransactionAssembler(tracker, TableFilter())
    txns = [t for ev in _events(first, second) if (t := asm.feed(ev)) is not None]
    rotated = [t for t in txns if t.end.position.file != first.name and not t.end.ends_transaction]
    at_rotate, at_fde = rotated[0], rotated[1]
    assert at_rotate.end.position.pos == 4 and at_rotate.end.mark is None  # as before
    # both carry the last transaction (of the first file): a failover then is followed by GTID
    before = next(t for t in reversed(txns) if t.gtid and t.end.position.file == first.name)
    for t in (at_rotate, at_fde):
        assert (t.end.gtid, t.end.txn_mark, t.end.last_commit) == (
            before.gtid,
            before.end.mark,
            before.end.mark,
        )
    fde = at_fde.end.mark
    assert fde is not None and fde.offset == 4 and fde.type_code == 15 and at_fde.end.position.pos > 4
    assert at_fde.end.source == "server_id=1 domain=0" and not at_fde.changes
    # every transaction's checkpoint names its GTID and the server it was read from
    last = next(t for t in reversed(txns) if t.gtid)
    assert last.end.ends_transaction and last.end.gtid == last.gtid and last.end.source == tracker.source


# --- telling a failover from a reconnect --------------------------------------------------------


def test_a_failover_is_another_servers_identity() -> None:
    from service.transport.connection import ServerInfo
    from service.transport.resume import failover_note

    maria = ServerInfo("mariadb", (10, 11, 6), "10.11.6-MariaDB", 2, {"gtid_domain_id": "0"})
    mysql = ServerInfo("mysql", (8, 4, 0), "8.4.0", 7, {"server_uuid": U1, "gtid_mode": "ON"})
    assert maria.identity == "server_id=2 domain=0" and maria.gtids
    assert mysql.identity == f"server_id=7 uuid={U1}" and mysql.gtids
    assert not ServerInfo("mysql", (8, 0, 36), "8.0.36", 7, {"gtid_mode": "OFF"}).gtids

    found = Checkpoint(BinlogPosition("mysql-bin.000002", 968), "0-1-125", 1, XID, "0-1-125", maria.identity)
    assert (
        failover_note("server_id=1 domain=0", found, AT)
        == "server_id=1 domain=0 -> server_id=2 domain=0 at 0-1-125"
    )
    assert failover_note(maria.identity, found, AT) is None  # a reconnect to the same server
    # a checkpoint stored without its server (an older version): another position is a failover
    assert failover_note("", found, AT) == "unknown -> server_id=2 domain=0 at 0-1-125"
    assert failover_note("", Checkpoint(AT, source=maria.identity), AT) is None
