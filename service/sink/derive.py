"""Derived keys: a shaped table's row key template and its index keys (docs/mirror.md, "Key
templates and index keys"), computed from a stored row. Pure.

The mirror keeps every row at its own key under the prefix (`{prefix}:{schema}:{table}:{pk}`,
written by every path as for any table); a table with a `key` template or indexes has its
*derived entries* kept from that row in the same apply call (lua/derive.lua, after each row op,
copy and removal): the row's copy at its template key, `unique` keys (a string: the row's key),
`set` and `zset` members (the row's key). What a row's entries are is stored under the prefix,
in `{table}:__derived` (suffix -> `encode_entries`), so an entry is moved or removed from what
the mirror stored: MINIMAL images, replays and resyncs are safe.

How many entries each index holds is counted in the same calls, in `{table}:__derivedcounts`
(`counts_field(tag, index)` -> count; index 0: the row copies at the key template; a field at 0
is removed). Each record names the spec `tag` its index numbers are of, so a record written in a
former shape (a changed section: the table is copied again) takes its entries off that shape's
counts, which are gone once every row is in the new shape.

A column a template, a score or the ttl needs that columns/exclude leave out is stored hidden in
the mirror's row, as field `HIDDEN` + its name (service/shaping.py); the row's copy at its key
template leaves hidden fields out (`Derivation.hidden`, spec "h").

`Derivation.entries` is the Python twin of lua/derive.lua (the reference executor and verify use
it): the same entries and the same bytes for the same stored row.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HIDDEN",
    "Derivation",
    "Entry",
    "IndexSpec",
    "Part",
    "RawEntry",
    "Ttl",
    "counts_field",
    "derivation_of",
    "decode_entries",
    "encode_entries",
    "encode_raw",
    "entry_moves",
    "has_documents",
    "hides",
    "json_fields",
    "key_part",
    "read_fields",
    "score_of",
    "spec_tag",
    "visible",
]

Stored = str | bytes  # a stored hash value
# The first character of a hidden field's name: NUL, which no MySQL column name can hold
HIDDEN = "\0"
_NUMBER = re.compile(r"[-+0-9.eE]+")  # the texts a score may be read from (derive.lua alike)


@dataclass(frozen=True, slots=True)
class Part:
    text: str  # literal text, or a field name (the stored row's, after rename)
    field: bool = False
    binary: bool = False  # a binary column's value: 0x-hex in keys
    integer: bool = False  # an integer column's value: -?[0-9]+ (what may_collide knows of it)


@dataclass(frozen=True, slots=True)
class IndexSpec:
    kind: str  # "u" unique, "s" set, "z" zset
    parts: tuple[Part, ...]
    score: str | None = None  # zset: the field of the score
    temporal: bool = False  # the score field holds a DATE/DATETIME/TIMESTAMP text (UTC)


@dataclass(frozen=True, slots=True)
class Ttl:
    """A shaped table's expiry: `seconds` after each write, or at the instant in field `at`."""

    seconds: int | None = None
    at: str | None = None  # the field (after rename)
    temporal: bool = False  # `at` holds a DATE/DATETIME/TIMESTAMP text, else epoch seconds
    offset: int = 0  # seconds east of UTC of that text's wall time

    def expires_ms(self, row: Mapping[str, Stored], now_ms: int) -> int | None:
        """The row's expiry (epoch ms) as derive.lua sets it; None: none (NULL, a zero date)."""
        if self.seconds is not None:
            return now_ms + self.seconds * 1000
        assert self.at is not None
        value = row.get(self.at)
        if value is None:
            return None
        score = score_of(value, self.temporal)
        if score is None:
            return None
        return math.floor(float(score) * 1000) - self.offset * 1000


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str  # "k" the row's copy at its template key, "u", "s", "z"
    key: str
    score: str = ""  # zset: '%.17g' of the score
    index: int = 0  # its index's number in the spec (1, 2, ...); 0: the row's copy


