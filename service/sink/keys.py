"""The Redis key layout of the mirror (documented in docs/mirror.md).

    {prefix}:{schema}:{table}:{k1}[:{k2}...]   one row (a hash, or a JSON string in json mode)
    {prefix}:{schema}:{table}:__keys           set of the table's row-key suffixes ({k1}[:{k2}...])
    {prefix}:{schema}:{table}:__touched        row suffixes written by the stream during a resync
    {prefix}:{schema}:{table}:__stale          suffixes not yet confirmed by a running resync
    {prefix}:{schema}:{table}:__derived        a shaped table's derived entries per row suffix (derive.py)
    {prefix}:{schema}:{table}:__derivedcounts  hash: its entries per index ("{tag}:{index}" -> count;
                                               index 0: the copies at the key template; derive.py)
    {prefix}:__checkpoint                      hash: id, file, pos, gtid_set, ts, gtid, values (mirror.py)
    {prefix}:__progress                        hash: the chunked transaction in flight, if any (changes
                                               done in all and per table: see mirror.py)
    {prefix}:__tableops                        hash: txn, the ids of the units of whole-table work
                                               (DROP/TRUNCATE/RENAME rows, resync copies) done, and
                                               where moves took rows, for the last transaction that
                                               had any (mirror.py)
    {prefix}:__lease                           the writer lease: token of the instance that may write
    {prefix}:__fence                           counts the takings of the lease (acquire.lua)
    {prefix}:__guard                           written when a plain apply call is refused (plain.py)
    {prefix}:__seq                             counter of applied row changes (change sequence numbers)
    {prefix}:__changes                         the optional change-log stream
    {prefix}:__tables                          set of "{schema}:{table}" (escaped) currently mirrored
    {prefix}:__layout                          the key layout's version (layoutversion.py)
    {prefix}:__shapes                          hash: "{schema}:{table}" -> the fingerprint of the
                                               [table] section its rows were written in (shaping.py)
    {prefix}:__resync                          hash: "{schema}:{table}" -> "{generation} {reason}" for
                                               resyncs in flight, and "__gen", the generation counter

Escaping makes the mapping injective: in every part (schema, table, key value) `\\` becomes `\\\\`
and `:` becomes `\\:`, and a part that starts with `__` gets one leading `\\`. So an unescaped `:` always
separates parts, and a row key can never equal a `__keys`/`__touched` key or another row's key, even for
a primary-key value of "__keys" or one containing ':'. The prefix is restricted by Settings to
`[A-Za-z0-9_.-]+`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.sink.values import key_text

__all__ = [
    "DERIVED_COUNTS_SUFFIX",
    "DERIVED_SUFFIX",
    "DOCHELD_SUFFIX",
    "DOCKIDS_SUFFIX",
    "DOCREC_SUFFIX",
    "DOCREFUSED_SUFFIX",
    "EXPIRY_SUFFIX",
    "FKDEFS_SUFFIX",
    "GENERATION_FIELD",
    "INDEX_SUFFIX",
    "LUA_CONSTANTS",
    "MARK_FENCED",
    "PARTIAL_SUFFIX",
    "STALE_SUFFIX",
    "DOCS_MARK",
    "DOCUMENT_GROUP",
    "TAGGED_MARK",
    "TOUCHED_SUFFIX",
    "GroupLayout",
    "KeyLayout",
    "escape",
    "glob_literal",
    "group_layout",
    "placed_layout",
    "parse_mark",
    "resync_mark",
    "row_suffix_of",
    "split_key",
    "unescape",
]


log = logging.getLogger(__name__)

# -- layout constants: written once, here; the Lua scripts get them from `LUA_CONSTANTS` (prepended
# by scripts.lua_prelude), so a script never spells a suffix or a mark's form itself
INDEX_SUFFIX = "__keys"  # a table's set of row-key suffixes
TOUCHED_SUFFIX = "__touched"  # rows the stream wrote during a resync
STALE_SUFFIX = "__stale"  # rows a resync has not confirmed yet
PARTIAL_SUFFIX = "__partial"  # rows a partial image merged during a resync (read again at its end)
FKDEFS_SUFFIX = "__fkdefs"  # a child table's foreign-key sets (fks.py)
DERIVED_SUFFIX = "__derived"  # a shaped table's derived entries per row (derive.py)
EXPIRY_SUFFIX = "__expiry"  # a ttl table's rows by expiry (ms), for the sweep (ttlsweep.py)
DERIVED_COUNTS_SUFFIX = "__derivedcounts"  # and how many of them each index holds (derive.py)
# documents (lua/document.lua): a table's rows' places, a parent's children, the parents with
# children but no row, and a root table's documents refused for their size
DOCREC_SUFFIX, DOCKIDS_SUFFIX = "__docrec", "__dockids"
DOCLINKS_SUFFIX = "__doclinks"  # a parent table's unique-key text -> row, per child node naming it
DOCHELD_SUFFIX, DOCREFUSED_SUFFIX = "__docheld", "__docrefused"
GENERATION_FIELD = "__gen"  # the `__resync` field counting generations
MARK_FENCED = "-"  # a fenced resync mark's generation: "- {reason}"

# name in Lua -> value
LUA_CONSTANTS = {
    "INDEX_SUFFIX": INDEX_SUFFIX,
    "TOUCHED_SUFFIX": TOUCHED_SUFFIX,
    "STALE_SUFFIX": STALE_SUFFIX,
    "PARTIAL_SUFFIX": PARTIAL_SUFFIX,
    "FKDEFS_SUFFIX": FKDEFS_SUFFIX,
    "DERIVED_SUFFIX": DERIVED_SUFFIX,
    "EXPIRY_SUFFIX": EXPIRY_SUFFIX,
    "DERIVED_COUNTS_SUFFIX": DERIVED_COUNTS_SUFFIX,
    "DOCREC_SUFFIX": DOCREC_SUFFIX,
    "DOCLINKS_SUFFIX": DOCLINKS_SUFFIX,
    "DOCKIDS_SUFFIX": DOCKIDS_SUFFIX,
    "DOCHELD_SUFFIX": DOCHELD_SUFFIX,
    "DOCREFUSED_SUFFIX": DOCREFUSED_SUFFIX,
    "GENERATION_FIELD": GENERATION_FIELD,
    "MARK_FENCED": MARK_FENCED,
}


def resync_mark(generation: int | str, reason: str) -> str:
    """A `__resync` value: "{generation} {reason}", or "- {reason}" when fenced (`MARK_FENCED`);
    lua/common.lua's `mark_value`."""
    return f"{generation} {reason}"


