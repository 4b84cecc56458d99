"""Documents (docs/mirror.md, "Documents"): a root table's row and its children, any depth, kept
as one key, from the `[document.NAME]` sections. Pure: settings and the tables' definitions in,
each table's part of its derive spec out (lua/document.lua reads it), or a `DocumentError`
naming the document, the table and the setting.

A document's tree is sent whole with each of its tables' specs: the script that changes a
child's row renders the child's place from the stored rows of every table below it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from service.document_settings import DocumentChildSettings, DocumentSettings
from service.errors import ConfigError
from service.sink.derive import HIDDEN, Part
from service.table_info import TableInfo
from service.templates import parse_template, template_tag

__all__ = ["DocumentError", "Documents", "json_kind"]


class DocumentError(ConfigError):
    """A `[document.…]` section that cannot apply to its tables (one line naming what is wrong)."""


CLUSTER_WAY = (
    "on a Redis Cluster give each document's key a literal hash tag before any placeholder "
    "(key = 'app:{{orders}}:order:{id}'), the same for every document and [table] template of its tables"
)

INTEGER = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "YEAR", "BIT"})
BINARY = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB", "UUID", "INET6"})
TEXT = frozenset(
    {
        "CHAR",
        "VARCHAR",
        "TINYTEXT",
        "TEXT",
        "MEDIUMTEXT",
        "LONGTEXT",
        "ENUM",
        "DECIMAL",
        "DATE",
        "DATETIME",
        "TIME",
    }
)


def json_kind(ctype: str) -> str | None:
    """How lua/document.lua turns a hash-stored value of a column type into its canonical JSON
    text (docs/row-format.md): "n" the text is the number, "f" a float's repr made orjson's,
    "t" a TIMESTAMP's wall time made "…T…Z", "b" base64, "s" a string; None: no exact way (a
    JSON document, a SET, a geometry or a vector: its hash text is not its document text)."""
    if ctype in INTEGER:
        return "n"
    if ctype in ("FLOAT", "DOUBLE"):
        return "f"
    if ctype == "TIMESTAMP":
        return "t"
    if ctype in BINARY:
        return "b"
    return "s" if ctype in TEXT else None


@dataclass
class _Node:
    doc: str
    table: tuple[str, str]
    settings: DocumentSettings | DocumentChildSettings
    parent: int | None  # index in the document's nodes
    kids: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.table[0]}.{self.table[1]}"


@dataclass(frozen=True, slots=True)
class Stored:
    """A table as the mirror stores it: its definition, each column's field in the mirror's row
    (a column absent is not stored) and whether its rows are JSON documents."""

    info: TableInfo
    fields: Mapping[str, str]
    json: bool = False


class Documents:
    """The documents of the config, resolved against the tables' definitions as they are read."""

    def __init__(self, documents: Mapping[str, DocumentSettings], base_of: Callable[[str, str], str]) -> None:
        self.settings = dict(documents)
        self.base_of = base_of  # (schema, table) -> the base of its rows' keys
        self.trees: dict[str, list[_Node]] = {}
        for name, doc in self.settings.items():
            nodes: list[_Node] = []
            _flatten(name, doc, None, nodes)
            self.trees[name] = nodes
        self._stored: dict[tuple[str, str], Stored] = {}

    def __bool__(self) -> bool:
        return bool(self.settings)

    def tables(self) -> set[tuple[str, str]]:
        return {n.table for nodes in self.trees.values() for n in nodes}

    def tags(self, section_tag: Callable[[str, str], str | None], prefix: str) -> dict[tuple[str, str], str]:
        """Redis Cluster: each table's slot, the hash tag of its documents' keys. A document's
        rows, bookkeeping and key are written by one script call, so DocumentError for a key
        without a tag, a table in documents of two tags, or a table whose own `[table]` templates
        (`section_tag`) carry another tag."""
        out: dict[tuple[str, str], str] = {}
        for name, nodes in self.trees.items():
            key = self.settings[name].key
            try:
                tag = template_tag(key)
            except ValueError as exc:
                raise DocumentError(f"[document.{name}] key: {key!r} {exc}; {CLUSTER_WAY}") from None
            if tag == prefix:
                raise DocumentError(
                    f"[document.{name}] key: hash tag {{{tag}}} is the slot of the mirror's global keys "
                    f"({{{prefix}}}:...); give it another tag"
                )
            for n in nodes:
                theirs = [
                    ("another [document] key", out.get(n.table)),
                    ("its [table] key/index", section_tag(*n.table)),
                ]
                for what, other in theirs:
                    if other is not None and other != tag:
                        raise DocumentError(
                            f"[document.{name}] table {n.name}: {what} has hash tag {{{other}}}, this "
                            f"document's key {{{tag}}}: a document's tables share its slot; {CLUSTER_WAY}"
                        )
                out[n.table] = tag
        return out

    def note(self, stored: Stored) -> None:
        """A table's definition as read. A table dropped keeps the one it had: it has no rows, so
        its place in the documents stays empty until it is created again."""
        key = (stored.info.schema, stored.info.table)
        if stored.info.exists or key not in self._stored:
            self._stored[key] = stored

    def standalone(self, schema: str, table: str) -> bool:
        """False when a document says `standalone = false` for the table."""
        return all(
            n.settings.standalone
            for nodes in self.trees.values()
            for n in nodes
            if n.table == (schema, table)
        )

    def spec(self, schema: str, table: str) -> list[Any] | None:
        """The table's part of its derive spec ("d"): [[document tree, node index], ...]; None
        when it is in no document. DocumentError when a section cannot apply."""
        return [[self._tree(name), i] for name, i, _ in self.roles(schema, table)] or None

    def roles(self, schema: str, table: str) -> list[tuple[str, int, str | None]]:
        """(document, node index, field: None for the root) of each place the table has."""
        out = []
        for name, nodes in self.trees.items():
            for i, n in enumerate(nodes):
                if n.table == (schema, table):
                    s = n.settings
                    out.append((name, i, s.field if isinstance(s, DocumentChildSettings) else None))
        return out

    def fingerprint(self, schema: str, table: str) -> str:
        """The settings of the documents the table is in ("" for none): a change copies it again."""
        docs = [name for name, nodes in self.trees.items() if any(n.table == (schema, table) for n in nodes)]
        if not docs:
            return ""
        return json.dumps([[d, self.settings[d].model_dump(mode="json")] for d in docs], sort_keys=True)

    def node_tables(self, name: str) -> list[tuple[str, str]]:
        """The table of each node of a document, in its spec's order (the root first)."""
        return [n.table for n in self.trees[name]]

    def tree(self, name: str) -> dict[str, Any]:
        """A document's spec (lua/document.lua's tree; verify renders it again in Python)."""
        return self._tree(name)

    def _tree(self, name: str) -> dict[str, Any]:
        doc = self.settings[name]
        nodes = self.trees[name]
        return {
            "name": name,
            "fmt": "h" if doc.format == "hash" else "j",
            "max": doc.max_document_bytes,
            "nodes": [self._node(name, doc, nodes, i) for i in range(len(nodes))],
        }

    def _stored_of(self, where: str, table: tuple[str, str]) -> Stored:
        got = self._stored.get(table)
        if got is None or not got.info.exists:
            raise DocumentError(
                f"{where}: table {table[0]}.{table[1]} does not exist or is not mirrored (tables)"
            )
        if not got.info.key:
            raise DocumentError(
                f"{where}: table {table[0]}.{table[1]} has no primary key and no unique NOT NULL key"
            )
        return got

    def _node(self, name: str, doc: DocumentSettings, nodes: list[_Node], i: int) -> dict[str, Any]:
        n = nodes[i]
        where = f"[document.{name}] {'root' if n.parent is None else 'child ' + n.name}"
        st = self._stored_of(where, n.table)
        columns = {c.name: c for c in st.info.columns}

        def stored_field(setting: str, col: str) -> str:
            if col not in columns:
                raise DocumentError(f"{where}: {setting}: {col} names no column of {n.name}")
            if col not in st.fields:
                raise DocumentError(
                    f"{where}: {setting}: column {col} is left out by the table's [table] section; "
                    "documents are built from the mirror's row of the table: keep it there"
                )
            return st.fields[col]

        out: dict[str, Any] = {"base": self.base_of(*n.table)}
        if st.json:  # derive.lua's json_row: the fields its keys read, as their hash text
            out["j"] = 1
            conv = {f: "b" if columns[c].type in BINARY else "t" for c, f in st.fields.items()
                    if columns[c].type in BINARY or columns[c].type == "TIMESTAMP"}  # fmt: skip
            if conv:
                out["conv"] = conv
        s = n.settings
        kept = _kept(where, s, st.info)
        cols = []
        for col in kept:
            kind = json_kind(columns[col].type) if not st.json else "s"
            if kind is None:
                raise DocumentError(
                    f"{where}: column {col} is {columns[col].type}: its document text cannot be made exactly "
                    'from the hash form; exclude it, or store the table as json ([table] value = "json")'
                )
            cols.append([stored_field("columns", col), dict(s.rename).get(col, col), kind])
        out["c"] = cols
        key = st.info.key or ()
        out["pk"] = [[stored_field("key", col), 1 if columns[col].type in INTEGER else 0] for col in key]
        names = {c[1] for c in cols}
        for k in n.kids:
            kid = nodes[k].settings
            assert isinstance(kid, DocumentChildSettings)
            if kid.field in names:
                raise DocumentError(
                    f"{where}: child {kid.table}: field {kid.field} is also a field of {n.name}"
                )
            names.add(kid.field)
        out["kids"] = n.kids
        if n.parent is None:
            assert isinstance(s, DocumentSettings)
            if s.format == "hash" and st.json:
                raise DocumentError(
                    f"{where}: format = \"hash\" stores the root's fields as hash text; its table's rows "
                    'are json: use format = "json"'
                )
            out["k"] = self._key(where, s.key, st, columns)
        else:
            assert isinstance(s, DocumentChildSettings)
            parent = nodes[n.parent]
            pst = self._stored_of(where, parent.table)
            pkey = tuple(pst.info.key or ())
            pcols = {c.name: c for c in pst.info.columns}
            named = sorted(s.on.values())
            # the parent's key the child names: its primary key, or a unique key (then the rows
            # of the parent are found by it: "pl", the text a parent row is named by)
            link = next((u for u in (pkey, *pst.info.uniques) if sorted(u) == named), None)
            if link is None:
                raise DocumentError(
                    f"{where}: on: {', '.join(s.on.values())} is neither the primary key of {parent.name} "
                    f"({', '.join(pkey)}) nor one of its unique keys; a child names its parent by one of them"
                )
            by_parent = {p: c for c, p in s.on.items()}
            ups: list[str] = []
            pl: list[str] = []
            for pcol in link:
                col = by_parent[pcol]
                f = stored_field("on", col)
                ctype = columns[col].type
                if _class(ctype) != _class(pcols[pcol].type):
                    raise DocumentError(
                        f"{where}: on: {col} is {ctype} and {parent.name}.{pcol} is "
                        f"{pcols[pcol].type}: their values are not written alike"
                    )
                if pcol not in pst.fields:
                    raise DocumentError(
                        f"{where}: on: column {pcol} is left out by {parent.name}'s [table] section; "
                        "documents are built from the mirror's row of the table: keep it there"
                    )
                sep = ["=:"] if ups else []  # (a key's parts joined as in a row's key suffix)
                ups += [*sep, ("#" if ctype in BINARY else "@") + f]
                pl += [*sep, ("#" if pcols[pcol].type in BINARY else "@") + pst.fields[pcol]]
            out["up"] = [n.parent, ups]
            if link != pkey:
                out["pl"] = pl
            out["f"] = s.field
            if s.shape == "array":
                out["a"] = 1
        return out

    def _key(self, where: str, template: str, st: Stored, columns: Mapping[str, Any]) -> list[str]:
        parts = []
        used = []
        for p in parse_template(template, True):
            if not p.column:
                parts.append("=" + p.text)
                continue
            if p.text not in columns:
                raise DocumentError(
                    f"{where}: key: {p.text} names no column of {st.info.schema}.{st.info.table}"
                )
            if columns[p.text].nullable:
                raise DocumentError(
                    f"{where}: key: column {p.text} is nullable; a document key cannot hold NULL"
                )
            if p.text not in st.fields:
                raise DocumentError(
                    f"{where}: key: column {p.text} is left out by the table's [table] section"
                )
            used.append(p.text)
            parts.append(("#" if columns[p.text].type in BINARY else "@") + st.fields[p.text])
        for col in st.info.key or ():
            if col not in used:
                raise DocumentError(f"{where}: key: {template!r} lacks key column {{{col}}}")
        return parts

    def key_parts(self) -> list[tuple[str, tuple[Part, ...]]]:
        """(setting, parts) of every document key template, for the collision checks of shaping."""
        out = []
        for name, doc in self.settings.items():
            out.append((f"[document.{name}] key", _parts(doc.key)))
        return out


