"""Count row changes python-mysql-replication decodes from FILE between START and END."""

from __future__ import annotations

import json
import sys
import time

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent


def main(host: str, port: str, user: str, password: str, file: str, start: str, end: str) -> None:
    stream = BinLogStreamReader(
        connection_settings={"host": host, "port": int(port), "user": user, "passwd": password},
        server_id=9902,
        log_file=file,
        log_pos=int(start),
        resume_stream=True,
        blocking=False,
        # is_mariadb=True would ignore log_file/log_pos and start from a GTID; the file/position
        # dump is the same command on MariaDB, and the library still decodes MariaDB's events.
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    rows, t0 = 0, time.perf_counter()
    for event in stream:
        if stream.log_file != file:
            break
        rows += len(event.rows)
        if stream.log_pos >= int(end):
            break
    seconds = time.perf_counter() - t0
    stream.close()
    print(json.dumps({"rows": rows, "seconds": seconds}))


if __name__ == "__main__":
    main(*sys.argv[1:8])
