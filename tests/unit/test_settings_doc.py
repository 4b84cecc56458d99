"""One settings reference: docs/configuration.md is generated from the settings model, and the
example TOML names every setting. Both fail with the one command that fixes them."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from service.devtools.settings_doc import COMMAND, OUTPUT, render, setting_comments
from service.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "binlog-mirror.example.toml"


def test_the_reference_is_up_to_date() -> None:
    assert OUTPUT.read_text() == render(), (
        f"docs/configuration.md is out of date with service/settings.py: regenerate it with `{COMMAND}` "
        "(run from the repository root, with the venv's python)"
    )


def test_every_setting_has_a_meaning() -> None:
    empty = [line.split("|")[1].strip() for line in render().splitlines() if line.endswith("|  |")]
    assert not empty, (
        f"settings without a meaning in docs/configuration.md: {empty}; write a comment beside the "
        f"setting in service/settings.py (or an entry in MEANINGS, service/devtools/settings_doc.py), "
        f"then run `{COMMAND}`"
    )


def test_the_example_toml_names_every_setting() -> None:
    text = EXAMPLE.read_text()
    named = set(re.findall(r"^#? ?(\w+) = ", text, re.M))
    missing = sorted(set(Settings.model_fields) - named)
    assert not missing, (
        f"settings missing from deploy/binlog-mirror.example.toml: {missing}; add each as a line "
        "(commented out, with its default) in the section it belongs to"
    )
    unknown = sorted(named - set(Settings.model_fields))
    assert not unknown, f"deploy/binlog-mirror.example.toml names keys that are not settings: {unknown}"


def test_the_example_toml_loads_and_so_does_every_commented_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example as shipped, and each commented-out line uncommented (with its files present)."""
    for name in list(os.environ):
        if name.startswith("BINLOG_MIRROR_"):
            monkeypatch.delenv(name)
    assert load_settings(EXAMPLE).redis is not None
    for line in EXAMPLE.read_text().splitlines():
        match = re.match(r"^# ?(\w+) = (.*)$", line)
        if not match:
            continue
        key, value = match.groups()
        parsed = tomllib.loads(f"{key} = {value}")[key]
        if key.endswith(("_file", "_ca", "_cert", "_key")):
            path = tmp_path / Path(parsed).name
            path.write_text("x")
            parsed = str(path)
        base = tomllib.loads(EXAMPLE.read_text())
        if key.startswith("redis_tls_"):
            base["redis"] = "rediss://cache.internal:6379/0"
        if key == "redis_tls_key_file":
            base["redis_tls_cert_file"] = str(tmp_path / "cert")
            (tmp_path / "cert").write_text("x")
        config = tmp_path / "c.toml"
        config.write_text("\n".join(f"{k} = {_toml(v)}" for k, v in {**base, key: parsed}.items()))
        load_settings(config)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def test_comments_are_read_from_the_model() -> None:
    """The fallback for a setting without a MEANINGS entry (one added on another branch)."""
    comments = setting_comments()
    assert comments["queue_size"].startswith("transactions read ahead")
    assert "History check" in comments["on_history_mismatch"]
