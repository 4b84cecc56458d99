"""Per-table shaping of the mirror (docs/mirror.md, "Shaping"): which fields a table's rows keep
and under which names, from the config file's `[table."schema.table"]` sections.

Pure: settings in, checked against what the source says a table is (`TableInfo`), a `Shape` out.
Every refusal is one line naming the table, the section and the setting (`ShapeError`, a
`ConfigError`: it stops the run).

It applies `columns` / `exclude` and `rename`, and turns a `key` template, `index` entries and
a `ttl` into the table's `Derivation` (service/sink/derive.py: the entries the apply script keeps).
A column a template, a score or a ttl needs but columns/exclude leave out is kept hidden: in the
mirror's own row under a name no column can have (`HIDDEN` + its name), never in the row's copy
at its key template, the change log or the websocket. `value` is refused by `service.settings`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from service.document_settings import DocumentSettings
from service.documents import DocumentError, Documents, Stored
from service.errors import ConfigError
from service.section_settings import (
    SHAPE_FORMAT,
    IndexSettings,
    SectionSettings,
    TtlSettings,
    section_fingerprint,
    value_of,
)
from service.sink.derive import HIDDEN, Derivation, IndexSpec, Part, Ttl, visible
from service.sink.keys import DOCUMENT_GROUP, KeyLayout, placed_layout
from service.table_info import ColumnStatus, TableInfo
from service.templates import TemplatePart, may_collide, parse_template, segments, template_tag

__all__ = [
    "IndexSettings",
    "SectionSettings",
    "Shape",
    "ShapeError",
    "Shapes",
    "TemplatePart",
    "TtlSettings",
    "parse_template",
    "section_tag",
    "template_tag",
    "section_fingerprint",
    "section_for",
    "value_of",
]


class ShapeError(ConfigError):
    """A `[table."…"]` section that cannot apply to a table (one line: table, section, setting)."""


def section_tag(section: SectionSettings) -> str | None:
    """The one hash tag a section's `key` and index templates share (None: it has no template, its
    keys stay in the table's own slot group). On a Redis Cluster a table's rows, entries and
    bookkeeping are written by one script call, so they must be in one slot. ValueError naming
    the setting and the way to arrange the tags."""
    templates = [("key", section.key)] if section.key is not None else []
    templates += [(f"index[{n}]", ix.key) for n, ix in enumerate(section.indexes)]
    tag: str | None = None
    first = ""
    for setting, template in templates:
        try:
            mine = template_tag(template)
        except ValueError as exc:
            raise ValueError(f"{setting}: {template!r} {exc}; {TAG_WAY}") from None
        if tag is not None and mine != tag:
            raise ValueError(
                f"{setting}: {template!r} has hash tag {{{mine}}}, {first} has {{{tag}}}: a table's "
                f"keys must share one slot; {TAG_WAY}"
            )
        if tag is None:
            tag, first = mine, setting
    return tag


TAG_WAY = (
    "on a Redis Cluster give the row key and every index one literal hash tag before any "
    "placeholder, e.g. key = 'app:{{users}}:user:{id}', index key = 'app:{{users}}:user-by-email:{email}'"
)


def _specificity(pattern: str) -> tuple[int, int]:
    """An exact name beats every glob; then the glob with more literal characters."""
    wild = sum(pattern.count(c) for c in "*?[")
    return (0 if wild else 1, len(pattern) - wild)


def section_for(patterns: Iterable[str], schema: str, table: str) -> str | None:
    """The pattern of the section that applies to `schema.table`: the most specific match.
    ShapeError when two equally specific patterns match (which one was meant is not known)."""
    name = f"{schema}.{table}"
    matches = sorted((p for p in patterns if fnmatchcase(name, p)), key=_specificity, reverse=True)
    if len(matches) > 1 and _specificity(matches[0]) == _specificity(matches[1]):
        raise ShapeError(
            f'table {name}: sections [table."{matches[0]}"] and [table."{matches[1]}"] both match it '
            "and neither is more specific; name the table in a section of its own"
        )
    return matches[0] if matches else None


@dataclass(frozen=True, slots=True)
class Shape:
    """What a shaped table's rows keep: `fields` maps each kept source column to its name in the
    mirror (every image the mirror writes, publishes or logs goes through `apply`)."""

    schema: str
    table: str
    section: str  # the pattern of its `[table."…"]` section
    fields: Mapping[str, str]  # source column -> field name, for the kept columns only
    dropped: frozenset[str]  # columns never stored nor published
    renames: bool  # some field has another name than its column
    derivation: Derivation | None = None  # its key template and indexes (service/sink/derive.py)
    # left out by columns/exclude but named by a template, a score or the ttl: column -> its
    # field in the mirror's own row (HIDDEN + column), which nothing the mirror publishes holds
    hidden: Mapping[str, str] = field(default_factory=dict)

    def apply(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """`row` (whole or partial image) as the mirror stores it: the kept columns under their
        field names, then the hidden ones."""
        fields, hidden = self.fields, self.hidden
        if not self.renames and not hidden:  # (most sections: a copy less the dropped columns)
            kept = dict(row)
            for k in self.dropped:
                kept.pop(k, None)
            if kept.keys() <= fields.keys():  # (else a column unknown when shaped: filtered below)
                return kept
        out = {fields[k]: v for k, v in row.items() if k in fields}
        if hidden:
            out.update((hidden[k], v) for k, v in row.items() if k in hidden)
        return out

    def visible(self, image: dict[str, Any] | None) -> dict[str, Any] | None:
        """A stored image (`apply`'s) without its hidden fields: what is published."""
        return visible(image) if self.hidden else image

    def refuse_foreign_key(self, constraint: str, columns: Sequence[str]) -> None:
        """A foreign key between mirrored tables: the mirror applies its cascades by the stored
        columns, so they must be stored under their own names. (A table with derived entries
        may have one: cascade.lua keeps its entries with the rows it changes.)"""
        for col in columns:
            if col in self.dropped or col in self.hidden or self.fields.get(col, col) != col:
                what = "renames" if col in self.fields else "leaves out"
                raise ShapeError(
                    f'table {self.schema}.{self.table} [table."{self.section}"]: columns/exclude/rename '
                    f"{what} column {col} of foreign key {constraint}; the mirror applies cascades by "
                    "that column, keep it under its own name"
                )


def resolve(pattern: str, section: SectionSettings, info: TableInfo, json_mode: bool = False) -> Shape:
    """Check `section` against the table and build its shape; ShapeError names what is wrong."""
    name = f"{info.schema}.{info.table}"
    where = f'table {name} [table."{pattern}"]'
    columns = {c.name: c for c in info.columns}
    key = info.key or ()

    def unknown(setting: str, names: Iterable[str]) -> None:
        for col in names:
            if col not in columns:
                raise ShapeError(f"{where}: {setting}: {col} names no column of {name}")

    if section.key is not None:
        parts = parse_template(section.key)  # its syntax was checked with the settings
        used = [p.text for p in parts if p.column]
        unknown("key", used)
        for col in key:
            if col not in used:
                raise ShapeError(f"{where}: key: {section.key!r} lacks key column {{{col}}} of {name}")
        for col in used:
            if columns[col].nullable:
                raise ShapeError(f"{where}: key: column {col} is nullable; a row key cannot hold NULL")
    if section.columns is not None:
        unknown("columns", section.columns)
        kept = [c.name for c in info.columns if c.name in set(section.columns)]
        for col in key:
            if col not in kept:
                raise ShapeError(f"{where}: columns: leaves out key column {col}; key columns are kept")
    else:
        unknown("exclude", section.exclude)
        for col in key:
            if col in section.exclude:
                raise ShapeError(f"{where}: exclude: {col} is a key column; key columns are always kept")
        kept = [c.name for c in info.columns if c.name not in set(section.exclude)]
    renames = dict(section.rename)
    unknown("rename", renames)
    for col in renames:
        if col in key:
            raise ShapeError(f"{where}: rename: {col} is a key column; renaming one is not supported yet")
        if col not in kept:
            raise ShapeError(f"{where}: rename: {col} is not kept (columns/exclude)")
    fields = {col: renames.get(col, col) for col in kept}
    seen: dict[str, str] = {}
    for col, name in fields.items():
        if name in seen:
            raise ShapeError(f"{where}: rename: columns {seen[name]} and {col} would both be field {name}")
        if name.startswith(HIDDEN):
            raise ShapeError(
                f"{where}: rename: field {name!r} starts with NUL, the mirror's mark of a hidden field"
            )
        seen[name] = col
    # with a key template applications read the row's copy: a column it, an index or the ttl
    # needs is kept hidden in the mirror's own row (without one, that row is what they read)
    hidden = {}
    if section.key is not None:
        hidden = {c: HIDDEN + c for c in _derived_columns(section) if c in columns and c not in fields}
    return Shape(
        info.schema,
        info.table,
        pattern,
        fields,
        frozenset(columns) - set(kept) - set(hidden),
        any(col != to for col, to in fields.items()),
        _derivation(where, section, info, {**fields, **hidden}, json_mode, bool(hidden)),
        hidden,
    )


def _derived_columns(section: SectionSettings) -> list[str]:
    """The columns a section's key template, index templates, zset scores and ttl `at` name."""
    templates = [section.key] if section.key is not None else []
    templates += [ix.key for ix in section.indexes]
    out = [p.text for t in templates for p in parse_template(t, placeholders=False) if p.column]
    out += [ix.score for ix in section.indexes if ix.score is not None]
    if section.ttl is not None and section.ttl.at is not None:
        out.append(section.ttl.at)
    return list(dict.fromkeys(out))


BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB", "GEOMETRY"})
NUMERIC_TYPES = frozenset(
    {"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "DECIMAL", "FLOAT", "DOUBLE", "YEAR", "BIT"}
)
TEMPORAL_TYPES = frozenset({"DATE", "DATETIME", "TIMESTAMP"})
INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "YEAR"})
INDEX_KINDS = {"unique": "u", "set": "s", "zset": "z"}
# json rows: types whose document text is not the hash text a key renders (a float's exponent
# form, a JSON document, a SET, a geometry)
JSON_TEXT_DIFFERS = frozenset({"FLOAT", "DOUBLE", "JSON", "SET", "GEOMETRY", "VECTOR"})


