"""The demo writer of `binlog-mirror run` (no servers configured) against the real local MariaDB."""

from __future__ import annotations

import asyncio
import contextlib

import pymysql
import pytest

from service.devtools.demo import DEMO_SCHEMA, create_demo_schema, demo_writes
from service.devtools.stack import LocalStack
from service.settings import MySQLUrl

pytestmark = pytest.mark.integration


async def test_demo_writes_run_without_server_warnings(stack: LocalStack) -> None:
    # pytest turns warnings into errors: a value the server stored with a warning ("Data
    # truncated", as float amounts sent as DOUBLE literals were) ends the writer with it.
    info = stack.load()
    assert info is not None
    url = MySQLUrl.parse(info.admin_url)
    await create_demo_schema(url)
    await create_demo_schema(url)  # a second `make demo` finds the schema there
    writer = asyncio.create_task(demo_writes(url, per_second=200))
    await asyncio.sleep(1.0)
    assert not writer.done(), writer.exception()
    writer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await writer
    password = url.password.get_secret_value()
    conn = pymysql.connect(host=url.host, port=url.port, user=url.user, password=password)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {DEMO_SCHEMA}.customers")
            (customers,) = cur.fetchone()
    finally:
        conn.close()
    assert customers > 0