def _parts(template: str) -> tuple[Part, ...]:
    return tuple(Part(p.text, p.column) for p in parse_template(template, True))


def _class(ctype: str) -> str:
    return "int" if ctype in INTEGER else "binary" if ctype in BINARY else ctype


def _kept(where: str, s: DocumentSettings | DocumentChildSettings, info: TableInfo) -> list[str]:
    names = [c.name for c in info.columns]
    for setting, cols in (("columns", s.columns or ()), ("exclude", s.exclude), ("rename", s.rename)):
        for col in cols:
            if col not in names:
                raise DocumentError(
                    f"{where}: {setting}: {col} names no column of {info.schema}.{info.table}"
                )
    if s.columns is not None:
        kept = [c for c in names if c in set(s.columns)]
    else:
        kept = [c for c in names if c not in set(s.exclude)]
    seen: dict[str, str] = {}
    for col in kept:
        to = s.rename.get(col, col)
        if to in seen:
            raise DocumentError(f"{where}: rename: columns {seen[to]} and {col} would both be field {to}")
        if to.startswith(HIDDEN):
            raise DocumentError(f"{where}: rename: field {to!r} starts with NUL")
        seen[to] = col
    return kept


def _flatten(
    name: str, s: DocumentSettings | DocumentChildSettings, parent: int | None, nodes: list[_Node]
) -> None:
    table_name = s.root if isinstance(s, DocumentSettings) else s.table
    schema, _, table = table_name.partition(".")
    i = len(nodes)
    nodes.append(_Node(name, (schema, table), s, parent))
    if parent is not None:
        nodes[parent].kids.append(i)
    for kid in s.child:
        _flatten(name, kid, i, nodes)
