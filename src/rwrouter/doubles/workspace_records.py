"""The workspace double's small value types: its settable clock, scripted faults, the record of
each request it saw (the last ones kept: :class:`RecordRing`), the AWS-style error answer and
the spec's check number of each reason (:mod:`rwrouter.doubles.workspace` re-exports them)."""

from __future__ import annotations

import collections
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import web

from rwrouter.doubles.sigv4_verify import Rejection

__all__ = [
    "CHECK_OF_REASON",
    "MAX_RECORDS",
    "MISSING_AUTH",
    "Fault",
    "ManualClock",
    "RecordRing",
    "RequestRecord",
    "aws_error",
    "record_of",
    "retry_after",
]

#: Check 1 (unknown path or method): what API Gateway answers for a route it does not have.
MISSING_AUTH = Rejection(
    1, 403, "missing_auth", "Missing Authentication Token", "MissingAuthenticationTokenException"
)


class ManualClock:
    """A settable clock for the double: ``clock()`` returns ``now`` (unix seconds)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class Fault:
    """A scripted answer given instead of the normal processing (nothing is stored):
    ``status`` with ``body`` and ``headers`` (e.g. ``{"Retry-After": "2"}``), after ``delay_s``
    seconds; ``hang=True`` never answers and drops the connection when the double stops."""

    status: int = 503
    body: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    hang: bool = False


@dataclass(frozen=True)
class RequestRecord:
    """One request as the double saw it. Header names are lower-case, in arrival order."""

    method: str
    path: str
    status: int
    reason: str  # "" when accepted, "fault" for a scripted answer, else the rejection reason
    message: str
    header_names: tuple[str, ...]
    signed_headers: tuple[str, ...]
    access_key: str | None
    check: int | None  # the spec's number of the failing check, None when accepted
    received_at: float = 0.0  # time.monotonic() when the request arrived
    counted: int = 0  # samples+exemplars+metadata the rate limiter took (Outcome.counted)

    def summary(self) -> dict[str, object]:
        """The record as ``/_double/state`` shows the last request (JSON-able)."""
        return {
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "signed_headers": list(self.signed_headers),
            "header_names": list(self.header_names),
        }


#: Request records a double keeps (the last ones); its counters count every request.
MAX_RECORDS = 10_000


class RecordRing(collections.deque[RequestRecord]):
    """The last ``maxlen`` records (a deque: iterate, ``[-1]``, ``len``), and ``total``: how
    many were ever appended. Bounds the double's memory over a long run (``rwrouter
    demo``) while tests read the recent requests."""

    def __init__(self, maxlen: int = MAX_RECORDS) -> None:
        super().__init__(maxlen=maxlen)
        self.total = 0

    def append(self, record: RequestRecord) -> None:
        self.total += 1
        super().append(record)


CHECK_OF_REASON = {
    "invalid_series": 12,
    "out_of_order": 13,
    "duplicate_sample": 13,
    "too_new": 13,
    "out_of_bounds": 13,
    "rate_limited": 14,
    "series_limit": 15,
}


def aws_error(status: int, error_type: str, message: str) -> web.Response:
    """An AWS-style error answer: ``{"message": ...}`` with ``x-amzn-ErrorType`` and a
    request id."""
    headers = {"x-amzn-ErrorType": error_type, "x-amzn-RequestId": str(uuid.uuid4())}
    return web.json_response({"message": message}, status=status, headers=headers)


def retry_after(reason: str, after: float | None) -> dict[str, str]:
    """``Retry-After`` on the rate limiter's 429 (reason ``rate_limited``) when ``after``
    (``Limits.ingestion_retry_after``, seconds) is set: delay-seconds, rounded up (RFC 9110
    10.2.3 allows integers only)."""
    if reason != "rate_limited" or after is None:
        return {}
    return {"Retry-After": str(math.ceil(after))}


def record_of(
    request: web.Request,
    status: int,
    reason: str,
    message: str,
    signed: tuple[str, ...],
    access_key: str | None,
    check: int | None,
    counted: int = 0,
) -> RequestRecord:
    """The record of ``request`` as answered, received now (``time.monotonic()``)."""
    names = tuple(name.lower() for name in request.headers)
    return RequestRecord(
        request.method,
        request.path,
        status,
        reason,
        message,
        names,
        signed,
        access_key,
        check,
        time.monotonic(),
        counted,
    )
