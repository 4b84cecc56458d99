"""UtcText: a TIMESTAMP decoded straight to text for the mirror (DecodeOptions.stored_text).

Not compiled (service/devtools/build_decoder.py): it subclasses str, which native classes cannot.
"""

from __future__ import annotations

__all__ = ["UtcText"]


class UtcText(str):
    """A TIMESTAMP's canonical text, "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" (canonical.py): a str, so
    JSON (the json layout, the change log, the websocket) writes it as it is; a type of its own,
    so the hash layout, keys and foreign-key sets store its UTC wall time instead, as they store
    a decoded TIMESTAMP's (service/sink/values.py)."""

    __slots__ = ()

    def wall_time(self) -> str:
        """ "YYYY-MM-DD HH:MM:SS[.ffffff]": the hash-field and key text of the same TIMESTAMP."""
        return f"{self[:10]} {self[11:-1]}"
