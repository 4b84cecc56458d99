"""The e2e peer: python-mysql-replication + redis-py mirroring FILE START..END into Redis.

    python pymysqlrepl_redis.py HOST PORT USER PASSWORD FILE START END REDIS_URL PREFIX

One row = one hash `{PREFIX}:{schema}:{table}:{pk}` (DEL + HSET of the after-image, NULL columns
left out; DEL for a delete), the same layout and value texts as binlog-mirror's hash mode. Each
source transaction is one MULTI/EXEC pipeline holding its rows and a checkpoint HSET, sent at
its XID, so Redis only ever holds whole transactions. Stops after the transaction that ends at
or after END. Prints {"rows", "transactions", "seconds"}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import redis
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent


def _text(value: Any) -> Any:
    if isinstance(value, bytes | str | int | float):
        return value
    return str(value)  # Decimal, datetime, ... : their str() is the mirror's text form


def _key(prefix: str, event: Any, values: dict[str, Any]) -> str:
    pk = event.primary_key
    parts = [values[c] for c in pk] if isinstance(pk, tuple | list) else [values[pk]]
    return f"{prefix}:{event.schema}:{event.table}:" + ":".join(str(p) for p in parts)


def _put(pipe: Any, key: str, values: dict[str, Any]) -> None:
    pipe.delete(key)
    mapping = {k: _text(v) for k, v in values.items() if v is not None}
    if mapping:
        pipe.hset(key, mapping=mapping)


def main(
    host: str, port: str, user: str, password: str, file: str, start: str, end: str, url: str, prefix: str
) -> None:
    r = redis.Redis.from_url(url)
    pipe = r.pipeline(transaction=True)
    stream = BinLogStreamReader(
        connection_settings={"host": host, "port": int(port), "user": user, "passwd": password},
        server_id=9905,
        log_file=file,
        log_pos=int(start),
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent],
    )
    rows = txns = 0
    t0 = time.perf_counter()
    for event in stream:
        if stream.log_file != file:
            break
        if isinstance(event, XidEvent):
            pipe.hset(f"{prefix}:__checkpoint", mapping={"file": file, "pos": stream.log_pos})
            pipe.execute()
            txns += 1
            if stream.log_pos >= int(end):
                break
            continue
        for row in event.rows:
            if isinstance(event, WriteRowsEvent):
                _put(pipe, _key(prefix, event, row["values"]), row["values"])
            elif isinstance(event, UpdateRowsEvent):
                old = _key(prefix, event, row["before_values"])
                new = _key(prefix, event, row["after_values"])
                if old != new:
                    pipe.delete(old)
                _put(pipe, new, row["after_values"])
            else:
                pipe.delete(_key(prefix, event, row["values"]))
            rows += 1
    seconds = time.perf_counter() - t0
    stream.close()
    r.close()
    print(json.dumps({"rows": rows, "transactions": txns, "seconds": seconds}))


if __name__ == "__main__":
    main(*sys.argv[1:10])