def _derivation(
    where: str,
    section: SectionSettings,
    info: TableInfo,
    fields: Mapping[str, str],
    json_mode: bool,
    hidden: bool = False,
) -> Derivation | None:
    """The derived entries of a section with a `key` template, indexes or a ttl
    (service/sink/derive.py); `fields`: every stored column (kept or hidden) -> its field; without
    a key template a column a template or a score names must be kept (an excluded column never
    leaves the process). In json mode derive reads the fields it needs from the document
    (`json_fields`): binary ones are base64 there, TIMESTAMPs have a `T` and a `Z`. `hidden`: the
    rows hold hidden fields, which their copies leave out."""
    if section.key is None and not section.indexes and section.ttl is None:
        return None
    columns = {c.name: c for c in info.columns}

    def parts(setting: str, template: str, placeholders: bool = True) -> tuple[Part, ...]:
        out = []
        used.clear()
        for p in parse_template(template, placeholders):
            if not p.column:
                out.append(Part(p.text))
                continue
            if p.text not in columns:
                raise ShapeError(
                    f"{where}: {setting}: {p.text} names no column of {info.schema}.{info.table}"
                )
            if p.text not in fields:
                raise ShapeError(
                    f"{where}: {setting}: column {p.text} is left out by columns/exclude; without a key "
                    "template the mirror's row is the one applications read: keep it, or add a key "
                    "template (the column is then kept hidden in the mirror's own row)"
                )
            used.add(p.text)
            ctype = columns[p.text].type
            out.append(Part(fields[p.text], True, ctype in BINARY_TYPES, ctype in INTEGER_TYPES))
        check_one_value_per_part(where, setting, out)
        return tuple(out)

    used: set[str] = set()  # the columns of the last template `parts` read
    key = parts("key", section.key) if section.key is not None else None
    uniques = [set(u) for u in (*info.uniques, info.key or ())]
    indexes: list[IndexSpec] = []
    for n, ix in enumerate(section.indexes):
        setting = f"index[{n}]"
        kind = INDEX_KINDS[ix.kind]
        ps = parts(setting, ix.key, placeholders=ix.kind == "unique")
        if ix.kind == "unique":
            if not any(u and u <= used for u in uniques):
                raise ShapeError(
                    f"{where}: {setting}: unique key {ix.key!r}: columns {', '.join(sorted(used))} hold "
                    'no UNIQUE index of the source; two rows could claim one key (use kind = "set")'
                )
        score, temporal = None, False
        if ix.kind == "zset":
            if ix.score is None:
                raise ShapeError(
                    f"{where}: {setting}: a zset index needs `score`, a numeric or temporal column"
                )
            col = columns.get(ix.score)
            if col is None:
                raise ShapeError(f"{where}: {setting}: score: {ix.score} names no column")
            if col.type not in NUMERIC_TYPES | TEMPORAL_TYPES:
                raise ShapeError(
                    f"{where}: {setting}: score: column {ix.score} is {col.type}, not numeric or temporal"
                )
            if ix.score not in fields:
                raise ShapeError(
                    f"{where}: {setting}: score: column {ix.score} is left out by columns/exclude; keep "
                    "it, or add a key template (it is then kept hidden in the mirror's own row)"
                )
            score, temporal = fields[ix.score], col.type in TEMPORAL_TYPES
        elif ix.score is not None:
            raise ShapeError(f'{where}: {setting}: score is for kind = "zset" only')
        indexes.append(IndexSpec(kind, ps, score, temporal))
    ttl = _ttl(where, section, columns, fields)
    if not json_mode:
        return Derivation(key, tuple(indexes), ttl, hidden=hidden)
    used_fields = {p.text for ps in (key or (), *(i.parts for i in indexes)) for p in ps if p.field}
    used_fields |= {i.score for i in indexes if i.score} | ({ttl.at} if ttl and ttl.at else set())
    by_field = {f: columns[c] for c, f in fields.items()}
    conv: dict[str, str] = {}
    for f in sorted(used_fields):
        ctype = by_field[f].type
        if ctype in JSON_TEXT_DIFFERS:
            raise ShapeError(
                f"{where}: key/index/ttl: column {by_field[f].name} is {ctype}; its JSON text is not its "
                "key text, so value_mode json cannot derive keys from it (use value_mode hash)"
            )
        if ctype in BINARY_TYPES or ctype == "TIMESTAMP":
            conv[f] = "b" if ctype in BINARY_TYPES else "t"
    return Derivation(key, tuple(indexes), ttl, json=tuple(sorted(conv.items())), hidden=hidden)


