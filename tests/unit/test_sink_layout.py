"""The key layout's constants are written once (service/sink/keys.py) and the Lua reads them from
the prelude scripts.lua_prelude() puts first in every script: Python and Lua agree."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from service.sink import keys, scripts
from service.sink.keys import LUA_CONSTANTS, KeyLayout, parse_mark, resync_mark


def _lua(name: str) -> str:
    return (files("service.sink") / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def _code(source: str) -> str:
    """Lua source without its comments (`--` to the end of the line; no string holds `--`)."""
    return "\n".join(line.split("--", 1)[0] for line in source.splitlines())


def test_the_prelude_defines_every_constant_with_its_python_value() -> None:
    prelude = scripts.lua_prelude()
    m = re.search(r"^local ([\w, ]+) = (.+)$", prelude, re.MULTILINE)
    assert m is not None
    names = m.group(1).split(", ")
    values = re.findall(r"'((?:[^'\\]|\\.)*)'", m.group(2))
    assert dict(zip(names, values, strict=True)) == LUA_CONSTANTS
    assert LUA_CONSTANTS == {name: getattr(keys, name) for name in LUA_CONSTANTS}


@pytest.mark.parametrize("name", scripts.LUA_FILES)
def test_no_lua_file_spells_a_layout_constant(name: str) -> None:
    code = _code(_lua(name))
    for value in LUA_CONSTANTS.values():
        if value.startswith("__"):
            assert value not in code, f"{name}.lua spells {value!r}: use its name from keys.LUA_CONSTANTS"
    for used in set(re.findall(r"\b[A-Z][A-Z_]*(?:_SUFFIX|_FIELD)\b|\bMARK_[A-Z_]+\b", code)):
        assert used in LUA_CONSTANTS, f"{name}.lua reads {used}, which the prelude does not define"


def test_every_script_that_reads_the_layout_starts_with_the_prelude() -> None:
    for name in ("APPLY", "GUARD", "RESYNC_ROWS", "RESYNC_FINISH", "RESYNC_REREAD"):
        assert getattr(scripts, name).startswith(scripts.lua_prelude())


def test_key_suffixes_and_marks() -> None:
    lay = KeyLayout("m")
    assert lay.index_key("db", "t") == f"m:db:t:{keys.INDEX_SUFFIX}"
    assert lay.touched_key("db", "t") == f"m:db:t:{keys.TOUCHED_SUFFIX}"
    assert lay.stale_key("db", "t") == f"m:db:t:{keys.STALE_SUFFIX}"
    # lua/common.lua's partial_of: the touched key less its suffix, plus the partial one
    touched = lay.touched_key("db", "t")
    assert touched[: -len(keys.TOUCHED_SUFFIX)] + keys.PARTIAL_SUFFIX == lay.partial_key("db", "t")
    # the mark's form, as lua/common.lua's mark_value writes and its generation()/reason_of read it
    assert "return generation .. ' ' .. reason" in _lua("common")
    assert resync_mark(7, "alter table") == "7 alter table"
    assert parse_mark(resync_mark(7, "alter table")) == (7, "alter table")
    assert parse_mark(resync_mark(keys.MARK_FENCED, "alter")) == (None, "alter")
    assert parse_mark("no generation") == (0, "no generation")