# An entry as the per-row paths keep it (kind, key, score, index): Entry's fields, without an
# object per entry (a dataclass's __init__ is interpreted code even in the compiled build)
RawEntry = tuple[str, str, str, int]


def has_documents(spec_text: str) -> bool:
    """Whether a spec names its table's roles in documents (spec "d")."""
    return ',"d":"' in spec_text


def hides(spec_text: str) -> bool:
    """Whether rows of the spec `spec_text` hold hidden fields (spec "h", written last)."""
    return spec_text.endswith(',"h":1}')


def visible(image: dict[str, Any] | None) -> dict[str, Any] | None:
    """An image less its hidden fields (what the change log and the websocket carry)."""
    if image is None:
        return None
    return {k: v for k, v in image.items() if not k.startswith(HIDDEN)}


_reads: dict[str, frozenset[str] | None] = {}


def read_fields(spec_text: str) -> frozenset[str] | None:
    """The fields the entries of a spec's rows are derived from (its templates' and scores'), or
    None with a ttl (every write may renew or move the expiry): an update that changes none of
    them leaves the entries where they are, and the copy takes the same changes (lua/derive.lua's
    `follow_copy`)."""
    if spec_text not in _reads:
        d = derivation_of(spec_text)[0]
        parts = [*(d.key or ()), *(p for i in d.indexes for p in i.parts)]
        fields = {p.text for p in parts if p.field} | {i.score for i in d.indexes if i.score}
        # (documents render every field: a row of theirs goes whole, through derive)
        _reads[spec_text] = frozenset(fields) if d.ttl is None and d.documents is None else None
    return _reads[spec_text]


# (member, expected record, new record, drops, adds, count changes): entry_moves
Moves = tuple[
    str, str, str, tuple[tuple[str, str], ...], tuple[tuple[str, str, str], ...], tuple[tuple[str, int], ...]
]


def entry_moves(
    spec_text: str, before: Mapping[str, Stored], after: Mapping[str, Stored], own_key: str
) -> Moves | None:
    """What an update from the stored fields `before` to `after` (field -> hash text, the fields
    `read_fields` names) does to a row's entries, as lua/derive.lua's `derive` would: (member,
    expected record, new record, drops (kind, key), adds (kind, key, score), count changes); None
    when the member changes (a key template's field: the copy moves whole), a ttl, or a row
    without entries. (An index whose fields the update leaves keeps its entry: rendered and
    encoded once for both records.)"""
    d, tag = derivation_of(spec_text)
    if d.ttl is not None or d.documents is not None:
        return None
    member: str | None = own_key
    if d.key is not None:
        member = d.render(d.key, before)
        if member is None:
            return None
        if _reads_changed(d.key, None, before, after) and d.render(d.key, after) != member:
            return None
    assert member is not None
    old: list[RawEntry] = []
    new: list[RawEntry] = []
    old_pieces: list[str] = []
    new_pieces: list[str] = []
    try:
        old_pieces.append(_lv(tag) + _lv(member))
        if d.key is not None:
            piece = "k" + _lv(member)
            old.append(("k", member, "", 0))
            new.append(("k", member, "", 0))
            old_pieces.append(piece)
            new_pieces.append(piece)
        for number, ix in enumerate(d.indexes, 1):
            o = _index_entry(ix, number, before)
            if o is not None:
                old.append(o)
                old_pieces.append(_piece(o))
            if not _reads_changed(ix.parts, ix.score, before, after):
                if o is not None:
                    new.append(o)
                    new_pieces.append(old_pieces[-1])
                continue
            n = _index_entry(ix, number, after)
            if n is not None:
                new.append(n)
                new_pieces.append(_piece(n))
    except UnicodeEncodeError:  # (bytes in a text column's key part: the script derives it)
        return None
    expected = "".join(old_pieces)
    record = old_pieces[0] + "".join(new_pieces)
    before_ids = {e[:3] for e in old}
    after_ids = {e[:3] for e in new}
    counts: dict[str, int] = {}
    drops: list[tuple[str, str]] = []
    adds: list[tuple[str, str, str]] = []
    for e in old:
        if e[:3] not in after_ids:
            drops.append((e[0], e[1]))
            f = counts_field(tag, e[3])
            counts[f] = counts.get(f, 0) - 1
    for e in new:
        if e[:3] not in before_ids:
            adds.append((e[0], e[1], e[2]))
            f = counts_field(tag, e[3])
            counts[f] = counts.get(f, 0) + 1
    changed = tuple((f, n) for f, n in counts.items() if n)
    return member, expected, record, tuple(drops), tuple(adds), changed


