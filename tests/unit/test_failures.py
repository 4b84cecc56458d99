"""FailureLog: a permanent error is logged once per interval (or when it changes), a retriable one
every time; retry-cycle state changes are DEBUG and do not hide `failed`."""

from __future__ import annotations

import logging

import pytest

from service.errors import SinkError, SourceAccessDenied, SourceError
from service.pipeline.failures import FailureLog
from service.pipeline.status import State


def test_permanent_errors_are_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    flog = FailureLog(logging.getLogger("t"), interval=60, clock=lambda: now[0])
    denied = SourceAccessDenied("mysql: access denied for user 'repl'")
    with caplog.at_level(logging.INFO, "t"):
        for t in (0, 1, 30, 59.9, 60, 61, 119):
            now[0] = t
            flog.report(denied, 0.5)
        flog.report(SourceAccessDenied("mysql: other"), 0.5)  # a new reason: logged at once
        flog.report(SourceError("lost"), 0.5)
        flog.report(SourceError("lost"), 0.5)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5, lines
    assert lines[0].startswith("replication failed: mysql: access denied for user 'repl'; retrying")
    assert lines[1].endswith("(3 more attempts failed alike)")  # at 1, 30 and 59.9
    assert lines[2].startswith("replication failed: mysql: other") and "alike" not in lines[2]
    assert lines[3:] == ["replication interrupted: lost; retrying in 0.50s"] * 2


def test_states_of_a_retry_cycle() -> None:
    assert FailureLog.state(SourceAccessDenied("x")) is State.FAILED
    assert FailureLog.state(SinkError("x")) is State.RECONNECTING
    assert FailureLog.held(State.FAILED, State.STARTING) is State.FAILED
    assert FailureLog.held(State.FAILED, State.STREAMING) is State.STREAMING
    assert FailureLog.held(State.RECONNECTING, State.STARTING) is State.STARTING
    assert FailureLog.level(State.STARTING, State.FAILED) == logging.DEBUG
    assert FailureLog.level(State.RECONNECTING, State.STARTING) == logging.DEBUG
    assert FailureLog.level(State.STARTING, State.STREAMING) == logging.INFO
    assert FailureLog.level(State.STREAMING, State.FAILED) == logging.INFO
