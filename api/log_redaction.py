"""Keep secrets out of uvicorn's log lines when the app runs without `binlog-mirror run`'s logging
set-up (e.g. `uvicorn --factory api.main:create_app`).

Browsers cannot set headers on a websocket, so the dashboard (and any browser client) passes
the API token as `/ws/events?token=…`; uvicorn logs that path with its query string
(`uvicorn.error`: `"WebSocket /ws/events?token=…" [accepted]`, `uvicorn.access` for HTTP).
`install()` puts the service's one secret filter (service/logsetup.py) on those loggers, so the
value is `***` before any handler formats the record.
"""

from __future__ import annotations

import logging

from service.logsetup import RedactSecrets

__all__ = ["LOGGERS", "install"]

LOGGERS = ("uvicorn.error", "uvicorn.access")


def install() -> None:
    """Add the filter to uvicorn's loggers, once per process (safe to call again)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecrets) for f in logger.filters):
            logger.addFilter(RedactSecrets())