def _reads_changed(
    parts: Sequence[Part], score: str | None, before: Mapping[str, Stored], after: Mapping[str, Stored]
) -> bool:
    """Whether a template's fields (and a score's) differ between two rows."""
    for p in parts:
        if p.field and before.get(p.text) != after.get(p.text):
            return True
    return score is not None and before.get(score) != after.get(score)


def _index_entry(ix: IndexSpec, number: int, row: Mapping[str, Stored]) -> RawEntry | None:
    """The entry of index `ix` (its number `number`) for a stored row; None: NULL, no entry."""
    key = Derivation.render(ix.parts, row)
    if key is None:
        return None
    if ix.kind == "z":
        assert ix.score is not None
        value = row.get(ix.score)
        score = score_of(value, ix.temporal) if value is not None else None
        if score is None:
            return None
        return ("z", key, score, number)
    return (ix.kind, key, "", number)


_derivations: dict[str, tuple[Derivation, str]] = {}


def derivation_of(spec_text: str) -> tuple[Derivation, str]:
    """A spec text's derivation and tag, once (a Derivation's hash walks all its parts)."""
    got = _derivations.get(spec_text)
    if got is None:
        d = Derivation.from_spec(spec_text)
        got = _derivations[spec_text] = (d, d.tag)
    return got


def spec_tag(spec_text: str) -> str:
    """The tag of a derivation's spec text (lua/derive.lua's `derive_spec`): what the index
    numbers of a `__derived` record and of its counts' fields are numbers of."""
    return hashlib.sha1(spec_text.encode()).hexdigest()[:12]


def counts_field(tag: str, index: int) -> str:
    """The `__derivedcounts` field counting the entries of index `index` (0: the row copies)."""
    return f"{tag}:{index}"


def key_part(value: Stored, binary: bool) -> str:
    """A stored value as a key part, as keys.escape(values.key_text(v)) renders the decoded one."""
    if binary:
        text = "0x" + (value if isinstance(value, bytes) else value.encode()).hex()
    else:
        text = _text(value)
    out = text.replace("\\", "\\\\").replace(":", "\\:")
    return "\\" + out if out.startswith("__") else out


def _text(value: Stored) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def score_of(value: Stored, temporal: bool) -> str | None:
    """A zset score's text ('%.17g'), or None (no entry): a temporal value as epoch seconds (UTC);
    a zero date, or a value that is not a number, has none."""
    text = _text(value)
    if not temporal:
        if not _NUMBER.fullmatch(text):
            return None  # (a numeric column's text always is; Lua's tonumber takes other forms)
        try:
            return "%.17g" % float(text)  # noqa: UP031 - the Lua's format, byte for byte
        except ValueError:
            return None
    try:
        y, m, d = int(text[0:4]), int(text[5:7]), int(text[8:10])
        secs = 0
        frac = 0.0
        if len(text) > 10:
            secs = int(text[11:13]) * 3600 + int(text[14:16]) * 60 + int(text[17:19])
            if len(text) > 20:
                frac = float("0." + text[20:])
    except ValueError:
        return None
    if y == 0 or m == 0 or d == 0:
        return None
    return "%.17g" % (_days_from_civil(y, m, d) * 86400 + secs + frac)  # noqa: UP031


