"""SQL literals of the project's own: every value bound into a query goes through `bind`.

The driver's parameter escaping is not used: its handling of `bytes` changed under the project
(PyMySQL 1.2 replaced the helper aiomysql 0.3 calls for every `bytes` parameter, and a binary key
crashed every keyset-paginated copy). Here every string and binary value is written as a hex
literal, so no escaping rule (backslashes, NO_BACKSLASH_ESCAPES, the connection's charset) is
involved and any byte sequence round-trips:

    bytes / bytearray / memoryview   X'00ff'            (a binary string: BINARY, VARBINARY, BLOB, BIT)
    str                              _utf8mb4 X'616263' (a string of coercible collation, as a quoted
                                                        literal is on a utf8mb4 connection:
                                                        compared in the column's collation)
    int / bool / Decimal / float     the number's digits
    datetime / date / time / timedelta  a quoted temporal text ('2024-01-02 03:04:05.000006');
                                     an aware datetime as its UTC wall time (sessions run at +00:00)
    set / frozenset                  its members comma-joined (a SET value), as a string
    None                             NULL

The copies, `verify`, `--repair` and the Spark jobs read tables by key with the two statements
built here: `keyset_page` (pagination by key, no OFFSET scans) and `rows_by_key`.

Pure: no I/O. The connections use charset utf8mb4 (service/transport/connection.py).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

__all__ = ["bind", "keyset_page", "literal", "quote_ident", "rows_by_key"]


def _temporal(value: dt.date | dt.time | dt.timedelta) -> str:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(" ", "microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return value.isoformat("microseconds")
    us = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign, us = ("-" if us < 0 else ""), abs(us)
    secs, frac = divmod(us, 1_000_000)
    return f"{sign}{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}.{frac:06d}"


def literal(value: Any) -> str:
    """`value` as an SQL literal (see the module docstring); TypeError for another type."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, str):
        return f"_utf8mb4 X'{value.encode('utf-8').hex()}'"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"no SQL literal for the DECIMAL {value}")
        return format(value, "f")  # never an exponent: 1E+2 would be a DOUBLE literal
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"no SQL literal for the float {value!r}")
        return repr(value)
    if isinstance(value, dt.date | dt.time | dt.timedelta):
        return f"'{_temporal(value)}'"
    if isinstance(value, set | frozenset):
        return literal(",".join(sorted(str(v) for v in value)))
    raise TypeError(f"no SQL literal for a value of type {type(value).__name__}")


def bind(sql: str, args: Sequence[Any] | None) -> str:
    """`sql` with each `%s` replaced by the literal of the next arg, as the driver's `execute`
    would (`%%` is a literal `%` when args are given); `sql` as is without args."""
    if args is None:
        return sql
    return sql % tuple(literal(a) for a in args)


def quote_ident(*names: str) -> str:
    """A name for SQL text, each part backquoted with its backquotes doubled:
    quote_ident("db", "t") is `db`.`t`."""
    return ".".join("`" + name.replace("`", "``") + "`" for name in names)


def _row(values: Sequence[Any]) -> str:
    return "(" + ", ".join(literal(v) for v in values) + ")"


def keyset_page(
    schema: str, table: str, key: Sequence[str], after: Sequence[Any] | None, limit: int, where: str = ""
) -> str:
    """The next `limit` rows in key order after the key values `after` (None: from the start),
    within the condition `where` if any."""
    cols = ", ".join(quote_ident(c) for c in key)
    conds = [where] if where else []
    if after is not None:
        conds.append(f"({cols}) > {_row(after)}")
    sql = f"SELECT * FROM {quote_ident(schema, table)}"
    if conds:
        sql += " WHERE " + " AND ".join(conds)
    return f"{sql} ORDER BY {cols} LIMIT {int(limit)}"


def rows_by_key(schema: str, table: str, key: Sequence[str], values: Sequence[Sequence[Any]]) -> str:
    """The rows whose key columns hold one of `values` (not empty)."""
    cols = ", ".join(quote_ident(c) for c in key)
    return f"SELECT * FROM {quote_ident(schema, table)} WHERE ({cols}) IN ({', '.join(map(_row, values))})"