def parse_mark(value: str) -> tuple[int | None, str]:
    """A `__resync` value -> (generation, reason); a mark without a generation counts as 0, a
    fenced one ("- {reason}": its statement's call is not applied yet) has None."""
    gen, sep, reason = value.partition(" ")
    if not sep:
        return 0, value
    return (int(gen), reason) if gen.isdigit() else (None, reason) if gen == MARK_FENCED else (0, value)


def escape(part: str) -> str:
    out = part.replace("\\", "\\\\").replace(":", "\\:")
    return "\\" + out if out.startswith("__") else out


def unescape(part: str) -> str:
    if part.startswith("\\__"):
        part = part[1:]
    out: list[str] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "\\" and i + 1 < len(part):
            out.append(part[i + 1])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def glob_literal(text: str) -> str:
    """`text` matched literally in a SCAN MATCH glob."""
    return text.translate(_GLOB)


_GLOB = str.maketrans({c: "\\" + c for c in "*?[]\\"})


def row_suffix_of(key: bytes | str, base: str) -> str | None:
    """The row suffix of `key`, a key under `{base}:` (from SCAN); None for the table's meta keys
    (a part starting with `__`: a row's is escaped), and for a name that is not UTF-8: every row
    key is text (binary key values are 0x-hex), so such a key is no row of the mirror. Read as
    bytes first: meta keys may hold binary (foreign-key sets of an older mirror). A non-UTF-8
    name is logged, as a key written behind the mirror's back, and left alone."""
    raw = key if isinstance(key, bytes) else key.encode()
    suffix = raw[len(base.encode()) + 1 :]
    if suffix.startswith(b"__"):
        return None
    try:
        return suffix.decode()
    except UnicodeDecodeError:
        log.warning("key %r is not a key of the mirror (not UTF-8): left alone", raw)
        return None


def split_key(key: str) -> list[str]:
    """Split a key on unescaped ':' and unescape each part (the inverse of the builders)."""
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(key):
        ch = key[i]
        if ch == "\\" and i + 1 < len(key):
            cur.append(key[i : i + 2])
            i += 2
            continue
        if ch == ":":
            parts.append(unescape("".join(cur)))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append(unescape("".join(cur)))
    return parts