def _ttl(
    where: str, section: SectionSettings, columns: Mapping[str, ColumnStatus], fields: Mapping[str, str]
) -> Ttl | None:
    """The section's expiry: `at` a DATE/DATETIME/TIMESTAMP (its UTC instant; a DATETIME/DATE at
    the offset `timezone` names) or integer (epoch seconds) column, kept; or `seconds`."""
    t = section.ttl
    if t is None:
        return None
    if t.at is None:
        return Ttl(seconds=t.seconds)
    col = columns.get(t.at)
    if col is None:
        raise ShapeError(f"{where}: ttl: at: {t.at} names no column")
    if col.type not in TEMPORAL_TYPES | INTEGER_TYPES:
        raise ShapeError(
            f"{where}: ttl: at: column {t.at} is {col.type}; expected DATE, DATETIME, TIMESTAMP or an "
            "integer column (epoch seconds)"
        )
    if t.at not in fields:
        raise ShapeError(
            f"{where}: ttl: at: column {t.at} is left out by columns/exclude; keep it, or add a key "
            "template (it is then kept hidden in the mirror's own row)"
        )
    if t.offset and col.type not in ("DATE", "DATETIME"):
        raise ShapeError(
            f"{where}: ttl: timezone: column {t.at} is {col.type}, already an instant; remove timezone"
        )
    return Ttl(at=fields[t.at], temporal=col.type in TEMPORAL_TYPES, offset=t.offset)


