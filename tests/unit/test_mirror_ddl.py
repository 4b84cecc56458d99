from __future__ import annotations

from service.pipeline.ddl import ddl_actions
from service.sink.plan import ActionKind
from service.transactions import TableFilter, parse_ddl

FLT = TableFilter.from_lists(["db.*"], ["db.skip"])


def kinds(sql: str, mirrored: set[tuple[str, str]] | None = None) -> list[tuple[str, str, str]]:
    acts = ddl_actions(parse_ddl("db", sql), FLT, mirrored or set())
    return [(a.kind.value, a.table, a.new_table or "") for a in acts]


def test_alter_resyncs_and_pure_rename_does_not() -> None:
    assert kinds("ALTER TABLE t ADD COLUMN c INT") == [("resync", "t", "")]
    assert kinds("ALTER TABLE t RENAME TO u") == [("rename", "t", "u")]
    assert kinds("ALTER TABLE t ADD COLUMN c INT, RENAME TO u") == [("rename", "t", "u"), ("resync", "u", "")]


def test_rename_into_and_out_of_the_selection() -> None:
    assert kinds("RENAME TABLE a TO b, c TO d") == [("rename", "a", "b"), ("rename", "c", "d")]
    assert kinds("RENAME TABLE a TO skip", {("db", "a")}) == [("drop", "a", "")]
    assert kinds("RENAME TABLE skip TO a") == [("resync", "a", "")]


def test_truncate_drop_create() -> None:
    assert kinds("TRUNCATE TABLE t") == [("truncate", "t", "")]
    assert kinds("DROP TABLE t, skip") == [("drop", "t", "")]
    assert kinds("CREATE TABLE t (id INT PRIMARY KEY)") == [("truncate", "t", ""), ("register", "t", "")]
    acts = ddl_actions(parse_ddl("db", "DROP DATABASE db"), FLT, {("db", "x"), ("other", "y")})
    assert [(a.kind, a.table) for a in acts] == [(ActionKind.DROP, "x")]
