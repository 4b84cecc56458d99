"""Keep `token=` query values out of uvicorn's log lines.

Browsers cannot set headers on a websocket, so the dashboard (and any browser client) passes
the API token as `/ws/events?token=…`; uvicorn logs that path with its query string
(`uvicorn.error`: `"WebSocket /ws/events?token=…" [accepted]`, `uvicorn.access` for HTTP).
`install()` adds a filter to those loggers that rewrites the value to `***` before any handler
formats the record.
"""

from __future__ import annotations

import logging
import re

__all__ = ["LOGGERS", "TokenRedactor", "install", "redact_query"]

LOGGERS = ("uvicorn.error", "uvicorn.access")
_TOKEN = re.compile(r"(?i)([?&]token=)[^&#\s\"']*")


def redact_query(text: str) -> str:
    """`/ws/events?tables=a.*&token=s3cret` -> `/ws/events?tables=a.*&token=***`."""
    return _TOKEN.sub(r"\1***", text)


class TokenRedactor(logging.Filter):
    """Rewrites `token=` values in a record's message and string arguments; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_query(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_query(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact_query(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True


def install() -> None:
    """Add the filter to uvicorn's loggers, once per process (safe to call again)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TokenRedactor) for f in logger.filters):
            logger.addFilter(TokenRedactor())
