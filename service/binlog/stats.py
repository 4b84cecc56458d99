"""Mutable decoder counters (the only mutable object column readers touch)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DecoderStats"]


@dataclass(slots=True)
class DecoderStats:
    # A plain dict, not a Counter: compiled, `counter[k] += 1` goes through Counter's Python-level
    # item slots, once per event.
    events_by_type: dict[int, int] = field(default_factory=dict)
    skipped_ignorable: int = 0  # unknown event types skipped thanks to LOG_EVENT_IGNORABLE_F
    invalid_text_values: int = 0  # text values whose bytes were invalid in their charset
    rows: int = 0
    skipped_rows_events: int = 0  # rows events not decoded because DecodeOptions.skip_rows said so
    # QUERY events whose status block held a code we do not know: the rest of the block is
    # kept unparsed (status["unknown_code"], status["unparsed"]); the SQL text is still decoded
    unknown_status_vars: int = 0

    def snapshot(self) -> dict[str, object]:
        return {
            "events_by_type": dict(self.events_by_type),
            "skipped_ignorable": self.skipped_ignorable,
            "invalid_text_values": self.invalid_text_values,
            "rows": self.rows,
            "skipped_rows_events": self.skipped_rows_events,
            "unknown_status_vars": self.unknown_status_vars,
        }
