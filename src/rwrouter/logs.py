"""One-line ``key=value`` (logfmt) logs. Never put a secret in a log line.

Records are ``ts=... level=... logger=... <message>``. Every log call of the package passes
its fields through :class:`kv` (``log.info(kv(destination=name, msg="resharding"))``), which
writes each value with :func:`q`: bare when it is a simple token, quoted otherwise, so a value
with a space, a quote, a newline or a terminal escape never breaks the line
(tests/unit/test_logs.py checks every call). A message that is not ``key=value`` pairs (from a
library) becomes ``msg="..."``.
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


class kv:
    """The fields of one log record, written ``key=value`` in the order given, each value
    through :func:`q` (``str`` of it: None is ``None``, a bool ``True``/``False``).
    Formatted only when the record is emitted (a debug line below the level costs the call
    only). Keys must be bare tokens (``[a-z_]``)."""

    __slots__ = ("fields",)

    def __init__(self, **fields: object) -> None:
        self.fields = fields

    def __str__(self) -> str:
        return " ".join(f"{key}={q(value)}" for key, value in self.fields.items())


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
