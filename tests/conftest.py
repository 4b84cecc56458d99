"""Shared fixtures. The servers are real and started once per session: the local stack (mariadbd +
redis-server) for `integration` tests, a redis-server alone (`redis_url`) or a Redis Cluster alone
(`redis_cluster`) for `redis` tests. A test that starts a server without its marker fails
(tests/server_markers.py), so `pytest -m "not integration and ..."` (make check) never starts one."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from importlib import machinery
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from server_markers import FIXTURE_MARKERS, SERVER_MARKERS, missing_markers, started_programs

ROOT = Path(__file__).resolve().parents[1]


def _import_sources_first() -> None:
    """Under coverage (make check: pytest --cov), the project's modules are imported from their .py
    even where a compiled build (mypyc, `make`) left a .so beside them: coverage sees only Python
    code. The .py is the reference the .so is built from; test_compiled_build runs the unit tests
    on the compiled build (make test)."""
    source_first = machinery.FileFinder.path_hook(
        (machinery.SourceFileLoader, machinery.SOURCE_SUFFIXES),
        (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
        (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES),
    )
    packages = [ROOT / "service", ROOT / "api"]

    def hook(path: str) -> Callable[..., Any]:
        if not any(Path(path).resolve().is_relative_to(p) for p in packages):
            raise ImportError  # not ours: the next hook finds it as usual
        return source_first(path)

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()


if TYPE_CHECKING:
    from service.devtools.stack import LocalStack


def pytest_configure(config: pytest.Config) -> None:
    # pytest-cov measures from here on (a worker of xdist: from its session start), and nothing has
    # imported the project yet: the fixtures import it when they run
    if config.pluginmanager.has_plugin("_cov") and not getattr(config.option, "no_cov", False):
        assert "service" not in sys.modules, "the project was imported before its sources could be preferred"
        _import_sources_first()


# The test being run (set up, called, torn down), whose markers allow or refuse a server start.
_running: pytest.Item | None = None
_refused = pytest.StashKey[list[str]]()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Refuses the start of a server program in a test without the marker for it. Called for every
    audited event of the process (opens, imports, ...): all but process starts return at once."""
    if event != "subprocess.Popen" and event != "os.posix_spawn" or _running is None:
        return
    programs = started_programs(args[1])
    if not programs:
        return
    missing = missing_markers(SERVER_MARKERS, programs, {m.name for m in _running.iter_markers()})
    if missing:
        message = f"this test starts a server without its marker: {', '.join(missing)}"
        _running.stash.setdefault(_refused, []).append(message)
        raise RuntimeError(message)


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    global _running
    _running = item
    try:
        return (yield)
    finally:
        _running = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that asks for a server fixture carries its marker (checked before any fixture runs)."""
    missing = missing_markers(
        FIXTURE_MARKERS, getattr(item, "fixturenames", ()), {m.name for m in item.iter_markers()}
    )
    if missing:
        pytest.fail(
            f"this test uses a server fixture without its marker: {', '.join(missing)}", pytrace=False
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A refused server start fails the test even when the test swallowed the error."""
    report = yield
    refused = item.stash.get(_refused, [])
    item.stash[_refused] = []  # said once, in the phase that refused it
    if refused and report.passed:
        report.outcome = "failed"
        report.longrepr = "\n".join(refused)
    return report


# `make test` runs the suite on two xdist workers, a file at a time each (--dist loadfile
# --no-loadscope-reorder), handed out in collection order: the files of the minutes-long tests
# (a build, the image, Spark) go first, so that the short ones fill the other worker meanwhile
# instead of one long file running alone at the end. Files keep their order otherwise, and tests
# keep theirs within a file.
HEAVY_MARKERS = ("build", "image", "spark")  # the longest first: a build's file takes minutes


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # xdist tells tests apart by node id: under pytest 9.2, which builds an item's id from its
    # original name and its parametrize ids, schemathesis 4.32's tests of every API operation
    # share one (`...::test_api_never_answers_5xx`), and xdist ran only the first of them. They
    # get the id their name says (`...::test_api_never_answers_5xx[GET /lag]`).
    ids = Counter(item.nodeid for item in items)
    for item in items:
        if ids[item.nodeid] > 1 and item.parent is not None:
            item._id = type(item.parent.id).parse(f"{item.parent.nodeid}::{item.name}")
    twice = [i for i, n in Counter(item.nodeid for item in items).items() if n > 1]
    if twice:
        raise pytest.UsageError(f"tests that share a node id: {twice}")
    rank: dict[Path, int] = {}
    for item in items:
        marks = [i for i, m in enumerate(HEAVY_MARKERS) if item.get_closest_marker(m)]
        rank[item.path] = min([rank.get(item.path, len(HEAVY_MARKERS)), *marks])
    items.sort(key=lambda item: rank[item.path])  # stable


# Every collected test reports a result: a run whose results fall short of its collection (a
# test lost between xdist workers, never run nor reported) fails instead of passing quietly.
_collected: Counter[str] = Counter()
_reported: Counter[str] = Counter()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    if session.items:  # the xdist controller collects nothing: its workers say what they did
        _collected.clear()
        _collected.update(item.nodeid for item in session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    _collected.clear()
    _collected.update(ids)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or not report.passed:  # a setup that skipped or failed is a result
        _reported[report.nodeid] += 1


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    option = session.config.option
    if hasattr(session.config, "workerinput") or option.collectonly or option.setuponly or option.setupplan:
        return
    missing = sorted((_collected - _reported).elements())
    if missing and session.exitstatus == pytest.ExitCode.OK:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"{len(missing)} of {_collected.total()} collected tests reported no result:", *missing]
        if reporter is not None:
            reporter.ensure_newline()
            for line in lines:
                reporter.write_line(line, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A running local stack in a temp dir; every process it started is stopped at the end."""
    from service.devtools.stack import LocalStack

    local = LocalStack(tmp_path_factory.mktemp("stack"))
    local.up()
    try:
        yield local
    finally:
        local.down()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a redis-server of the session's own, configured as the stack's (AOF), with no
    mariadbd. Tests share it: each keeps to a key prefix of its own."""
    from service.devtools.stack import LocalStack

    local = LocalStack(tmp_path_factory.mktemp("redis"))
    local.start_redis()
    try:
        info = local.load()
        assert info is not None
        yield info.redis_url
    finally:
        local.down()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack whose only servers are a Redis Cluster of three masters (no mariadbd): its
    `load().redis_url` is `redis+cluster://...`, and a test may stop and start a master through it.
    Tests share it: each keeps to a key prefix of its own."""
    from service.devtools.stack import LocalStack

    local = LocalStack(tmp_path_factory.mktemp("redis-cluster"), redis_cluster=True)
    local.start_redis_cluster()
    try:
        yield local
    finally:
        local.down()