@dataclass(frozen=True, slots=True)
class KeyLayout:
    prefix: str = "mirror"

    # -- per table -------------------------------------------------------------------------------
    def table_id(self, schema: str, table: str) -> str:
        """`{schema}:{table}`, escaped: a member of the `__tables` set."""
        return f"{escape(schema)}:{escape(table)}"

    def table_base(self, schema: str, table: str) -> str:
        return f"{self.prefix}:{escape(schema)}:{escape(table)}"

    def row_suffix(self, values: Sequence[Any]) -> str:
        """The row part of a key from the key columns' values, in key-column order."""
        return ":".join(escape(key_text(v)) for v in values)

    def row_key(self, schema: str, table: str, values: Sequence[Any]) -> str:
        return f"{self.table_base(schema, table)}:{self.row_suffix(values)}"

    def index_key(self, schema: str, table: str) -> str:
        return f"{self.table_base(schema, table)}:{INDEX_SUFFIX}"

    def touched_key(self, schema: str, table: str) -> str:
        return f"{self.table_base(schema, table)}:{TOUCHED_SUFFIX}"

    def stale_key(self, schema: str, table: str) -> str:
        return f"{self.table_base(schema, table)}:{STALE_SUFFIX}"

    def derived_key(self, schema: str, table: str) -> str:
        return f"{self.table_base(schema, table)}:{DERIVED_SUFFIX}"

    def derived_counts_key(self, schema: str, table: str) -> str:
        return f"{self.table_base(schema, table)}:{DERIVED_COUNTS_SUFFIX}"

    def partial_key(self, schema: str, table: str) -> str:
        return f"{self.table_base(schema, table)}:{PARTIAL_SUFFIX}"

    # -- global --------------------------------------------------------------------------------
    @property
    def checkpoint_key(self) -> str:
        return f"{self.prefix}:__checkpoint"

    @property
    def progress_key(self) -> str:
        return f"{self.prefix}:__progress"

    @property
    def table_ops_key(self) -> str:
        return f"{self.prefix}:__tableops"

    @property
    def lease_key(self) -> str:
        return f"{self.prefix}:__lease"

    @property
    def fence_key(self) -> str:
        return f"{self.prefix}:__fence"

    @property
    def guard_key(self) -> str:
        return f"{self.prefix}:__guard"

    @property
    def seq_key(self) -> str:
        return f"{self.prefix}:__seq"

    @property
    def changes_key(self) -> str:
        return f"{self.prefix}:__changes"

    @property
    def tables_key(self) -> str:
        return f"{self.prefix}:__tables"

    @property
    def resync_key(self) -> str:
        return f"{self.prefix}:__resync"

    @property
    def layout_key(self) -> str:
        return f"{self.prefix}:__layout"

    @property
    def settle_key(self) -> str:
        return f"{self.prefix}:__settle"

    @property
    def shapes_key(self) -> str:
        return f"{self.prefix}:__shapes"


@dataclass(frozen=True, slots=True)
class GroupLayout(KeyLayout):
    """Redis Cluster: the keys of one table's slot group (service/sink/cluster.py). `prefix` is
    `{prefix}:{{schema:table}}` (a hash tag: every key below is in that table's slot), and the
    table's own keys hang directly under it:

        {prefix}:{{{schema}:{table}}}:{k1}[:{k2}...]   a row
        {prefix}:{{{schema}:{table}}}:__keys           its `__keys` (and __touched, __stale, __partial)
        {prefix}:{{{schema}:{table}}}:__checkpoint     the group's checkpoint (and __progress,
                                                       __tableops, __resync, __settle, __tables)
        {prefix}:{{{schema}:{table}}}:__lease          the fencing number of the last writer

    A shaped table whose templates carry a hash tag has `{prefix}:{{tag}}:__table:{schema}:{table}`
    instead (`group_layout`): its keys share the slot of the application's keys it writes.

    The global keys (lease, checkpoint to resume from, `__seq`, `__changes`, `__tables`) are those
    of `KeyLayout("{prefix}")`: one slot of their own."""

    def table_base(self, schema: str, table: str) -> str:
        return self.prefix


TAGGED_MARK = "__table"  # a tagged slot group's keys: {prefix}:{{tag}}:__table:{schema}:{table}:...


@dataclass(frozen=True, slots=True)
class DocumentGroupLayout(GroupLayout):
    """Redis Cluster: the slot group of the tables of documents whose keys carry hash tag `tag`
    (`{prefix}:{{tag}}:__docs`): a document's rows, its bookkeeping and its key are written by
    one call, so every table of it is in the group, each under a base of its own
    (`{prefix}:{{tag}}:__docs:{schema}:{table}`), as on one node."""

    def table_base(self, schema: str, table: str) -> str:
        return f"{self.prefix}:{escape(schema)}:{escape(table)}"


DOCS_MARK = "__docs"  # a document slot group's keys: {prefix}:{{tag}}:__docs:{schema}:{table}:...
DOCUMENT_GROUP = "}"  # a placement naming a document slot group: "}" + its tag (a tag holds no "}")


def placed_layout(prefix: str, schema: str, table: str, placement: str | None) -> GroupLayout:
    """The slot group a table's placement names (shaping.Shapes.placement): its own (None), its
    templates' hash tag, or the document group of a tag (`DOCUMENT_GROUP` + the tag)."""
    if placement is not None and placement.startswith(DOCUMENT_GROUP):
        return DocumentGroupLayout(f"{prefix}:{{{placement[1:]}}}:{DOCS_MARK}")
    return group_layout(prefix, schema, table, placement)


def group_layout(prefix: str, schema: str, table: str, tag: str | None = None) -> GroupLayout:
    """The slot group of a table: tagged `{schema:table}`, or with `tag` (the literal hash tag of
    a shaped table's key templates, shaping.section_tag) `{prefix}:{{tag}}:__table:{schema}:{table}`:
    in the slot of the application's keys it writes in the same call. `__table` keeps two tables
    of one tag apart, and apart from an untagged table whose id is the tag text (a row suffix
    never starts with an unescaped `__`, and no meta key has parts after its `__` name)."""
    tid = KeyLayout(prefix).table_id(schema, table)
    if tag is not None:
        return GroupLayout(f"{prefix}:{{{tag}}}:{TAGGED_MARK}:{tid}")
    # the hash tag ends at the first "}": one at the start would leave it empty (no tag at all)
    tag = "\\" + tid if tid.startswith("}") else tid
    return GroupLayout(f"{prefix}:{{{tag}}}")