def json_fields(doc: bytes, conv: Mapping[str, str]) -> dict[str, Stored]:
    """A json row's fields as their hash text (derive.lua's json_row): numbers as their literal
    text, strings unescaped, `conv`'s fields converted ("b": base64 -> bytes, "t": a TIMESTAMP's
    `T`/`Z` form -> its wall time); null absent; nested values (not derived from) left out."""
    row = json.loads(doc, parse_int=str, parse_float=str, parse_constant=str)
    out: dict[str, Stored] = {}
    for k, v in row.items():
        if not isinstance(v, str):
            continue
        kind = conv.get(k)
        if kind == "b":
            out[k] = base64.b64decode(v)
        elif kind == "t":
            out[k] = v.replace("T", " ").removesuffix("Z")
        else:
            out[k] = v
    return out


def _lv(text: str) -> str:
    n = len(text) if text.isascii() else len(text.encode())
    return f"{n}:{text}"


def _piece(e: RawEntry) -> str:
    """One entry's part of a `__derived` value (encode_entries)."""
    kind = e[0]
    if kind == "k":
        return "k" + _lv(e[1])
    number = str(e[3])
    piece = f"{kind}{len(number)}:{number}{_lv(e[1])}"
    return piece + _lv(e[2]) if kind == "z" else piece


def encode_entries(tag: str, member: str, entries: Sequence[Entry]) -> str:
    """A `__derived` value: the spec's tag, the member the entries hold (the row's key), then each
    entry: its kind, its index's number (not for the copy, "k"), its key and (zset) its score,
    `len:text` each (len in bytes)."""
    return encode_raw(tag, member, [(e.kind, e.key, e.score, e.index) for e in entries])


def encode_raw(tag: str, member: str, entries: Sequence[RawEntry]) -> str:
    """encode_entries of raw entries (Derivation.raw_entries)."""
    out = [_lv(tag), _lv(member)]
    for e in entries:
        out.append(_piece(e))
    return "".join(out)


def decode_entries(raw: str | bytes, layout2: bool = False) -> tuple[str, str, list[Entry]]:
    """(tag, member, entries) of a `__derived` value; `layout2`: key layout 2's form (no tag, no
    index numbers: tag "", every index 0), which only `ctl clear` still reads."""
    data = raw if isinstance(raw, bytes) else raw.encode()
    at = 0

    def lv() -> str:
        nonlocal at
        colon = data.index(b":", at)
        end = colon + 1 + int(data[at:colon])
        text = data[colon + 1 : end].decode()
        at = end
        return text

    tag = "" if layout2 else lv()
    member = lv()
    entries: list[Entry] = []
    while at < len(data):
        kind = chr(data[at])
        at += 1
        index = int(lv()) if kind != "k" and not layout2 else 0
        key = lv()
        entries.append(Entry(kind, key, lv() if kind == "z" else "", index))
    return tag, member, entries


