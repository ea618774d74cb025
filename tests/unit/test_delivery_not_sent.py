"""A request the HTTP client cannot build (issue 14, item 6: CR/LF in a credential made aiohttp
raise ValueError on every attempt, for ever) is a failed attempt like a network error: retried
with backoff, given up after ``max_retry_duration`` (``retry_budget``), counted, handed to the
dead-letter hook; logged with its traceback once. Fakes only (tests/support/clients.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from rwrouter.auth.schemes import NoAuth
from rwrouter.metrics import Metrics
from rwrouter.reasons import DropReason
from rwrouter.send.attempts import Attempts
from rwrouter.send.delivery import Deliverer
from rwrouter.send.refusals import Item, Kind, Refusal
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.transport import Answer
from tests.support.clients import FakeClient

START = 1_000.0  # the fake monotonic clock at the first attempt, seconds
# rand 0: delays 0.5, 1, 2, 2, 2, 2 (half of 1, 2, 4, 4, ...) -> attempts at +0, 0.5, 1.5,
# 3.5, 5.5, 7.5, 9.5; the next (11.5) would start after the 10 s budget.
POLICY = RetryPolicy(min_backoff=1.0, max_backoff=4.0, max_retry_duration=10.0)
ATTEMPTS = [0.0, 0.5, 1.5, 3.5, 5.5, 7.5, 9.5]

# id, what the client raises: what aiohttp 3 raises for a header value with CR/LF, and a
# UnicodeEncodeError (a ValueError too) for a header it cannot encode.
ERRORS = [
    (
        "header_injection",
        ValueError("Newline or carriage return character detected in HTTP status message"),
    ),
    (
        "control_character",
        ValueError("Forbidden control character detected in headers."),
    ),
    ("unencodable_header", UnicodeEncodeError("latin-1", "\u2603", 0, 1, "not latin-1")),
]


class Clock:
    """Monotonic seconds that advance only by the deliverer's sleeps."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.now += delay


@pytest.mark.parametrize("error", [e[1] for e in ERRORS], ids=[e[0] for e in ERRORS])
async def test_an_unbuildable_request_is_given_up_after_max_retry_duration(
    error: ValueError, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    attempts: list[float] = []

    def raise_error(_body: bytes, _headers: Mapping[str, str]) -> Answer:
        attempts.append(clock.now - START)
        raise error

    rejected: list[tuple[list[Item], str, Refusal]] = []
    metrics = Metrics()
    requests = Attempts(
        name="d",
        transport=FakeClient(raise_error),
        auth=NoAuth(),
        policy=POLICY,
        metrics=metrics.send,
        clock=clock,
        rand=lambda: 0.0,
        sleep=clock.sleep,
    )
    deliverer = Deliverer(
        attempts=requests,
        on_rejected=lambda items, kind, refusal, _tenant: rejected.append((items, kind, refusal)),
    )
    items: list[Item] = [(b"frame-a", 2), (b"frame-b", 3)]
    with caplog.at_level(logging.WARNING, logger="rwrouter.sending"):
        delivered = await deliverer.deliver(items, Kind.SAMPLES)

    assert delivered == 0
    assert attempts == ATTEMPTS  # backoff, not a tight loop; none after the budget
    ((refused_items, kind, refusal),) = rejected  # dead-lettered whole, once
    assert (refused_items, kind) == (items, Kind.SAMPLES)
    assert (refusal.status, refusal.reason) == (None, DropReason.RETRY_BUDGET)
    assert type(error).__name__ in refusal.text
    registry = metrics.registry
    labels = {"destination": "d"}
    dropped = registry.get_sample_value(
        "rwrouter_samples_dropped_total", {**labels, "reason": "retry_budget"}
    )
    assert dropped == 5
    errors = registry.get_sample_value("rwrouter_sent_requests_total", {**labels, "code": "error"})
    assert errors == len(ATTEMPTS)
    retries = registry.get_sample_value("rwrouter_retries_total", {**labels, "reason": "network"})
    assert retries == len(ATTEMPTS) - 1
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1  # once per deliverer, not per attempt
    assert "could not be built" in tracebacks[0].getMessage()
