"""Lua scripts run by the mirror: each call is atomic in Redis and checks the writer lease first.

The Lua lives in `lua/*.lua` beside this module (shipped as package data) and is read once, at
import; `common.lua` (the lease fence and the helpers) is prepended to the scripts that write
rows. Each file documents its KEYS/ARGV.

A script never fails half way by design: the only checks (lease, checkpoint chain, chunk progress,
resync generation) come before the first write. ARGV carries a flat instruction
stream built by `service.sink.plan`.

`{prefix}:__resync` holds `table_id -> "{generation} {reason}"` for every resync in flight, and the
counter `__gen` (no table id starts with `__`: see keys.py) that numbers them. Every mark, TRUNCATE
or RENAME of a table in resync draws a new generation (DROP/RENAME remove the old mark), so a
resync call carrying an older generation is refused: it read its rows before that change. The
first call of the table work before a DROP, TRUNCATE, RENAME or resync start (op RB) fences the
mark (`- {reason}`) until that statement's own call replaces or removes it.
"""

from __future__ import annotations

from importlib.resources import files

from service.sink.keys import LUA_CONSTANTS

__all__ = [
    "ACQUIRE", "APPLY", "FENCE", "GUARD", "RELEASE", "RENEW", "RESYNC_FINISH", "RESYNC_REREAD", "RESYNC_ROWS",
    "SWEEP", "lua_prelude",
]  # fmt: skip

LUA_FILES = (
    "common", "derive", "document", "cascade", "apply", "resync_rows", "resync_finish", "resync_reread",
    "renew", "release", "fence", "acquire", "guard", "sweep",
)  # fmt: skip


def _load(name: str) -> str:
    return (files("service.sink") / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def lua_prelude() -> str:
    """The layout constants (keys.LUA_CONSTANTS) as Lua locals, first in every script that reads
    rows' keys or resync marks: the Lua spells no suffix or mark form itself."""
    names = ", ".join(LUA_CONSTANTS)
    values = ", ".join(_lua_string(v) for v in LUA_CONSTANTS.values())
    return f"-- layout constants: service/sink/keys.py\nlocal {names} = {values}\n"


def _lua_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# derive.lua: shaped tables' entries; document.lua: documents (derive's doc_follow, doc_gone)
_COMMON = lua_prelude() + _load("common") + _load("derive") + _load("document")

ACQUIRE = _load("acquire")
RENEW = _load("renew")
RELEASE = _load("release")
FENCE = _load("fence")  # Redis Cluster: service/sink/cluster.py
APPLY = _COMMON + _load("cascade") + _load("apply")  # cascade.lua: foreign keys (docs/mirror.md)
GUARD = _COMMON + _load("guard")  # the checks of a plain apply call (service/sink/plain.py)
RESYNC_ROWS = _COMMON + _load("resync_rows")
RESYNC_FINISH = _COMMON + _load("resync_finish")
RESYNC_REREAD = _COMMON + _load("resync_reread")
SWEEP = _COMMON + _load("sweep")  # ttl tables: expired rows' entries (service/sink/ttlsweep.py)
