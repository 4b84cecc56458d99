"""The minimal Redis ACL of docs/operations.md is enough: the `ACL SETUSER` line is read from the
doc as written, run on a real redis-server, and the mirror runs under that user: a load with DDL
(resyncs, TRUNCATE, RENAME), the change log, `verify --repair`, `ctl clear`. Redis' `ACL LOG`
must then hold no refusal (some are swallowed by clients: CLIENT SETINFO)."""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import Path

import pytest
import redis as redis_sync

from api.changelog import _read as read_changelog
from service.devtools.stack import LocalStack
from service.sink.clear import clear_prefix
from service.verify import Verifier
from tests.integration.mirror_helpers import (
    Workload,
    actual,
    create_schema,
    expected,
    mirror_settings,
    replicating,
    settle,
    unique_names,
    wait_applied,
)
from tests.integration.redis_servers import servers, start_server

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_acl(prefix: str, password: str, app: str) -> list[str]:
    """The doc's `ACL SETUSER` line as arguments, for `prefix` and `password`, and the key
    pattern the doc says a shaped table's templates add (`~{app}:*`)."""
    blocks = re.findall(r"```redis\n(.*?)```", DOC.read_text(), re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.startswith("ACL SETUSER")]
    assert len(lines) == 1, "docs/operations.md should hold one ACL SETUSER line in a ```redis block"
    args = shlex.split(lines[0])
    assert "~mirror:*" in args and ">CHANGE-ME" in args
    return [{"~mirror:*": f"~{prefix}:*", ">CHANGE-ME": f">{password}"}.get(a, a) for a in args] + [
        f"~{app}:*"
    ]


async def test_the_mirror_runs_under_the_documented_minimal_acl(stack: LocalStack, tmp_path: Path) -> None:
    db, prefix = unique_names()
    create_schema(stack, db)
    wl = Workload(stack, db, seed=13)
    for _ in range(15):
        wl.step(allow_ddl=False)
    with servers() as started:
        server = start_server(tmp_path / "redis", ["appendonly yes"])
        started.append(server)
        admin = server.client()
        app = f"app_{db}"
        admin.execute_command(*documented_acl(prefix, "s3cret-acl", app))
        url = f"redis://mirror:s3cret-acl@127.0.0.1:{server.port}/0"
        as_admin = f"redis://127.0.0.1:{server.port}/0"  # the test's reads (KEYS) need more
        shaped = {  # a key template, a zset index and a ttl: the commands derive.lua and the sweep use
            "key": f"{app}:item:{{id}}",
            "index": [{"kind": "zset", "key": f"{app}:by-qty", "score": "qty"}],
            "ttl": {"seconds": 3600},
        }
        settings = mirror_settings(
            stack,
            db,
            prefix,
            redis=url,
            changelog_maxlen=1000,
            table_step_rows=2,
            table={f"{db}.items": shaped},
        )
        async with replicating(settings) as rep:
            await asyncio.to_thread(wait_applied, as_admin, prefix, None)  # streaming from now on
            await asyncio.to_thread(lambda: [wl.step() for _ in range(120)])  # DDL: resyncs, TRUNCATE, RENAME
            await settle(rep, stack, timeout=60)
            assert actual(as_admin, prefix, db) == expected(stack, db)
            assert rep.progress.restarts == 0, rep.status().errors.last
            copies = list(admin.scan_iter(f"{app}:item:*"))
            assert len(copies) == len(expected(stack, db)["items"]) and admin.pttl(copies[0]) > 0
            assert await read_changelog(settings, 0)  # the API's change-log reader
        # verify --repair: a row changed behind the mirror's back is found and rewritten
        row = next(iter(actual(as_admin, prefix, db)["items"]))
        admin.hset(f"{prefix}:{db}:items:{row}", "qty", "999")
        report = await Verifier(settings).run(repair=True)
        assert report.repaired == 1, report.differences
        assert (await Verifier(settings).run()).equal
        assert await clear_prefix(url, prefix) > 0  # ctl clear
        assert not list(admin.scan_iter(f"{prefix}:*"))
        denied = admin.execute_command("ACL", "LOG")
        assert denied == [], denied
        with pytest.raises(redis_sync.ResponseError, match="no permissions"):  # the ACL does bind it
            with redis_sync.Redis.from_url(url) as r:
                r.set("not-the-mirror:x", "1")
        admin.close()
    wl.close()
