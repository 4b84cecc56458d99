"""verify / --repair of documents (docs/mirror.md, "Documents"): each document built again from
the source's rows with the Python twin of lua/document.lua's rendering, compared with Redis' key
byte for byte; the keys the root rows' records name that no source row makes are extra. A
difference is read again once the mirror has passed the source's position; --repair writes what
still differs (the rows themselves were compared and repaired before, table by table)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson
from redis.asyncio import Redis

from service.binlog.canonical import value_to_json
from service.shaping import Shapes
from service.sink.keys import DOCREC_SUFFIX, escape
from service.sink.values import field_value, key_text
from service.table_info import TableInfo
from service.verify.reading import SourceReader, utc_columns
from service.verify.report import Difference, TableReport

__all__ = ["DocumentCheck", "render_documents"]

Expected = dict[str, bytes | dict[bytes, bytes]]


def _render(parts: list[str], row: Mapping[str, Any]) -> str | None:
    out = []
    for p in parts:
        if p[0] == "=":
            out.append(p[1:])
            continue
        v = row.get(p[1:])
        if v is None:
            return None
        out.append(escape(key_text(v)))
    return "".join(out)


def _order(node: dict[str, Any], row: Mapping[str, Any]) -> tuple[Any, ...]:
    """lua/document.lua's pk_less: integer key parts by value, others by their text's bytes."""
    out: list[Any] = []
    for field, integer in node["pk"]:
        v = row.get(field)
        out.append(v if integer else (v if isinstance(v, bytes) else str(v).encode()))
    return tuple(out)


def render_documents(tree: dict[str, Any], rows: list[dict[str, dict[str, Any]]]) -> Expected:
    """Every document of `tree` (Documents' spec of it) from the rows of each node (suffix -> the
    row as the mirror stores it): key -> the JSON text (format json) or the hash (format hash).
    Documents over max_document_bytes are left out (the apply refuses them)."""
    nodes = tree["nodes"]
    kids: list[dict[str, list[tuple[tuple[Any, ...], str, dict[str, Any]]]]] = [{} for _ in nodes]
    for i, node in enumerate(nodes):
        if "up" in node:
            for suffix, row in rows[i].items():
                parent = _render(node["up"][1], row)
                if parent is not None:
                    kids[i].setdefault(parent, []).append((_order(node, row), suffix, row))
    for by_parent in kids:
        for items in by_parent.values():
            items.sort(key=lambda item: item[0])

    def children(k: int, suffix: str, row: Mapping[str, Any]) -> list[tuple[Any, str, dict[str, Any]]]:
        """Node k's rows under the row `suffix`: named by its key, or by the unique key "pl" renders."""
        link = _render(nodes[k]["pl"], row) if "pl" in nodes[k] else suffix
        return kids[k].get(link, []) if link is not None else []

    def doc(i: int, suffix: str, row: Mapping[str, Any]) -> dict[str, Any]:
        out = {
            name: value_to_json(row[field]) if row.get(field) is not None else None
            for field, name, _ in nodes[i]["c"]
        }
        for k in nodes[i]["kids"]:
            items = children(k, suffix, row)
            if "a" in nodes[k]:
                out[nodes[k]["f"]] = [doc(k, s, r) for _, s, r in items]
            else:
                out[nodes[k]["f"]] = {s: doc(k, s, r) for _, s, r in items}
        return out

    expected: Expected = {}
    root = nodes[0]
    for suffix, row in rows[0].items():
        key = _render(root["k"], row)
        if key is None:
            continue
        if tree["fmt"] == "j":
            text = orjson.dumps(doc(0, suffix, row))
            if len(text) <= tree["max"]:
                expected[key] = text
            continue
        fields: dict[bytes, bytes] = {}
        for field, name, _ in root["c"]:
            if (v := row.get(field)) is not None:
                fv = field_value(v)
                fields[name.encode()] = fv if isinstance(fv, bytes) else fv.encode()
        for k in root["kids"]:
            for _, s, r in children(k, suffix, row):
                fields[f"{nodes[k]['f']}:{s}".encode()] = orjson.dumps(doc(k, s, r))
        expected[key] = fields
    return expected


class DocumentCheck:
    """One document's comparison (and repair) in a verify run."""

    def __init__(
        self, shapes: Shapes, source: SourceReader, redis: Redis, info_of: Callable[[str, str], TableInfo]
    ) -> None:
        self.shapes, self.source, self.redis, self.info_of = shapes, source, redis, info_of

    async def expected(self, name: str) -> tuple[dict[str, Any], Expected]:
        tree = self.shapes.documents.tree(name)
        rows: list[dict[str, dict[str, Any]]] = []
        for schema, table in self.shapes.documents.node_tables(name):
            t = self.info_of(schema, table)
            utc = utc_columns(t)
            by_suffix: dict[str, dict[str, Any]] = {}
            for row in await self.source.select(
                f"SELECT * FROM `{schema}`.`{table}`", f"reading {schema}.{table}"
            ):
                stored = self.source.stored_form(t, row, utc)
                by_suffix[":".join(escape(key_text(row[c])) for c in t.key or ())] = stored
            rows.append(by_suffix)
        return tree, render_documents(tree, rows)

    async def held_keys(self, tree: dict[str, Any]) -> set[str]:
        """The document keys the mirror's root records name."""
        out: set[str] = set()
        async for field, raw in self.redis.hscan_iter(
            f"{tree['nodes'][0]['base']}:{DOCREC_SUFFIX}", count=1000
        ):
            if field != b"__nodes":
                out.update(v[1] for v in orjson.loads(raw).values() if v[0] == "k")
        return out

    async def differences(self, name: str) -> tuple[list[tuple[str, str]], dict[str, Any], Expected]:
        """(kind, key) of each document that differs: missing, differs, extra."""
        tree, expected = await self.expected(name)
        keys = sorted(set(expected) | await self.held_keys(tree))
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.get(key) if tree["fmt"] == "j" else pipe.hgetall(key)
            got = await pipe.execute()
        out = []
        for key, value in zip(keys, got, strict=True):
            want = expected.get(key)
            if want is None:
                if value:
                    out.append(("extra", key))
            elif not value:
                out.append(("missing", key))
            elif value != want:
                out.append(("differs", key))
        return out, tree, expected

    async def repair(self, tree: dict[str, Any], expected: Expected, found: list[tuple[str, str]]) -> int:
        async with self.redis.pipeline(transaction=True) as pipe:
            for _, key in found:
                pipe.delete(key)
                want = expected.get(key)
                if isinstance(want, bytes):
                    pipe.set(key, want)
                elif want:
                    pipe.hset(key, mapping=want)  # type: ignore[arg-type]
            await pipe.execute()
        return len(found)

    def report(self, name: str, expected: Expected, found: list[tuple[str, str]]) -> TableReport:
        schema, table = self.shapes.documents.node_tables(name)[0]
        report = TableReport(schema, f"{table} [document.{name}]", len(expected))
        report.differences = [Difference(schema, table, f"document {kind}", key) for kind, key in found]
        return report