@dataclass(frozen=True, slots=True)
class Derivation:
    """A table's derived entries: its row key template (None: rows stay at their own key, the
    index members are that key) and its indexes."""

    key: tuple[Part, ...] | None
    indexes: tuple[IndexSpec, ...]
    ttl: Ttl | None = None
    # json rows (value_mode json): the fields derive reads whose document text is converted to
    # the hash text ("b": base64 -> bytes, "t": a TIMESTAMP's "…T…Z" -> "… …"); None: hash rows
    json: tuple[tuple[str, str], ...] | None = None
    hidden: bool = False  # rows hold hidden fields (HIDDEN + column), which the copy leaves out
    # the table's roles in documents (service/documents.py: the JSON text lua/document.lua reads)
    documents: str | None = None

    @property
    def tag(self) -> str:
        return _tag_of(self)

    def counts(self, raw: Mapping[bytes, bytes] | Mapping[str, str]) -> tuple[int, tuple[int, ...]]:
        """From a `__derivedcounts` hash: the row copies at the key template and each index's
        entries, in this spec (another shape's fields, left while a resync moves the rows into
        this one, are not counted)."""
        got = {_text(k): int(v) for k, v in raw.items()}
        tag = self.tag
        n = [got.get(counts_field(tag, i), 0) for i in range(len(self.indexes) + 1)]
        return n[0], tuple(n[1:])

    def spec_text(self) -> str:
        """The form lua/derive.lua reads (cjson): parts as "=literal", "@field" or "#field" (binary)."""

        def parts(ps: Sequence[Part]) -> list[str]:
            return [("#" if p.binary else "@") + p.text if p.field else "=" + p.text for p in ps]

        spec: dict[str, Any] = {
            "k": parts(self.key) if self.key is not None else [],
            "i": [[i.kind, parts(i.parts), i.score or "", "t" if i.temporal else "n"] for i in self.indexes],
        }
        if (t := self.ttl) is not None:  # [seconds (0: at), at field, "t"|"n", offset]
            spec["t"] = [t.seconds or 0, t.at or "", "t" if t.temporal else "n", t.offset]
        if self.json is not None:
            spec["j"] = dict(self.json)
        if self.documents is not None:
            spec["d"] = self.documents
        if self.hidden:
            spec["h"] = 1  # (last: `hides` reads the text's end)
        return json.dumps(spec, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_spec(cls, text: str) -> Derivation:
        """The derivation `spec_text` wrote (the reference executor reads the IR's spec)."""
        spec = json.loads(text)

        def parts(ps: Sequence[str]) -> tuple[Part, ...]:
            return tuple(Part(p[1:]) if p[0] == "=" else Part(p[1:], True, p[0] == "#") for p in ps)

        key = parts(spec["k"]) if spec["k"] else None
        indexes = tuple(
            IndexSpec(k, parts(ps), score or None, kind == "t") for k, ps, score, kind in spec["i"]
        )
        ttl = None
        if "t" in spec:
            seconds, at, kind, offset = spec["t"]
            ttl = Ttl(seconds or None, at or None, kind == "t", offset)
        json_fields = tuple(sorted(spec["j"].items())) if "j" in spec else None
        return cls(key, indexes, ttl, json_fields, "h" in spec, spec.get("d"))

    def stored_fields(self, value: bytes | Mapping[bytes, bytes]) -> dict[str, Stored]:
        """A stored row (HGETALL's fields, or a json row's document) as field -> hash text, as
        lua/derive.lua reads it."""
        if self.json is None:
            assert not isinstance(value, bytes)
            return {k.decode(): v for k, v in value.items()}
        return json_fields(value if isinstance(value, bytes) else b"", dict(self.json))

    @staticmethod
    def render(parts: Sequence[Part], row: Mapping[str, Stored]) -> str | None:
        out: list[str] = []
        for p in parts:
            if not p.field:
                out.append(p.text)
                continue
            value = row.get(p.text)
            if value is None:
                return None  # NULL: no such entry
            out.append(key_part(value, p.binary))
        return "".join(out)

    def entries(self, row: Mapping[str, Stored], own_key: str) -> tuple[str | None, list[Entry]]:
        """The member (the row's key) and the entries of a stored row (field -> stored value).
        A row without a key template's column (a partial image merged into a row the mirror did
        not have: a resync reads it again) has none yet: (None, [])."""
        member, raw = self.raw_entries(row, own_key)
        return member, [Entry(*e) for e in raw]

    def raw_entries(self, row: Mapping[str, Stored], own_key: str) -> tuple[str | None, list[RawEntry]]:
        """`entries` as (kind, key, score, index) tuples (the per-row paths: plain.py, entry_moves)."""
        out: list[RawEntry] = []
        member = own_key
        if self.key is not None:
            rendered = self.render(self.key, row)
            if rendered is None:
                return None, []
            member = rendered
            out.append(("k", member, "", 0))
        for number, ix in enumerate(self.indexes, 1):
            e = _index_entry(ix, number, row)
            if e is not None:
                out.append(e)
        return member, out


_tags: dict[Derivation, str] = {}


def _tag_of(d: Derivation) -> str:
    tag = _tags.get(d)
    if tag is None:
        tag = _tags[d] = spec_tag(d.spec_text())
    return tag
