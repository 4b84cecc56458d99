"""diagnose._keyed_by: whether a stored row sits under the key its current key columns give
(hash fields are bytes, JSON values their canonical forms; binary keys are 0x-hex)."""

from __future__ import annotations

import base64

import pytest

from service.sink.diagnose import _keyed_by
from service.sink.keys import KeyLayout

LAY = KeyLayout("m")


@pytest.mark.parametrize(
    ("row", "suffix", "key", "json", "keyed"),
    [
        pytest.param({b"id": b"1", b"code": b"c1"}, "1", ("id",), False, True, id="hash-int"),
        pytest.param({b"id": b"1", b"code": b"c1"}, "1", ("code",), False, False, id="hash-other-key"),
        pytest.param({b"k": b"\xff", b"v": b"x"}, "0xff", ("k",), False, True, id="hash-binary"),
        pytest.param(
            {b"a": b"x:y", b"b": b"2"}, LAY.row_suffix(["x:y", 2]), ("a", "b"), False, True, id="hash-escaped"
        ),
        pytest.param({b"a": b"x", b"b": b"2"}, "x", ("a", "b"), False, False, id="hash-fewer-parts"),
        pytest.param({"id": 5, "code": "c5"}, "5", ("id",), True, True, id="json-int"),
        pytest.param({"id": 5, "code": "c5"}, "5", ("code",), True, False, id="json-other-key"),
        pytest.param(
            {"k": base64.b64encode(b"\xfe").decode()}, "0xfe", ("k",), True, True, id="json-binary-base64"
        ),
        pytest.param({"id": 5}, "5", ("missing",), True, False, id="json-no-such-column"),
    ],
)
def test_keyed_by(
    row: dict[object, object], suffix: str, key: tuple[str, ...], json: bool, keyed: bool
) -> None:
    assert _keyed_by(row, suffix, key, json) is keyed
