"""SQL names: every part backquoted, a backquote inside a name doubled (the one quoting the
catalog, resync, verify and snapshot share)."""

from __future__ import annotations

import pytest

from service.transport.connection import quote_ident


@pytest.mark.parametrize(
    ("names", "sql"),
    [
        pytest.param(("id",), "`id`", id="column"),
        pytest.param(("db", "t"), "`db`.`t`", id="schema-table"),
        pytest.param(("d`b", "t``"), "`d``b`.`t`````", id="backquotes-doubled"),
        pytest.param(("a.b",), "`a.b`", id="dot-inside-a-name"),
    ],
)
def test_quote_ident(names: tuple[str, ...], sql: str) -> None:
    assert quote_ident(*names) == sql