def check_one_value_per_part(where: str, setting: str, parts: Sequence[Part]) -> None:
    """Two placeholders in one `:`-part could split a key two ways ({a}-{b}: "x--y")."""
    for seg in segments(parts):
        fields = [p.text for p in seg if p.field]
        if len(fields) > 1:
            raise ShapeError(
                f"{where}: {setting}: placeholders {{{fields[0]}}} and {{{fields[1]}}} are in one "
                "':'-separated part; separate them with ':' (a value's ':' is escaped, so a key splits "
                "back only at ':')"
            )


class Shapes:
    """The shapes of the tables in use, from the sections; one owner (the Catalog), asked per
    table. `resolve` runs whenever a table's definition is read (start, after each DDL on it)."""

    def __init__(
        self,
        sections: Mapping[str, SectionSettings],
        prefix: str = "mirror",
        json_mode: bool = False,
        documents: Mapping[str, DocumentSettings] | None = None,
        cluster: bool = False,
    ) -> None:
        self.sections = dict(sections)
        self.prefix = prefix  # the mirror's own keys: no template may name one
        self.json_mode = json_mode  # rows are JSON documents (value_mode json): derive reads them so
        self._shapes: dict[tuple[str, str], Shape] = {}
        # on a Redis Cluster a document's rows are in its slot group (`placement`)
        self.documents = Documents(
            documents or {}, self._group_base if cluster else KeyLayout(prefix).table_base
        )
        self._doc_tables = self.documents.tables()
        self._doc_tags = self.documents.tags(self.tag, prefix) if cluster else {}  # (DocumentError)
        self._specs: dict[tuple[str, str], str] = {}  # derive spec texts, until a table is read again

    def __bool__(self) -> bool:
        return bool(self.sections) or bool(self.documents)

    def resolve(self, info: TableInfo) -> Shape | None:
        key = (info.schema, info.table)
        self._shapes.pop(key, None)
        self._specs.clear()  # (a document's spec holds every one of its tables)
        pattern = section_for(self.sections, info.schema, info.table)
        shape = None
        if pattern is not None and info.exists:
            shape = resolve(pattern, self.sections[pattern], info, self.json_of(info.schema, info.table))
            self._check_templates(shape)
            self._shapes[key] = shape
        if key in self._doc_tables:
            if pattern is not None and not self.documents.standalone(*key):
                raise ShapeError(
                    f'table {info.schema}.{info.table} [table."{pattern}"]: a document says standalone = '
                    "false for it: remove one of the two"
                )
            stored = (
                {c.name: c.name for c in info.columns} if shape is None else {**shape.fields, **shape.hidden}
            )
            self.documents.note(Stored(info, stored, self.json_of(*key)))
        return shape

    def derive_spec(self, schema: str, table: str) -> str:
        """The table's derived entries' spec for the scripts ("": none; service/sink/derive.py),
        with its roles in documents (service/documents.py)."""
        key = (schema, table)
        text = self._specs.get(key)
        if text is None:
            shape = self._shapes.get(key)
            d = shape.derivation if shape is not None else None
            roles = self.documents.spec(schema, table) if key in self._doc_tables else None
            if roles is not None:
                d = d or Derivation(None, ())
                docs = json.dumps(roles, separators=(",", ":"), ensure_ascii=False)
                d = Derivation(d.key, d.indexes, d.ttl, d.json, d.hidden, docs)
            text = self._specs[key] = d.spec_text() if d is not None else ""
        return text

    def check_documents(self, wanted: Iterable[tuple[str, str]]) -> None:
        """Every document's tables are mirrored and its sections apply to them (DocumentError)."""
        wanted = set(wanted)
        for s, t in sorted(self._doc_tables):
            if (s, t) not in wanted:
                raise DocumentError(
                    f"[document] table {s}.{t} is in a document but not mirrored: add it to `tables`"
                )
            self.derive_spec(s, t)
        for setting, parts in self.documents.key_parts():
            if may_collide(segments(parts)[0], [Part(self.prefix)]):
                raise DocumentError(
                    f"{setting}: its keys could start with {self.prefix}:, the mirror's own key prefix"
                )
            for other, theirs in [
                *self.documents.key_parts(),
                *((f"[table] {s}", p) for o in self._shapes.values() for s, p in _templates(o)),
            ]:
                if other != setting and may_collide(parts, theirs):
                    raise DocumentError(f"{setting}: its keys could be the same as those of {other}")

    def _check_templates(self, shape: Shape) -> None:
        """No template can name one of the mirror's own keys, nor a key another template (of this
        table or another) can name."""
        mine = _templates(shape)
        where = f'table {shape.schema}.{shape.table} [table."{shape.section}"]'
        for setting, parts in mine:
            first = segments(parts)[0]
            if may_collide(first, [Part(self.prefix)]):
                raise ShapeError(
                    f"{where}: {setting}: its keys could start with {self.prefix}:, the mirror's own "
                    "key prefix; start it with other literal text, or mirror under another key_prefix"
                )
        others = [
            (f'table {o.schema}.{o.table} [table."{o.section}"] {s}', p)
            for k, o in self._shapes.items()
            if k != (shape.schema, shape.table)
            for s, p in _templates(o)
        ]
        for n, (setting, parts) in enumerate(mine):
            for other, theirs in [*((f"{where} {s}", p) for s, p in mine[n + 1 :]), *others]:
                if may_collide(parts, theirs):
                    raise ShapeError(
                        f"{where}: {setting}: its keys could be the same as those of {other}; make "
                        "their literal text differ (for example another word before the first ':')"
                    )

    def get(self, schema: str, table: str) -> Shape | None:
        return self._shapes.get((schema, table))

    def json_of(self, schema: str, table: str) -> bool:
        """Whether the table's rows are JSON documents: its section's `value`, else value_mode."""
        pattern = section_for(self.sections, schema, table) if self.sections else None
        value = self.sections[pattern].value if pattern is not None else None
        return self.json_mode if value is None else value == "json"

    @property
    def expire(self) -> bool:
        """Some section has a ttl (the replicator then runs the sweep, service/sink/ttlsweep.py)."""
        return any(s.ttl is not None for s in self.sections.values())

    def matches(self, schema: str, table: str) -> bool:
        """A section or a document applies to the table."""
        return section_for(self.sections, schema, table) is not None or (schema, table) in self._doc_tables

    def tag(self, schema: str, table: str) -> str | None:
        """Redis Cluster: the hash tag the table's templates share (None: no template; its keys
        are in its own slot group). Checked when the settings were read (section_tag)."""
        pattern = section_for(self.sections, schema, table)
        return None if pattern is None else section_tag(self.sections[pattern])

    def placement(self, schema: str, table: str) -> str | None:
        """Redis Cluster: the slot group of the table (keys.placed_layout): a document's tables
        share the group of its key's hash tag; else its templates' tag, or its own group."""
        tag = self._doc_tags.get((schema, table))
        return DOCUMENT_GROUP + tag if tag is not None else self.tag(schema, table)

    def _group_base(self, schema: str, table: str) -> str:
        return placed_layout(self.prefix, schema, table, self.placement(schema, table)).table_base(
            schema, table
        )

    def fingerprint(self, schema: str, table: str) -> str:
        """The identity of the section that applies to the table ("" for none), recorded with
        the rows (`{prefix}:__shapes`): a start that finds another one copies the table again
        into the new shape. Of the settings, not of the table: a DDL re-copies by itself."""
        pattern = section_for(self.sections, schema, table)
        section = "" if pattern is None else section_fingerprint(self.sections[pattern])
        docs = self.documents.fingerprint(schema, table)
        if not docs:
            return section
        digest = hashlib.sha256(f"{section}\n{docs}".encode()).hexdigest()[:16]
        value = self.sections[pattern].value if pattern is not None else None
        return f"{SHAPE_FORMAT}:{digest}" + (f":{value}" if value else "")


def _templates(shape: Shape) -> list[tuple[str, tuple[Part, ...]]]:
    d = shape.derivation
    if d is None:
        return []
    out = [("key", d.key)] if d.key is not None else []
    return out + [(f"index[{n}]", ix.parts) for n, ix in enumerate(d.indexes)]
