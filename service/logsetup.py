"""Logging for every command: `--log-level`, `--log-format text|json`, and secret redaction.

    text  2026-11-25 21:40:00,123 INFO service.pipeline.replicator: state: starting -> streaming
    json  {"time": "2026-11-25T21:40:00.123Z", "level": "INFO", "logger": "...", "message": "...",
           "table": "shop.orders", ...}   one object per line; `extra=` fields are carried as keys

Every record passes `RedactSecrets` on the way out (uvicorn's and the libraries' included): a
`token=` query value (a websocket URL in uvicorn's access line), a URL's password and a bearer
token are replaced by `***`, so no secret reaches a log line. A record is always one line: a
traceback goes into the JSON object's `exc` key, or follows on the next lines in text.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys
from typing import Any, Literal

import orjson

__all__ = ["LogFormat", "RedactSecrets", "configure", "redact"]

LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error")

_SECRETS = (
    (re.compile(r"(?i)([?&;\s]token=)[^&\s\"'#]+"), r"\1***"),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1***"),
    (re.compile(r"([a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+(@)"), r"\1***\2"),
)
# the attributes every LogRecord has: everything else came from `extra=`
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class RedactSecrets(logging.Filter):
    """Replace secrets in the rendered message (and in `extra=` string values)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, redact(value))
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = dt.datetime.fromtimestamp(record.created, dt.UTC)
        out: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(out, default=str).decode()


def configure(level: str = "info", fmt: LogFormat = "text") -> None:
    """(Re)configure the root logger: one stderr handler with the redaction filter."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    if level.lower() != "debug":  # py4j logs every Java call at INFO/DEBUG
        logging.getLogger("py4j").setLevel(logging.WARNING)
