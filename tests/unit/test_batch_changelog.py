"""The change log's schema evolution (service.batch.replay.union_columns): pure, no Spark."""

from __future__ import annotations

import orjson
import pytest

from service.batch.replay import union_columns


def _version(*cols: tuple[str, str], key: tuple[str, ...] = ("id",)) -> str:
    return orjson.dumps(
        {
            "columns": [{"name": n, "kind": k, "type": "X", "unsigned": False} for n, k in cols],
            "key": list(key),
        }
    ).decode()


def test_union_across_an_alter() -> None:
    v1 = _version(
        ("id", "bigint"),
        ("name", "string"),
        ("qty", "bigint"),
        ("price", "decimal(10,2)"),
        ("gone", "bigint"),
    )
    v2 = _version(
        ("id", "bigint"),
        ("title", "string"),
        ("qty", "decimal(20,0)"),
        ("price", "decimal(12,4)"),
        ("extra", "date"),
    )
    cols = union_columns("s", "t", [(5, v1), (9, v1), (40, v2), (77, v2)])
    assert [(n, k) for n, k, _ in cols.columns] == [
        ("id", "bigint"),
        ("name", "string"),  # renamed: the old name stays, null after the ALTER
        ("qty", "decimal(20,0)"),  # widened
        ("price", "decimal(12,4)"),  # 8 integer digits, scale 4: holds both
        ("gone", "bigint"),  # dropped
        ("title", "string"),
        ("extra", "date"),
    ]
    assert cols.latest == ("id", "title", "qty", "price", "extra") and cols.since == 40 and cols.versions == 2
    # a type no single Spark type holds both of: the mirror's text form
    v3 = _version(("id", "bigint"), ("qty", "date"))
    assert dict((n, k) for n, k, _ in union_columns("s", "t", [(1, v1), (2, v3)]).columns)["qty"] == "text"
    # back to an earlier version: the latest one starts at its last first appearance
    assert union_columns("s", "t", [(1, v1), (2, v2), (3, v1)]).since == 3


def test_compact_until_is_file_colon_pos() -> None:
    from service.batch.compact import parse_until
    from service.checkpoint import BinlogPosition
    from service.errors import ConfigError

    assert parse_until("mysql-bin.000042:1234") == BinlogPosition("mysql-bin.000042", 1234)
    for bad in ("mysql-bin.000042", ":12", "f:x"):
        with pytest.raises(ConfigError, match="FILE:POS"):
            parse_until(bad)
