"""The marker rule (tests/server_markers.py, enforced by tests/conftest.py): a test that starts a
server, or asks for a server fixture, without the marker that selects it fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from server_markers import FIXTURE_MARKERS, SERVER_MARKERS, missing_markers, started_programs

TESTS = Path(__file__).resolve().parents[1]


def test_a_server_is_seen_in_any_word_of_the_command() -> None:
    assert started_programs(["redis-server", "/tmp/x/redis.conf"]) == {"redis-server"}
    # the stack's detached start: sh -c '"$@" ...' <log> <server> <args>
    detached = ["sh", "-c", '"$@" </dev/null >>"$0" 2>&1 & echo $!', "/tmp/m.out", "/usr/sbin/mariadbd"]
    assert started_programs(detached) == {"mariadbd"}
    assert started_programs("exec /usr/bin/redis-server --port 0") == {"redis-server"}
    assert started_programs([b"/opt/spark/bin/spark-submit", Path("/tmp/redis-server.log")]) == {
        "spark-submit"
    }
    assert started_programs(["mariadb-binlog", "--base64-output=never", "x.000001"]) == set()
    assert started_programs([sys.executable, "-m", "service", "--version"]) == set()


def test_the_missing_markers_are_named_with_the_ones_that_would_do() -> None:
    assert missing_markers(SERVER_MARKERS, {"redis-server"}, {"redis"}) == []
    assert missing_markers(SERVER_MARKERS, {"redis-server"}, {"integration"}) == []
    assert missing_markers(SERVER_MARKERS, {"mariadbd", "redis-server"}, {"redis"}) == [
        "mariadbd (mark it integration)"
    ]
    assert missing_markers(FIXTURE_MARKERS, ["tmp_path", "redis_url"], set()) == [
        "redis_url (mark it integration or redis)"
    ]


def test_an_unmarked_test_that_starts_a_server_fails(tmp_path: Path) -> None:
    """A pytest of its own with this conftest: `sh -c true` given a server's path as an argument
    stands for a server start (nothing is started)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    redis: r\n    integration: i\n")
    (tmp_path / "test_rule.py").write_text(
        textwrap.dedent(
            """
            import contextlib
            import subprocess

            import pytest

            START = ["sh", "-c", "true", "sh", "/usr/bin/redis-server"]

            def test_unmarked():
                subprocess.run(START, check=True)

            def test_unmarked_swallowed():
                with contextlib.suppress(Exception):
                    subprocess.run(START, check=True)

            @pytest.mark.redis
            def test_marked():
                subprocess.run(START, check=True)

            def test_no_server():
                subprocess.run(["sh", "-c", "true"], check=True)

            def test_fixture_unmarked(redis_url):
                raise AssertionError("not reached: refused before the fixture starts a server")
            """
        )
    )
    plugins = ["conftest", "no:cacheprovider", "no:schemathesis", "no:hypothesispytest"]
    env = {"PYTHONPATH": f"{TESTS}:{TESTS.parent}", "PATH": "/usr/bin:/bin", "COLUMNS": "300"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *(f"-p{p}" for p in plugins), "-q", "-rA", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = result.stdout
    assert "PASSED test_rule.py::test_marked" in out, out
    assert "PASSED test_rule.py::test_no_server" in out, out
    started = "this test starts a server without its marker: redis-server (mark it integration or redis)"
    assert f"FAILED test_rule.py::test_unmarked - RuntimeError: {started}" in out, out
    assert f"FAILED test_rule.py::test_unmarked_swallowed - {started}" in out, out
    asked = "this test uses a server fixture without its marker: redis_url (mark it integration or redis)"
    assert f"ERROR test_rule.py::test_fixture_unmarked - Failed: {asked}" in out, out
    assert "2 failed, 2 passed, 1 error" in out, out
