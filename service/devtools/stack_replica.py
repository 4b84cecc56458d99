"""A second local stack as a GTID replica of the first, for source failover tests and drills
(docs/operations.md, "Source failover"): start it replicating, wait for it, promote it."""

from __future__ import annotations

import pymysql

from service.devtools.stack import ADMIN_USER, REPLICATION_USER, LocalStack, StackInfo
from service.errors import StackError

__all__ = ["REPLICA_OPTIONS", "promote", "start_replica", "wait_replica"]

# my.cnf lines of a GTID replica: its own server_id, what it applies written to its own binlog
# (so that it can be promoted and followed), strict GTID mode
REPLICA_OPTIONS = {"server_id": "2", "log_slave_updates": "ON", "gtid_strict_mode": "ON"}


def start_replica(replica: LocalStack, primary: LocalStack) -> StackInfo:
    """Start `replica`'s mariadbd (only) as a GTID replica of `primary`'s (REPLICA_OPTIONS merged
    into its my.cnf), replicating by `MASTER_USE_GTID=slave_pos` from the primary's first
    transaction. Its users get the primary's passwords, so one URL (through a proxy that
    switches) reaches either server."""
    source = primary.load()
    if source is None:
        raise StackError(f"the primary stack in {primary.dir} is not up")
    replica.mariadb_options = {**REPLICA_OPTIONS, **replica.mariadb_options}
    info = replica.prepare(passwords_of=source)
    replica.start_mysql(info)
    repl = f"'{REPLICATION_USER}'@'127.0.0.1'"
    _run(
        replica,
        "SET SESSION sql_log_bin = 0",
        # users made by an earlier start with other passwords
        f"ALTER USER {repl} IDENTIFIED BY '{info.repl_password}'",
        f"ALTER USER '{ADMIN_USER}'@'127.0.0.1' IDENTIFIED BY '{info.admin_password}'",
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={source.mysql_port}, "
        f"MASTER_USER='{REPLICATION_USER}', MASTER_PASSWORD='{source.repl_password}', "
        "MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
        "START SLAVE",
    )
    return info


def wait_replica(replica: LocalStack, primary: LocalStack, timeout: float = 30.0) -> None:
    """Until `replica` has applied the primary's @@gtid_binlog_pos (else StackError saying why)."""
    target = str(_run(primary, "SELECT @@gtid_binlog_pos")[0]["@@gtid_binlog_pos"] or "")
    done = _run(replica, f"SELECT MASTER_GTID_WAIT('{target}', {timeout}) AS done")[0]["done"]
    if done != 0:
        status = _run(replica, "SHOW SLAVE STATUS")
        why = (
            {k: status[0].get(k) for k in ("Slave_IO_Running", "Last_IO_Error", "Last_SQL_Error")}
            if status
            else {}
        )
        raise StackError(
            f"the replica in {replica.dir} did not reach GTID {target} within {timeout:.0f}s: {why}"
        )


def promote(replica: LocalStack) -> None:
    """Make the replica a primary, as a failover tool does."""
    _run(replica, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0")


def _run(stack: LocalStack, *statements: str) -> list[dict[str, object]]:
    """Run statements as root; the last one's rows."""
    conn = stack.root_connection()
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            for sql in statements:
                cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()
