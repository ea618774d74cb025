"""Retry policy for sends to a destination (pure; time and randomness are passed in).

Source: RW 1.0 spec and Prometheus ``storage/remote`` — retry connection errors, timeouts and
5xx with exponential backoff; never retry other 4xx; retry 429 only when ``retry_on_http_429``.
A ``Retry-After`` answer (seconds or an HTTP date, RFC 9110 section 10.2.3) sets the delay,
capped at ``max_backoff``.

rwrouter's own rule (not in the spec, nor in Prometheus 2.x, which retries 5xx for ever): a
retry budget in seconds, measured from the batch's first attempt (``max_retry_duration`` for
network errors and 5xx, 0 = no bound; ``max_retry_duration_on_http_429`` for 429, 0 = no
bound). When the next retry would start after the budget the batch is given up
(:attr:`~rwrouter.reasons.DropReason.RETRY_BUDGET`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Literal

from rwrouter.reasons import DropReason, RetryReason


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a failed attempt: ``retry`` or give up; ``delay`` in seconds.

    ``reason``: ``network``, ``5xx``, ``429`` or ``4xx`` (the kind of failure,
    :class:`RetryReason`), or ``retry_budget`` (:class:`~rwrouter.reasons.DropReason`) when a
    retryable failure is given up because the budget is spent.
    """

    retry: bool
    delay: float
    reason: RetryReason | Literal[DropReason.RETRY_BUDGET]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry settings, all in seconds.

    ``min_backoff``/``max_backoff``: Prometheus ``queue_config`` (defaults 30 ms .. 5 s).
    ``retry_on_http_429``: Prometheus ``queue_config`` (default off).
    ``max_retry_duration``: budget for network errors and 5xx (0 = no bound, as Prometheus).
    ``max_retry_duration_on_http_429``: budget for 429 when it is retried (default 3600; 0 = no
    bound). Budgets count from the batch's first attempt (rwrouter's own rule).
    ``max_retries``: at most this many retries of one request (0 = no bound; ``rwrouter
    rejected replay`` uses a few).
    """

    min_backoff: float = 0.03
    max_backoff: float = 5.0
    retry_on_http_429: bool = False
    max_retry_duration: float = 0.0
    max_retry_duration_on_http_429: float = 3600.0
    max_retries: int = 0

    def decide(
        self,
        status: int | None,
        *,
        attempt: int,
        retry_after: str | None = None,
        now: float,
        rand: float,
        elapsed: float,
    ) -> Decision:
        """Decide after failed attempt number ``attempt`` (0 for the first).

        ``status``: the HTTP status, or None for a connection error or timeout.
        ``retry_after``: the raw Retry-After header value, if any. ``now``: unix seconds (for a
        Retry-After date). ``rand``: a uniform random number in [0, 1) for the jitter.
        ``elapsed``: seconds since the batch's first attempt started. A retry whose start
        (``elapsed + delay``) would fall after the budget is not made: ``retry`` False, reason
        ``retry_budget``.
        """
        if status is None:
            reason, budget = RetryReason.NETWORK, self.max_retry_duration
        elif status >= 500:
            reason, budget = RetryReason.SERVER_ERROR, self.max_retry_duration
        elif status == 429:
            reason, budget = RetryReason.TOO_MANY_REQUESTS, self.max_retry_duration_on_http_429
            if not self.retry_on_http_429:
                return Decision(False, 0.0, reason)
        else:
            return Decision(False, 0.0, RetryReason.CLIENT_ERROR)
        asked = parse_retry_after(retry_after, now=now)
        if asked is not None:
            delay = min(asked, self.max_backoff)
        else:
            delay = self.backoff(attempt, rand=rand)
        if budget > 0 and elapsed + delay > budget:
            return Decision(False, 0.0, DropReason.RETRY_BUDGET)
        if self.max_retries and attempt >= self.max_retries:
            return Decision(False, 0.0, DropReason.RETRY_BUDGET)
        return Decision(True, delay, reason)

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
