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
from service.sink.keys import KeyLayout, group_layout


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
