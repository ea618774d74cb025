"""One-line ``key=value`` (logfmt) logs. Never put a secret in a log line.

Records are ``ts=... level=... logger=... <message>``; a message that is not already
``key=value`` pairs becomes ``msg="..."``. Use :func:`q` for values that may hold spaces, quotes
or bytes (answer bodies, reasons, URLs).
"""

from __future__ import annotations

import logging
import sys
import time

_BARE_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+")


def q(value: object) -> str:
    """A logfmt value: bare when it is a simple token, else double-quoted with escapes.
    Bytes are decoded as UTF-8 with undecodable bytes replaced."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if text and all(char in _BARE_OK for char in text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\r", "\\r").replace("\t", "\\t") + '"'


class LogfmtFormatter(logging.Formatter):
    """One line per record: ``ts=... level=... logger=... <key=value message>``."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        ts += f".{int(record.msecs):03d}Z"
        message = record.getMessage().replace("\n", " ")
        if "=" not in message.split(" ", 1)[0]:
            message = "msg=" + q(message)
        line = f"ts={ts} level={record.levelname.lower()} logger={record.name} {message}"
        if record.exc_info:
            line += " exc=" + q(self.formatException(record.exc_info).replace("\n", " | "))
        return line


def setup_logging(level: str) -> None:
    """Log one-line records to stderr at ``level`` (debug, info, warning, error)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("botocore").setLevel(logging.WARNING)
