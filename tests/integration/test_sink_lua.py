"""The sink's Lua (service/sink/lua/*.lua): every file is loaded at import and compiles on a real
redis-server. What the scripts do is tested through RedisMirror in test_mirror_sink.py: APPLY in
test_apply_rows_checkpoint_and_changelog, RENEW and RELEASE in test_lease_fences_a_second_writer,
RESYNC_ROWS, RESYNC_FINISH and RESYNC_REREAD in test_a_resync_start_copies_the_keys_in_bounded_calls,
test_a_resync_removes_stale_rows_in_bounded_calls and
test_rows_partial_images_change_during_a_resync_are_read_again_at_its_end."""

from __future__ import annotations

from importlib.resources import files

import pytest
from redis import Redis

from service.sink import scripts

SCRIPTS = ("APPLY", "RELEASE", "RENEW", "RESYNC_FINISH", "RESYNC_REREAD", "RESYNC_ROWS")


def test_every_lua_file_is_loaded() -> None:
    shipped = sorted(p.name for p in (files("service.sink") / "lua").iterdir() if p.name.endswith(".lua"))
    assert shipped == sorted(f"{name}.lua" for name in scripts.LUA_FILES)
    common = (files("service.sink") / "lua" / "common.lua").read_text(encoding="utf-8")
    for name in ("APPLY", "RESYNC_ROWS", "RESYNC_FINISH", "RESYNC_REREAD"):
        script = getattr(scripts, name)
        assert script.startswith(scripts.lua_prelude() + common) and len(script) > len(common)
    for name in ("RENEW", "RELEASE"):
        assert getattr(scripts, name) == (files("service.sink") / "lua" / f"{name.lower()}.lua").read_text(
            encoding="utf-8"
        )


@pytest.mark.redis
@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_compiles_on_redis(redis_url: str, name: str) -> None:
    with Redis.from_url(redis_url) as client:
        sha = client.script_load(getattr(scripts, name))  # a Lua syntax error is refused here
        assert client.script_exists(sha) == [True]
