"""The decode CLI, and the rule that service.binlog stays pure (no asyncio / drivers / pydantic)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from binlog_text import FIXTURES, VECTORS

import service.binlog

RUN = [sys.executable, "-c", "import typer; from service.cli.decode import decode; typer.run(decode)"]
FORBIDDEN = {"asyncio", "aiomysql", "redis", "pydantic", "pydantic_settings", "fastapi", "orjson", "pyspark"}


def test_binlog_package_imports_nothing_impure() -> None:
    root = Path(service.binlog.__file__).parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in FORBIDDEN, f"{path.name} imports {name}"
                assert not name.startswith(("service.transport", "service.sink", "service.pipeline")), name


def test_decode_prints_one_json_line_per_row_change() -> None:
    path = VECTORS / "mysql-5.7" / "mysql-bin.checksum-none"
    out = subprocess.run([*RUN, str(path)], check=True, capture_output=True, text=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 36
    assert {"op", "schema", "table", "before", "after", "position", "ts", "server_id", "gtid"} <= set(
        lines[0]
    )
    starts = [line["position"]["start"] for line in lines]
    assert starts == sorted(starts) and lines[0]["position"]["file"] == path.name


def test_decode_filters_tables_positions_and_prints_events() -> None:
    path = next((FIXTURES / "mariadb-10.11").glob("02*"))
    run = [*RUN, str(path), "--tables", "mt.big_*"]
    rows = subprocess.run(run, check=True, capture_output=True, text=True).stdout.splitlines()
    assert [json.loads(r)["after"]["e"] for r in rows] == ["e1", "e300", "e256", None]
    run = [*RUN, str(path), "--events", "--start-position", "4", "--stop-position", "400"]
    events = [
        json.loads(r)
        for r in subprocess.run(run, check=True, capture_output=True, text=True).stdout.splitlines()
    ]
    assert events[0]["event"] == "FORMAT_DESCRIPTION" and events[0]["header"]["offset"] == 4
    assert all(e["header"]["offset"] < 400 for e in events)


def test_decode_positions_apply_to_the_first_and_last_file_as_mysqlbinlog() -> None:
    """--start-position cuts the first file only, --stop-position the last file only."""
    first, second = (next((FIXTURES / "mariadb-10.11").glob(f"{n}*")) for n in ("02", "03"))

    def run(*args: str) -> list[dict[str, Any]]:
        out = subprocess.run([*RUN, *args], check=True, capture_output=True, text=True).stdout
        return [json.loads(line) for line in out.splitlines()]

    def spans(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
        return [(r["position"]["file"], r["position"]["start"]) for r in rows]

    start, stop = 5060, 2073  # a GTID event in the first file, one in the second (stop < start)
    whole = spans(run(str(first))) + spans(run(str(second)))
    want = [(f, o) for f, o in whole if (f == first.name and o >= start) or (f == second.name and o < stop)]
    assert {f for f, _ in want} == {first.name, second.name} and len(want) == 16
    got = run(str(first), str(second), "--start-position", str(start), "--stop-position", str(stop))
    assert spans(got) == want
    events = run(
        str(first), str(second), "--events", "--start-position", str(start), "--stop-position", str(stop)
    )
    offsets = [(e["header"]["offset"], e["event"]) for e in events]
    assert offsets[0] == (start, "MARIA_GTID")
    assert (16688, "ROTATE") in offsets  # the end of the first file: no stop there
    second_part = offsets[offsets.index((16688, "ROTATE")) + 1 :]
    assert second_part[0] == (4, "FORMAT_DESCRIPTION")  # the second file from its start
    assert max(o for o, _ in second_part) < stop


def test_decode_corrupt_file_exits_nonzero_with_one_line(tmp_path: Path) -> None:
    src = (VECTORS / "mysql-5.7" / "mysql-bin.checksum-crc32").read_bytes()
    bad = tmp_path / "bad.000001"
    bad.write_bytes(src[:400] + bytes([src[400] ^ 0xFF]) + src[401:])
    result = subprocess.run([*RUN, str(bad)], capture_output=True, text=True)
    assert result.returncode == 1
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "bad.000001 at offset 384" in err[0], err
    truncated = tmp_path / "cut.000001"
    truncated.write_bytes(src[:1000])
    result = subprocess.run([*RUN, str(truncated)], capture_output=True, text=True)
    assert result.returncode == 1 and "offset 944" in result.stderr


def test_an_undecodable_mariadb_5_3_row_names_the_cause_and_other_tables_still_decode() -> None:
    """MariaDB 5.3-format DATETIME(3): logged as a plain DATETIME, its row is longer than the
    binlog says (real bytes: make_mariadb_binlogs.py, phase undecodable-old-hires). The error names
    the table and the likely cause; `--tables` without that table decodes past it; so does a
    `--start-position` after it (rows before the start are not decoded)."""
    path = FIXTURES / "mariadb-10.11" / "undecodable-old-hires.000009"
    failed = subprocess.run([*RUN, str(path)], capture_output=True, text=True)
    assert failed.returncode == 1
    assert "mt.old_hires" in failed.stderr and "mariadb-5.3" in failed.stderr
    assert "ALTER TABLE ... FORCE" in failed.stderr
    ok = subprocess.run([*RUN, str(path), "--tables", "mt.after_hires"], capture_output=True, text=True)
    assert [json.loads(line)["after"] for line in ok.stdout.splitlines()] == [{"id": 7}]
    events = subprocess.run(
        [*RUN, str(path), "--events", "--tables", "mt.after_hires"], capture_output=True, text=True
    )
    later = min(json.loads(e)["header"]["offset"] for e in events.stdout.splitlines() if '"WRITE_ROWS' in e)
    after = subprocess.run([*RUN, str(path), "--start-position", str(later)], capture_output=True, text=True)
    assert [json.loads(line)["after"] for line in after.stdout.splitlines()] == [{"id": 7}]
