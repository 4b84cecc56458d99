"""README, "Mirror your own MySQL", tried as written: a mariadbd of its own started with the
README's MariaDB `my.cnf` lines, the README's SQL run on it (the user renamed: the local stack has
a `mirror` user of its own, which MariaDB would match first from 127.0.0.1), and a table mirrored
with that user: the grants are enough for the preflight, the first copy and the stream."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.devtools.stack import LocalStack
from service.settings import load_settings
from tests.integration.mirror_helpers import replicating, until
from tests.integration.redis_servers import Server, servers, start_server

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def _section() -> str:
    text = README.read_text()
    start = text.index("## Mirror your own MySQL")
    return text[start : text.index("\n## ", start + 1)]


def readme_mariadb_options() -> dict[str, str]:
    """The `[mariadbd]` block's settings, comments dropped."""
    block = next(b for b in re.findall(r"```ini\n(.*?)```", _section(), re.S) if b.startswith("[mariadbd]"))
    options = {}
    for line in block.splitlines()[1:]:
        name, _, value = line.split("#", 1)[0].partition("=")
        if name.strip():
            options[name.strip()] = value.strip()
    return options


def readme_sql(user: str, password: str) -> list[str]:
    (block,) = re.findall(r"```sql\n(.*?)```", _section(), re.S)
    assert block.count("'mirror'@'%'") == 3 and "'CHANGE-ME'" in block
    block = block.replace("'mirror'@", f"'{user}'@").replace("'CHANGE-ME'", f"'{password}'")
    return [s.strip() for s in block.split(";") if s.strip()]


@pytest.fixture
def readme_source(tmp_path: Path) -> Iterator[LocalStack]:
    options = readme_mariadb_options()
    assert options["binlog_format"] == "ROW" and options["binlog_row_metadata"] == "FULL"
    source = LocalStack(tmp_path / "source", mariadb_options=options)
    try:
        source.start_mysql()
        yield source
    finally:
        source.down()


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Server]:
    with servers() as started:
        started.append(start_server(tmp_path / "redis", ["appendonly yes", "maxmemory-policy noeviction"]))
        yield started[0]


async def test_the_readme_source_setup_is_enough_to_mirror(readme_source: LocalStack, redis: Server) -> None:
    info = readme_source.load()
    assert info is not None
    user, password = f"readme_{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    admin = readme_source.root_connection()
    with admin.cursor() as cur:
        for statement in readme_sql(user, password):
            cur.execute(statement)
        cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@gtid_strict_mode")
        assert cur.fetchone() == (1, "ROW", "FULL", 1)
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.orders (id INT PRIMARY KEY, status VARCHAR(20), note TEXT)")
        cur.execute("INSERT INTO shop.orders VALUES (1, 'paid', NULL), (2, 'new', 'x')")  # copied
    settings = load_settings(
        None,
        mysql=f"mysql://{user}:{password}@127.0.0.1:{info.mysql_port}",
        redis=f"redis://127.0.0.1:{redis.port}/0",
        tables=["shop.*"],
        server_id=777,
        heartbeat_seconds=1.0,
    )
    with redis.client(decode_responses=True) as r:
        async with replicating(settings) as rep:
            row_2 = {"id": "2", "status": "new", "note": "x"}
            await until("the first copy", lambda: r.hgetall("mirror:shop:orders:2") == row_2, 60)
            with admin.cursor() as cur:  # streamed
                cur.execute("INSERT INTO shop.orders VALUES (42, 'shipped', NULL)")
                cur.execute("UPDATE shop.orders SET status = 'refunded' WHERE id = 1")
            await until("the stream", lambda: r.hget("mirror:shop:orders:1", "status") == "refunded", 60)
            assert rep.status().errors.count == 0, rep.status().errors.last
            # as the README reads the mirror: NULL is an absent field
            assert r.hgetall("mirror:shop:orders:42") == {"id": "42", "status": "shipped"}
            assert r.sscan("mirror:shop:orders:__keys", 0)[1] != []
            assert r.hget("mirror:__checkpoint", "file")
    admin.close()
