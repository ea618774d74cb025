"""Retry policy for sends to a destination (pure; time and randomness are passed in).

Source: RW 1.0 spec and Prometheus ``storage/remote`` — retry connection errors, timeouts and
5xx with exponential backoff; never retry other 4xx; retry 429 only when ``retry_on_http_429``.
A ``Retry-After`` answer (seconds or an HTTP date, RFC 9110 section 10.2.3) sets the delay,
capped at ``max_backoff``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

# Reasons (label values of rwrouter_retries_total / log fields).
NETWORK = "network"
SERVER_ERROR = "5xx"
TOO_MANY_REQUESTS = "429"
CLIENT_ERROR = "4xx"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a failed attempt: ``retry`` or give up; ``delay`` in seconds."""

    retry: bool
    delay: float
    reason: str


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff settings in seconds (Prometheus ``queue_config`` defaults: 30 ms .. 5 s)."""

    min_backoff: float = 0.03
    max_backoff: float = 5.0
    retry_on_http_429: bool = False

    def decide(
        self,
        status: int | None,
        *,
        attempt: int,
        retry_after: str | None = None,
        now: float,
        rand: float,
    ) -> Decision:
        """Decide after failed attempt number ``attempt`` (0 for the first).

        ``status``: the HTTP status, or None for a connection error or timeout.
        ``retry_after``: the raw Retry-After header value, if any. ``now``: unix seconds.
        ``rand``: a uniform random number in [0, 1) for the jitter.
        """
        if status is None:
            reason = NETWORK
        elif status >= 500:
            reason = SERVER_ERROR
        elif status == 429:
            reason = TOO_MANY_REQUESTS
            if not self.retry_on_http_429:
                return Decision(False, 0.0, reason)
        else:
            return Decision(False, 0.0, CLIENT_ERROR)
        asked = parse_retry_after(retry_after, now=now)
        if asked is not None:
            return Decision(True, min(asked, self.max_backoff), reason)
        return Decision(True, self.backoff(attempt, rand=rand), reason)

    def backoff(self, attempt: int, *, rand: float) -> float:
        """Exponential backoff with jitter: ``min_backoff * 2**attempt`` capped at
        ``max_backoff``, then scaled into [50%, 100%] of that by ``rand``."""
        base: float = min(self.max_backoff, self.min_backoff * 2.0 ** min(attempt, 62))
        return base * (0.5 + rand / 2)


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a Retry-After value: delay-seconds or an HTTP date.

    ``now`` is unix seconds. Returns None for a missing or unparsable value; a date in the past
    gives 0.
    """
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # the asctime form carries no zone: it is GMT (RFC 9110 5.6.7)
        when = when.replace(tzinfo=UTC)
    return max(0.0, float(when.timestamp()) - now)
