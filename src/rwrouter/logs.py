"""One-line ``key=value`` (logfmt) logs. Never put a secret in a log line.

Records are ``ts=... level=... logger=... <message>``. Every log call of the package passes
its fields through :class:`kv` (``log.info(kv(destination=name, msg="resharding"))``), which
writes each value with :func:`q`: bare when it is a simple token, quoted otherwise, so a value
with a space, a quote, a newline or a terminal escape never breaks the line
(tests/unit/test_logs.py checks every call). A message that is not ``key=value`` pairs (from a
library) becomes ``msg="..."``.

Values often come from outside (a destination's answer quoting a sender's label values, names,
URLs): :func:`escape` writes every character a terminal would act on as an escape, so neither
a log line nor a command's output (``rwrouter rejected``, ``rwrouter relabel``, ``rwrouter
audit`` print outside data through it) can move the cursor, ring the bell, set the window title
or reorder the text: the C0 controls, DEL and the C1 controls (``\\n``, ``\\r``, ``\\t``, else
``\\xNN``), the bidirectional overrides and isolates, and lone surrogates (``\\uNNNN``).
"""

from __future__ import annotations

import logging
import re
import sys
import time

_BARE_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+")


# C0 controls, DEL, C1 controls; ALM, LRM, RLM; bidi embeddings/overrides and isolates
# (Unicode TR9; "Trojan Source", CVE-2021-42574); lone surrogates (not text: lone halves).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape(value: object) -> str:
    """``str(value)`` (bytes decoded as UTF-8, undecodable bytes replaced) with every
    character a terminal acts on written as an escape: ``\\n``, ``\\r``, ``\\t``, ``\\xNN`` for
    the other C0 controls, DEL and C1, ``\\uNNNN`` for the bidi controls and lone surrogates
    (see the module docstring). Other text, backslashes included, is left as it is: for
    printing outside data (a label value, a destination's answer) on a terminal."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return _UNSAFE.sub(_escaped, text)


def q(value: object) -> str:
    """A logfmt value: bare when it is a simple token, else double-quoted, with ``\\`` and
    ``"`` backslash-escaped and the characters :func:`escape` escapes escaped. Bytes are
    decoded as UTF-8 with undecodable bytes replaced."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if text and all(char in _BARE_OK for char in text):
        return text
    return '"' + escape(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class Throttle:
    """At most one log line per key (a client address) and ``every`` seconds, for events a
    client can cause at will (a refused request): :meth:`admit` says whether to log this one
    and how many were not logged since. Remembers at most ``keys`` keys (the least recently
    logged forgotten first). Time is passed in (seconds on any monotonic clock)."""

    def __init__(self, *, every: float = 60.0, keys: int = 4096) -> None:
        self.every = every
        self._keys = keys
        self._last: dict[str, tuple[float, int]] = {}  # insertion order: oldest logged first

    def admit(self, key: str, *, now: float) -> int | None:
        """None: do not log (counted for the next line); else log, with this many events of
        ``key`` not logged since its last line."""
        last, unlogged = self._last.get(key, (float("-inf"), 0))
        if now - last < self.every:
            self._last[key] = (last, unlogged + 1)
            return None
        self._last.pop(key, None)
        self._last[key] = (now, 0)
        if len(self._last) > self._keys:
            del self._last[next(iter(self._last))]
        return unlogged

    def __len__(self) -> int:
        """The keys remembered (at most ``keys``)."""
        return len(self._last)


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
        kv_form = "=" in message.split(" ", 1)[0]  # kv's (escaped already) or a library's
        message = escape(message) if kv_form else "msg=" + q(message)
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
