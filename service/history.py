"""Which history a resume follows by GTID (docs/mirror.md, "Source failover"): pure decisions
from a stored checkpoint and what the source reports, no I/O.

A checkpoint that ends a transaction is resumed by GTID wherever the source has GTIDs, so a
promoted replica (other file names and offsets) is followed without a table copy. First the
source must hold every transaction the mirror applied (`plan_mariadb`, `plan_mysql`; else
`HistoryMismatch` naming the GTIDs it lacks). Then the dump starts just before the last
applied transaction, the source sends that transaction again, and `ExpectedTransaction.check`
compares its commit event with the stored mark: the same GTIDs written by another server
(a rebuilt one) are another history, never followed.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.binlog.constants import EventType
from service.checkpoint import BinlogPosition, Checkpoint, EventMark
from service.errors import HistoryMismatch, PositionLost, SourceBehind
from service.gtids import GtidSet, MariadbGtid, MariadbGtidPos, MysqlGtid, MysqlGtidSet, parse_gtid

__all__ = ["ExpectedTransaction", "GtidResume", "describe_mark", "gtid_stream", "plan_mariadb", "plan_mysql"]


def gtid_stream(gtid: str) -> str:
    """The ordered stream a GTID belongs to: a MariaDB domain ("0"), a MySQL uuid[:tag]."""
    if ":" in gtid:
        return gtid.rpartition(":")[0]
    return gtid.partition("-")[0]


def describe_mark(mark: EventMark) -> str:
    try:
        name = EventType(mark.type_code).name
    except ValueError:
        name = f"type {mark.type_code}"
    return (
        f"{name} at {mark.offset} (server_id {mark.server_id}, timestamp {mark.timestamp}, "
        f"{'xid' if name == 'XID' else 'detail'} {mark.detail})"
    )


@dataclass(frozen=True, slots=True)
class ExpectedTransaction:
    """The last transaction the mirror applied, which the GTID dump sends first in its stream."""

    gtid: str
    mark: EventMark  # its commit event, as stored
    position: BinlogPosition  # where it ended in the binlog the mirror read it from
    before: str  # the GTID the dump starts after (for messages)

    def check(self, gtid: str | None, end: Checkpoint) -> bool:
        """True when this transaction is the expected one (applied already: drop it); False for
        one of another stream (a MariaDB domain, a MySQL uuid), which is new. Raises
        HistoryMismatch when the stream's next transaction is another one."""
        if gtid is None or gtid_stream(gtid) != gtid_stream(self.gtid):
            return False
        if gtid != self.gtid:
            raise HistoryMismatch(
                f"after {self.before} the source's binlog has {gtid}, not {self.gtid}, the transaction "
                "the mirror applied last: the source's history differs from the one the mirror followed"
            )
        found = end.mark
        if found is None or not self.mark.same_transaction(found):
            seen = describe_mark(found) if found is not None else "no commit event"
            raise HistoryMismatch(
                f"the source's transaction {gtid} is not the one the mirror applied under that GTID: "
                f"stored {describe_mark(self.mark)} in {self.position.file}, the source has {seen} "
                f"in {end.position.file} (the same GTIDs from another server: a rebuilt source?)"
            )
        return True


@dataclass(frozen=True, slots=True)
class GtidResume:
    """Dump from `dump_from` (the stored set less the last applied transaction) and expect that
    transaction first. `strict`: MariaDB's @slave_gtid_strict_mode for the dump (off: the GTID
    just before the last applied one may have been written by another server_id, so it is named
    by its sequence number; `expect` then checks the exact GTID)."""

    dump_from: GtidSet
    expect: ExpectedTransaction
    strict: bool


def _expected(cp: Checkpoint, before: str) -> ExpectedTransaction:
    commit = cp.last_commit
    assert commit is not None
    return ExpectedTransaction(cp.gtid, commit, cp.position, before)


def plan_mariadb(cp: Checkpoint, binlog_pos: MariadbGtidPos) -> GtidResume | None:
    """Resume `cp` by GTID on a MariaDB source whose @@gtid_binlog_pos is `binlog_pos`. None when
    `cp` names no transaction to check (a bootstrap, which saw none: resumed by file and position
    against its file's mark); a file start's checkpoint carries its last transaction's. Raises
    SourceBehind when the source lacks any domain's stored position: a replica that lagged at
    the failover, or another server."""
    if not cp.gtid_set:
        return None
    stored = MariadbGtidPos.parse(cp.gtid_set)
    lacking = [g for g in stored.gtids if g not in binlog_pos]
    if lacking:
        has = ", ".join(str(binlog_pos.get(g.domain) or f"nothing in domain {g.domain}") for g in lacking)
        raise SourceBehind(
            f"the source lacks transactions the mirror applied: the mirror applied up to "
            f"{', '.join(map(str, lacking))}, the source's binlog ends at {has} (@@gtid_binlog_pos "
            f"{binlog_pos or 'empty'}; a replica that lagged at the failover, or another server?)"
        )
    if cp.last_commit is None or not cp.gtid:
        return None
    last = parse_gtid(cp.gtid)
    if not isinstance(last, MariadbGtid) or stored.get(last.domain) != last:
        return None
    before = MariadbGtid(last.domain, last.server_id, last.seq - 1)
    dump_from = MariadbGtidPos(tuple(before if g.domain == last.domain else g for g in stored.gtids))
    return GtidResume(dump_from, _expected(cp, str(before)), strict=False)


def plan_mysql(cp: Checkpoint, executed: MysqlGtidSet, purged: MysqlGtidSet) -> GtidResume | None:
    """Resume `cp` by GTID on a MySQL source (gtid_mode=ON) with these @@gtid_executed and
    @@gtid_purged. The stored set must be a subset of gtid_executed (else HistoryMismatch naming
    what is missing), and what the dump sends must still be in the binlogs: gtid_purged a subset of
    the set the dump starts from (MySQL refuses the dump otherwise, ER_MASTER_HAS_PURGED_REQUIRED_GTIDS;
    here PositionLost naming the GTIDs). None as for plan_mariadb."""
    if not cp.gtid_set:
        return None
    stored = MysqlGtidSet.parse(cp.gtid_set)
    missing = stored.difference(executed)
    if missing:
        raise SourceBehind(
            f"the source lacks transactions the mirror applied: {missing} are not in its "
            f"@@gtid_executed (a replica that lagged at the failover, or another server?)"
        )
    unapplied_purged = purged.difference(stored)
    if unapplied_purged:
        raise PositionLost(
            f"the source purged transactions the mirror has not applied: {unapplied_purged} "
            "(@@gtid_purged is not a subset of the mirror's GTID set)"
        )
    if cp.last_commit is None or not cp.gtid:
        return None
    last = parse_gtid(cp.gtid)
    if not isinstance(last, MysqlGtid) or last not in stored:
        return None
    if last in purged:
        raise PositionLost(
            f"the source purged {last}, the transaction the mirror applied last, so its history "
            "cannot be checked against the mirror's (binlog purged?)"
        )
    dump_from = stored.difference(MysqlGtidSet((((last.uuid, last.tag), ((last.gno, last.gno),)),)))
    return GtidResume(dump_from, _expected(cp, str(dump_from) or "the first transaction"), strict=True)
