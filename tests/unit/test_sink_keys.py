"""The key scheme (service/sink/keys.py): escaping, composite keys, row keys apart from meta keys."""

from __future__ import annotations

import itertools

import pytest

from service.sink.keys import KeyLayout, escape, split_key, unescape

PARTS = ["", ":", "\\", "a:b", "a\\:b", "__keys", "\\__keys", "_", "__", "a", "ab", "\\\\", "::", "x:"]


@pytest.mark.parametrize("part", PARTS)
def test_escape_round_trips(part: str) -> None:
    assert unescape(escape(part)) == part


def test_composite_keys_never_collide() -> None:
    lay = KeyLayout("m")
    seen: dict[str, tuple[str, ...]] = {}
    for n in (1, 2, 3):
        for combo in itertools.product(PARTS, repeat=n):
            key = lay.row_key("db", "t", combo)
            assert seen.setdefault(key, combo) == combo, (key, combo, seen[key])
            assert split_key(key) == ["m", "db", "t", *combo]


def test_row_key_never_equals_meta_keys() -> None:
    lay = KeyLayout("m")
    metas = {lay.index_key("db", "t"), lay.touched_key("db", "t"), lay.stale_key("db", "t")}
    for pk in ("__keys", "__touched", "__stale", "\\__keys"):
        assert lay.row_key("db", "t", [pk]) not in metas
    # a schema or table called like a meta key cannot produce a global key either
    assert lay.row_key("__checkpoint", "x", ["y"]) != lay.checkpoint_key
    assert not lay.row_key("__checkpoint", "x", ["y"]).startswith(lay.checkpoint_key)
