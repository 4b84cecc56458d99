"""Shaping without servers: the template grammar, which section applies, the checks against a
table's definition, what a shape keeps, and the settings that are refused (service/shaping.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from service.errors import ConfigError
from service.settings import load_settings
from service.shaping import (
    IndexSettings,
    SectionSettings,
    ShapeError,
    Shapes,
    TemplatePart,
    TtlSettings,
    parse_template,
    section_for,
    value_of,
)
from service.sink.derive import Ttl
from service.table_info import ColumnStatus, TableInfo

USERS = TableInfo(
    "shop",
    "users",
    ("tenant_id", "id"),
    "primary",
    (
        ColumnStatus("tenant_id", "INT", nullable=False),
        ColumnStatus("id", "INT", nullable=False),
        ColumnStatus("email", "VARCHAR", nullable=False),
        ColumnStatus("password_hash", "VARCHAR", nullable=True),
        ColumnStatus("created_at", "DATETIME", nullable=True),
    ),
)


def test_template_parts_and_literal_braces() -> None:
    assert parse_template("app:{{{tenant_id}}}:user:{id}") == (
        TemplatePart("app:{", False),
        TemplatePart("tenant_id", True),
        TemplatePart("}:user:", False),
        TemplatePart("id", True),
    )
    assert parse_template("users", placeholders=False) == (TemplatePart("users", False),)


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("u:{a}{b}", "placeholders {a}{b} are adjacent"),
        ("u:{id", "is not closed"),
        ("u:id}", "closes nothing"),
        ("u:{}", "names no column"),
        ("{id}", "must start with literal text"),
        ("u:{{id}}", "has no {column} placeholder"),
    ],
)
def test_template_syntax_refused(template: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("{", r"\{").replace("}", r"\}")):
        parse_template(template)


def test_most_specific_section_wins() -> None:
    patterns = ["shop.*", "shop.users", "shop.u*", "*.*"]
    assert section_for(patterns, "shop", "users") == "shop.users"
    assert section_for(patterns, "shop", "urls") == "shop.u*"
    assert section_for(patterns, "shop", "orders") == "shop.*"
    assert section_for(patterns, "crm", "orders") == "*.*"
    assert section_for(["shop.*"], "crm", "orders") is None
    with pytest.raises(
        ShapeError, match=r'sections \[table."shop.u\*"\] and \[table."shop.\*s"\] both match'
    ):
        section_for(["shop.u*", "shop.*s"], "shop", "users")


def test_a_shape_keeps_and_renames_fields() -> None:
    shapes = Shapes(
        {"shop.*": SectionSettings(exclude=("password_hash",), rename=(("created_at", "created"),))}
    )
    shape = shapes.resolve(USERS)
    assert shape is not None and shapes.get("shop", "users") is shape
    full = {"tenant_id": 1, "id": 7, "email": "a@x", "password_hash": "h", "created_at": None}
    assert shape.apply(full) == {"tenant_id": 1, "id": 7, "email": "a@x", "created": None}
    assert shape.apply({"id": 7, "password_hash": "h"}) == {"id": 7}  # a partial image
    only = Shapes({"shop.users": SectionSettings(columns=("id", "tenant_id", "email"))}).resolve(USERS)
    assert only is not None and only.apply(full) == {"tenant_id": 1, "id": 7, "email": "a@x"}
    assert Shapes({"crm.*": SectionSettings()}).resolve(USERS) is None


def test_a_column_a_template_needs_is_kept_hidden() -> None:
    """Left out, but named by an index or a score of a section with a key template: stored as
    HIDDEN + its name in the mirror's row, never in what is published or copied."""
    section = SectionSettings(
        key="app:{tenant_id}:user:{id}",
        exclude=("email", "password_hash", "created_at"),
        indexes=(
            IndexSettings(kind="set", key="app:by-email:{email}"),
            IndexSettings(kind="zset", key="app:by-created", score="created_at"),
        ),
    )
    shape = Shapes({"shop.users": section}).resolve(USERS)
    assert shape is not None and shape.derivation is not None
    assert shape.hidden == {"email": "\0email", "created_at": "\0created_at"}
    assert shape.dropped == {"password_hash"} and shape.derivation.hidden
    full = {"tenant_id": 1, "id": 7, "email": "a@x", "password_hash": "h", "created_at": None}
    stored = shape.apply(full)
    assert stored == {"tenant_id": 1, "id": 7, "\0email": "a@x", "\0created_at": None}
    assert shape.visible(stored) == {"tenant_id": 1, "id": 7} and shape.visible(None) is None
    assert shape.derivation.indexes[1].score == "\0created_at"
    assert '"h":1' in shape.derivation.spec_text()
    with pytest.raises(ShapeError, match="leaves out column email of foreign key fk"):
        shape.refuse_foreign_key("fk", ("email",))
    # without a key template the mirror's row is what applications read: refused
    plain = SectionSettings(exclude=("email",), indexes=(IndexSettings(kind="set", key="by-email:{email}"),))
    with pytest.raises(ShapeError, match="left out by columns/exclude; without a key template"):
        Shapes({"shop.users": plain}).resolve(USERS)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (SectionSettings(rename=(("email", "\0email"),)), "starts with NUL"),
        (SectionSettings(key="app:{tenant_id}:user:{email}"), "lacks key column {id}"),
        (SectionSettings(key="app:{tenant_id}:u:{id}:{nope}"), "key: nope names no column of shop.users"),
        (SectionSettings(key="app:{tenant_id}:u:{id}:{created_at}"), "column created_at is nullable"),
        (SectionSettings(key="app:{tenant_id}-{id}"), "placeholders {tenant_id} and {id} are in one"),
        (SectionSettings(columns=("id", "email")), "columns: leaves out key column tenant_id"),
        (SectionSettings(columns=("id", "tenant_id", "nope")), "columns: nope names no column"),
        (SectionSettings(exclude=("tenant_id",)), "exclude: tenant_id is a key column"),
        (SectionSettings(rename=(("id", "ident"),)), "rename: id is a key column"),
        (SectionSettings(exclude=("email",), rename=(("email", "mail"),)), "rename: email is not kept"),
        (SectionSettings(rename=(("email", "id"),)), "rename: columns id and email would both be field id"),
    ],
)
def test_sections_that_cannot_apply_are_refused(section: SectionSettings, message: str) -> None:
    with pytest.raises(ShapeError) as caught:
        Shapes({"shop.users": section}).resolve(USERS)
    text = str(caught.value)
    assert text.startswith('table shop.users [table."shop.users"]: ') and message in text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("ttl = { seconds = 3, at = 'x' }", "ttl: give one of `at` (a column) or `seconds`"),
        ("ttl = { seconds = 0 }", "greater than 0"),
        ("ttl = { seconds = 3, timezone = 'UTC' }", "ttl: timezone is for `at` only"),
        ("ttl = { at = 'x', timezone = 'Europe/Paris' }", "expected UTC or a fixed offset like +02:00"),
        ('value = "xml"', "Input should be 'hash' or 'json'"),
        (
            '[[table."shop.users".index]]\nkind = "list"\nkey = "x:{id}"',
            "Input should be 'unique', 'set' or 'zset'",
        ),
        (
            'key = "u:{a}{b}"',
            "'table.shop.users.key' (key 'table' in config file {path}): 'u:{a}{b}': placeholders",
        ),
        ('columns = ["id"]\nexclude = ["x"]', "columns and exclude: give one of them"),
        ('colums = ["id"]', "'table.shop.users.colums' (key 'table' in config file {path}): unknown setting"),
        ('rename = { a = "" }', "rename: a gets an empty name"),
    ],
)
def test_settings_refused_with_one_line(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[table."shop.users"]\n{toml}\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert message.replace("{path}", str(path)) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_sections_read_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[table."shop.*"]\nexclude = ["password_hash"]\nrename = { created_at = "created" }\n')
    settings = load_settings(path)
    assert settings.table_sections() == {
        "shop.*": SectionSettings(exclude=("password_hash",), rename=(("created_at", "created"),))
    }
    assert load_settings(None).table_sections() == {}


def test_a_section_value_sets_the_tables_form(tmp_path: Path) -> None:
    """`value` per section: the table's rows are JSON documents or hashes whatever value_mode
    says; the fingerprint names it in the clear (a start that finds the other form empties the
    table before copying it again: `value_of`)."""
    path = tmp_path / "c.toml"
    path.write_text(
        'value_mode = "hash"\n[table."shop.docs"]\nvalue = "json"\n[table."shop.*"]\nexclude = ["x"]\n'
    )
    settings = load_settings(path)
    assert settings.table_sections()["shop.docs"] == SectionSettings(value="json")
    shapes = Shapes(settings.table_sections(), json_mode=False)
    assert shapes.json_of("shop", "docs") and not shapes.json_of("shop", "users")
    assert not shapes.json_of("crm", "other")  # no section: value_mode
    assert Shapes({"shop.*": SectionSettings(value="hash")}, json_mode=True).json_of("shop", "t") is False
    docs, users = shapes.fingerprint("shop", "docs"), shapes.fingerprint("shop", "users")
    assert docs.endswith(":json") and value_of(docs, False) == "json"
    assert (
        value_of(users, False) == "hash" and value_of(users, True) == "json" and value_of("", True) == "json"
    )
    assert Shapes({"shop.docs": SectionSettings()}).fingerprint("shop", "docs") != docs


def test_a_fingerprint_names_the_section_that_applies_not_its_list_order() -> None:
    shapes = Shapes(
        {
            "shop.users": SectionSettings(exclude=("password_hash", "email")),
            "shop.*": SectionSettings(columns=("id",)),
        }
    )
    users = shapes.fingerprint("shop", "users")
    assert users.startswith("1:") and len(users) == 18
    assert users == Shapes({"shop.users": SectionSettings(exclude=("email", "password_hash"))}).fingerprint(
        "shop", "users"
    )
    assert users != Shapes({"shop.users": SectionSettings(exclude=("email",))}).fingerprint("shop", "users")
    assert shapes.fingerprint("shop", "orders") not in ("", users)  # the glob's
    assert shapes.fingerprint("other", "users") == ""  # no section: unshaped


def test_sections_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """BINLOG_MIRROR_TABLE: the sections as one JSON object (a container's environment)."""
    monkeypatch.setenv(
        "BINLOG_MIRROR_TABLE", '{"shop.users": {"key": "u:{id}", "index": [{"kind": "set", "key": "s:{a}"}]}}'
    )
    section = load_settings().table_sections()["shop.users"]
    assert section.key == "u:{id}" and section.indexes[0].key == "s:{a}"
    monkeypatch.setenv("BINLOG_MIRROR_TABLE", "{shop")
    with pytest.raises(ConfigError, match="env BINLOG_MIRROR_TABLE.*not a JSON object of sections"):
        load_settings()


def test_json_rows_derive_only_from_columns_whose_json_text_is_their_key_text() -> None:
    scored = replace(USERS, columns=(*USERS.columns, ColumnStatus("rating", "DOUBLE", nullable=True)))
    zset = IndexSettings("zset", "app:by-rating", "rating")
    assert Shapes({"shop.users": SectionSettings(indexes=(zset,))}).resolve(scored) is not None
    with pytest.raises(ShapeError, match="column rating is DOUBLE; its JSON text is not its key text"):
        Shapes({"shop.users": SectionSettings(indexes=(zset,))}, json_mode=True).resolve(scored)
    ttl = SectionSettings(key="app:u:{tenant_id}:{id}", ttl=TtlSettings(at="created_at"))
    shape = Shapes({"shop.users": ttl}, json_mode=True).resolve(USERS)
    assert shape is not None and shape.derivation is not None and shape.derivation.json == ()
    assert shape.derivation.ttl == Ttl(at="created_at", temporal=True)
