"""Shaped tables on a Redis Cluster without a server: the hash tag a section's templates must
share, the refusals (one line: the section, the setting, how to arrange the tags), and the slot
group of a tagged table (docs/mirror.md, "Redis Cluster")."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.crc import key_slot

from service.errors import ConfigError
from service.settings import load_settings
from service.shaping import IndexSettings, SectionSettings, Shapes, section_tag, template_tag
from service.sink.derive import Derivation, Part
from service.sink.keys import KeyLayout, group_layout, placed_layout


@pytest.mark.parametrize(
    "template,tag",
    [
        ("app:{{users}}:user:{id}", "users"),
        ("{{u}}:{id}", "u"),
        ("app:{{a:b}}:by-created", "a:b"),  # a zset key without placeholders
        ("app:{{users}}:{{x}}:{id}", "users"),  # Redis hashes the first pair only
        ("a}}b:{{t}}:{id}", "t"),  # a '}' before the first '{' closes nothing
    ],
)
def test_the_tag_is_the_first_literal_brace_pair(template: str, tag: str) -> None:
    assert template_tag(template) == tag


@pytest.mark.parametrize(
    "template,reason",
    [
        ("app:{{{tenant_id}}}:user:{id}", "has placeholder {tenant_id} inside its hash tag"),
        ("app:{{t-{tenant_id}}}:user:{id}", "has placeholder {tenant_id} inside its hash tag"),
        ("app:user:{id}", "has no hash tag"),
        ("app:{id}:{{users}}", "has its hash tag after placeholder {id}"),
        ("app:{{}}:user:{id}", "has an empty hash tag {}"),
        ("app:{{users:by-created", "has no hash tag (its '{' is not closed)"),
    ],
)
def test_templates_whose_keys_could_leave_one_slot_are_refused(template: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        template_tag(template)
    assert str(caught.value).startswith(reason)


def _section(key: str | None, *indexes: str) -> SectionSettings:
    return SectionSettings(key=key, indexes=tuple(IndexSettings("set", i) for i in indexes))


def test_a_section_has_one_tag_or_none() -> None:
    assert section_tag(SectionSettings(exclude=("password_hash",))) is None  # no template: its own group
    both = _section("app:{{users}}:user:{id}", "app:{{users}}:by-status:{status}")
    assert section_tag(both) == "users"
    assert section_tag(_section(None, "app:{{users}}:by-status:{status}")) == "users"
    with pytest.raises(ValueError, match=r"^index\[0\]: .* has hash tag \{people\}, key has \{users\}"):
        section_tag(_section("app:{{users}}:user:{id}", "app:{{people}}:by-status:{status}"))
    with pytest.raises(ValueError, match=r"^index\[1\]: 'app:by-email:\{email\}' has no hash tag"):
        section_tag(_section("app:{{u}}:user:{id}", "app:{{u}}:s:{status}", "app:by-email:{email}"))


@pytest.mark.parametrize(
    "section,message",
    [
        (
            'key = "app:{{{tenant_id}}}:user:{id}"',
            "key: 'app:{{{tenant_id}}}:user:{id}' has placeholder {tenant_id} inside its hash tag",
        ),
        (
            'key = "app:{{users}}:user:{id}"\n[[table."shop.users".index]]\nkind = "unique"\n'
            'key = "app:user-by-email:{email}"',
            "index[0]: 'app:user-by-email:{email}' has no hash tag",
        ),
        (
            'key = "app:{{users}}:user:{id}"\n[[table."shop.users".index]]\nkind = "set"\n'
            'key = "app:{{people}}:by-status:{status}"',
            "index[0]: 'app:{{people}}:by-status:{status}' has hash tag {people}, key has {users}",
        ),
        (
            'key = "app:{id}:{{users}}"',
            "key: 'app:{id}:{{users}}' has its hash tag after placeholder {id}",
        ),
        (
            'key = "app:{{mirror}}:user:{id}"',
            "key/index: hash tag {mirror} is the slot of the mirror's global keys",
        ),
    ],
)
def test_refused_on_a_cluster_with_one_line(tmp_path: Path, section: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'redis = "redis+cluster://127.0.0.1:7000"\n[table."shop.users"]\n{section}\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    text = str(caught.value)
    assert '[table."shop.users"]: ' + message in text
    assert "\n" not in text
    if "global keys" not in message:  # how to arrange the tags
        assert "give the row key and every index one literal hash tag before any placeholder" in text
    # on one Redis the same template is just text
    path.write_text(f'redis = "redis://127.0.0.1:6379/0"\n[table."shop.users"]\n{section}\n')
    assert load_settings(path).table


def test_a_cluster_accepts_a_shared_literal_tag_and_sections_without_templates(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'redis = "redis+cluster://127.0.0.1:7000"\n[table."shop.users"]\nkey = "app:{{users}}:user:{id}"\n'
        '[[table."shop.users".index]]\nkind = "unique"\nkey = "app:{{users}}:user-by-email:{email}"\n'
        '[table."shop.notes"]\nexclude = ["body"]\n'
    )
    sections = load_settings(path).table_sections()
    shapes = Shapes(sections)
    assert shapes.tag("shop", "users") == "users"
    assert shapes.tag("shop", "notes") is None and shapes.tag("shop", "other") is None


def test_a_tagged_group_shares_its_templates_slot() -> None:
    g = group_layout("mirror", "shop", "users", "users")
    assert g.prefix == "mirror:{users}:__table:shop:users"
    s, t = "shop", "users"
    keys = [g.row_key(s, t, [7]), g.row_key(s, t, ["a:}{b"]), g.index_key(s, t), g.derived_key(s, t)]
    keys += [g.touched_key(s, t), g.stale_key(s, t), g.partial_key(s, t), g.shapes_key]
    keys += [g.checkpoint_key, g.progress_key, g.table_ops_key, g.resync_key, g.settle_key, g.lease_key]
    d = Derivation((Part("app:{users}:user:"), Part("id", True)), ())
    member, entries = d.entries({"id": "{x}7"}, g.row_key(s, t, ["{x}7"]))
    assert member is not None
    keys += [member, *(e.key for e in entries)]
    assert len({key_slot(k.encode()) for k in keys}) == 1, keys
    # two tables of one tag: one slot, keys apart; apart from an untagged table whose id is the tag
    other = group_layout("mirror", "shop", "admins", "users")
    plain = group_layout("mirror", "shop", "users")
    assert key_slot(other.checkpoint_key.encode()) == key_slot(g.checkpoint_key.encode())
    assert len({g.checkpoint_key, other.checkpoint_key, plain.checkpoint_key}) == 3
    untagged_like = group_layout("mirror", "shop", "t")  # its rows: mirror:{shop:t}:{pk...}
    tagged_as_it = group_layout("mirror", "shop", "u", "shop:t")
    assert untagged_like.row_key("shop", "t", ["__table", "shop", "u", "7"]) != tagged_as_it.row_key(
        "shop", "u", [7]
    )


def test_the_single_node_and_untagged_layouts_are_unchanged() -> None:
    one = KeyLayout("mirror")
    assert one.row_key("shop", "users", [7]) == "mirror:shop:users:7"
    assert one.derived_key("shop", "users") == "mirror:shop:users:__derived"
    assert group_layout("mirror", "shop", "users").row_key("shop", "users", [7]) == "mirror:{shop:users}:7"


DOC = (
    '[document.orders]\nroot = "shop.orders"\nkey = "{key}"\n'
    '[[document.orders.child]]\ntable = "shop.lines"\non = {{ order_id = "id" }}\nfield = "lines"\n'
)


@pytest.mark.parametrize(
    "key,extra,message",
    [
        ("app:order:{id}", "", "[document.orders] key: 'app:order:{id}' has no hash tag"),
        (
            "app:{{{id}}}",
            "",
            "[document.orders] key: 'app:{{{id}}}' has placeholder {id} inside its hash tag",
        ),
        ("app:{{mirror}}:o:{id}", "", "hash tag {mirror} is the slot of the mirror's global keys"),
        (  # a child's own [table] templates in another slot than its document's
            "app:{{orders}}:o:{id}",
            '[table."shop.lines"]\nkey = "app:{{lines}}:line:{id}"\n',
            "[document.orders] table shop.lines: its [table] key/index has hash tag {lines}, this "
            "document's key {orders}",
        ),
        (  # one table in two documents of two tags
            "app:{{orders}}:o:{id}",
            '[document.other]\nroot = "shop.lines"\nkey = "app:{{other}}:l:{id}"\n',
            "[document.orders] table shop.lines: another [document] key has hash tag {other}, this "
            "document's key {orders}",
        ),
    ],
)
def test_documents_refused_on_a_cluster_with_one_line(
    tmp_path: Path, key: str, extra: str, message: str
) -> None:
    path = tmp_path / "c.toml"
    doc = DOC.format(key=key)
    path.write_text(f'redis = "redis+cluster://127.0.0.1:7000"\n{extra}{doc}')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    text = str(caught.value)
    assert message in text and "\n" not in text
    # on one Redis no tag is needed
    path.write_text(f'redis = "redis://127.0.0.1:6379/0"\n{extra}{doc}')
    assert load_settings(path).document


def test_a_documents_tables_share_its_keys_slot(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'redis = "redis+cluster://127.0.0.1:7000"\n[table."shop.lines"]\nkey = "app:{{orders}}:line:{id}"\n'
        + DOC.format(key="app:{{orders}}:o:{id}")
    )
    shapes = load_settings(path).shapes()
    assert shapes.placement("shop", "orders") == shapes.placement("shop", "lines") == "}orders"
    assert shapes.placement("shop", "other") is None
    bases = [shapes.documents.base_of("shop", t) for t in ("orders", "lines")]
    assert bases == ["mirror:{orders}:__docs:shop:orders", "mirror:{orders}:__docs:shop:lines"]
    g = placed_layout("mirror", "shop", "lines", "}orders")
    keys = [g.checkpoint_key, g.row_key("shop", "lines", [7]), g.derived_key("shop", "orders"), *bases]
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"orders")}
    # apart from the tagged group of a table whose templates carry the same tag
    assert g.checkpoint_key != group_layout("mirror", "shop", "lines", "orders").checkpoint_key
