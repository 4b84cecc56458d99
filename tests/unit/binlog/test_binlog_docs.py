"""docs/decoder.md stays true: every event type is listed with what the decoder does with it,
and every DecodeError subclass has its row in the errors table."""

from __future__ import annotations

import re
from pathlib import Path

import service.errors
from service.binlog import BinlogDecoder, EventType

DOC = Path(__file__).resolve().parents[3] / "docs" / "decoder.md"


def _codes(cell: str) -> set[int]:
    out: set[int] = set()
    for part in cell.split(","):
        lo, _, hi = part.strip().partition("–")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def documented_event_types() -> dict[int, str]:
    """code -> "decoded" | "carried" | "refused", from the two event tables."""
    out: dict[int, str] = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| ([\d,– ]+) \| [^|]+ \| (decoded|carried|refused)", line)
        if m:
            for code in _codes(m.group(1)):
                assert code not in out, f"event type {code} listed twice"
                out[code] = m.group(2)
    return out


def test_every_event_type_is_documented_with_what_the_decoder_does() -> None:
    documented = documented_event_types()
    assert set(documented) == {int(t) for t in EventType}
    handled = set(BinlogDecoder()._handlers)  # type code -> decoder of the common events
    special = {int(EventType.FORMAT_DESCRIPTION), int(EventType.TRANSACTION_PAYLOAD)}  # decoded apart
    refused = {int(EventType.START_V3), int(EventType.MARIA_START_ENCRYPTION)}
    for code, result in documented.items():
        if code in handled or code in special:
            assert result == "decoded", code
        elif code in refused:
            assert result == "refused", code
        else:
            assert result == "carried", code  # OpaqueEvent


def test_every_decode_error_is_documented() -> None:
    text = DOC.read_text()
    errors = [
        name
        for name in service.errors.__all__
        if issubclass(getattr(service.errors, name), service.errors.DecodeError)
    ]
    assert len(errors) == 8
    for name in errors:
        assert f"| `{name}`" in text, name
