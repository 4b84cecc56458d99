"""binlog_row_metadata=NO_LOG (MariaDB's default) and MINIMAL: the TABLE_MAP carries no charset
(NO_LOG) or no names (both). Each column's charset and binary-ness then come from
information_schema, so binary, BINARY(n), latin1 values and a VARBINARY key are mirrored byte for
byte, also for rows written through the binlog after the mirror started (issue #24, item 1)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from service.cli import app
from service.devtools.stack import LocalStack
from service.errors import PreflightError
from service.pipeline.replicator import Replicator
from service.transport.columns import ColumnNames
from tests.integration.mirror_helpers import (
    actual,
    expected,
    mirror_settings,
    root,
    run_sql,
    settle,
    stop_replicator,
)

pytestmark = pytest.mark.integration

DB, PREFIX = "nometa", "nmd"
KEYS = {"bin": ("k",)}
PNG = "X'89504E470D0A1A0A0000000D49484452FFFE'"


@pytest.mark.parametrize("metadata", ["NO_LOG", "MINIMAL"])
async def test_binary_and_latin1_values_and_keys_are_exact(
    tmp_path: Path, metadata: str, caplog: pytest.LogCaptureFixture
) -> None:
    own = LocalStack(tmp_path / "own", mariadb_options={"binlog_row_metadata": metadata})
    own.up()
    try:
        info = own.load()
        assert info is not None
        conn = root(own)
        with conn.cursor() as cur:
            cur.execute("SELECT @@binlog_row_metadata")
            assert cur.fetchone() == (metadata,)
        conn.close()
        run_sql(
            own,
            None,
            f"CREATE DATABASE {DB} CHARACTER SET utf8mb4",
            f"CREATE TABLE {DB}.bin (k VARBINARY(8) PRIMARY KEY, b BLOB, b4 BINARY(4), "
            "l VARCHAR(20) CHARACTER SET latin1, u VARCHAR(20), n INT, "
            "e ENUM('x', 'it''s', 'ñ') CHARACTER SET latin1, s SET('p', 'q r'))",
            # copied by the bootstrap, not through the binlog
            f"INSERT INTO {DB}.bin VALUES (X'01', X'00FF', 'x', 'd\xe9j\xe0', 'copied', 0, 'ñ', 'p')",
        )
        rep = Replicator(mirror_settings(own, DB, PREFIX, server_id=4343))
        task = asyncio.create_task(rep.run())
        try:
            await settle(rep, own)
            run_sql(
                own,
                None,
                f"INSERT INTO {DB}.bin VALUES (X'FF', {PNG}, 'ab', 'ñandú', 'ñandú ☃', 1, 'it''s', 'p,q r'), "
                "(X'FE', X'FEFF', X'DEADBEEF', 'plain', 'plain', 2, 'x', ''), "
                "('abc', 'abc', 'abc', 'abc', 'abc', 3, NULL, NULL)",
            )
            # updates and deletes find their row by the binary key: 0xFF and 0xFE stay apart
            run_sql(
                own,
                None,
                f"UPDATE {DB}.bin SET b = X'C328', l = 'ÿ€', b4 = 'a', n = 10, e = 'ñ' WHERE k = X'FF'",
                f"UPDATE {DB}.bin SET k = X'FD', u = '€' WHERE k = X'FE'",
                f"DELETE FROM {DB}.bin WHERE k = 'abc'",
                f"UPDATE {DB}.bin SET u = 'ü' WHERE k = X'01'",
            )
            await settle(rep, own)
            mirrored = actual(info.redis_url, PREFIX, DB, tuple(KEYS))
            assert mirrored == expected(own, DB, KEYS)
            assert set(mirrored["bin"]) == {"0x01", "0xff", "0xfd"}
            assert mirrored["bin"]["0xff"][b"b4"] == b"a\x00\x00\x00"
            assert mirrored["bin"]["0xff"][b"l"] == "ÿ€".encode()
            assert mirrored["bin"]["0xff"][b"e"] == "ñ".encode()  # ENUM/SET values, not indexes
            assert mirrored["bin"]["0xfd"][b"s"] == b""
            assert rep.status().invalid_text_values == 0

            # a column in a character set without a codec: the table is refused, by name
            caplog.set_level(logging.ERROR)
            run_sql(own, None, f"ALTER TABLE {DB}.bin ADD COLUMN a VARCHAR(5) CHARACTER SET armscii8")
            with pytest.raises(PreflightError, match=r"nometa\.bin\.a \(armscii8\)"):
                await asyncio.wait_for(task, 60)
        finally:
            await stop_replicator(rep, task)
    finally:
        own.down()


def test_schema_export_feeds_decode(stack: LocalStack, tmp_path: Path) -> None:
    """`schema export` writes what information_schema says; `decode --schema` reads it back."""
    info = stack.load()
    assert info is not None
    db = "schema_export_t"
    run_sql(
        stack,
        None,
        f"DROP DATABASE IF EXISTS {db}",
        f"CREATE DATABASE {db} CHARACTER SET utf8mb4",
        f"CREATE TABLE {db}.t (k VARBINARY(8) PRIMARY KEY, l TEXT CHARACTER SET latin1, n INT)",
    )
    out = tmp_path / "schema.json"
    result = CliRunner().invoke(
        app, ["schema", "export", "--mysql", info.mysql_url, "--tables", f"{db}.*", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = orjson.loads(out.read_bytes())
    assert doc["tables"] == [
        {
            "schema": db,
            "table": "t",
            "columns": [
                {"name": "k", "data_type": "varbinary", "charset": None},
                {"name": "l", "data_type": "text", "charset": "latin1"},
                {"name": "n", "data_type": "int", "charset": None},
            ],
        }
    ]
    schema = ColumnNames.from_export(doc)
    assert schema.export() == doc
