"""Retry policy (rwrouter.send.retry): RW 1.0 spec + Prometheus storage/remote semantics.

Retry network errors and 5xx with exponential backoff, never other 4xx, 429 only with
``retry_on_http_429``; Retry-After (seconds or HTTP date, RFC 9110 10.2.3) capped at max_backoff.
rwrouter's own retry budget: no retry that would start after ``max_retry_duration`` (network,
5xx; 0 = no bound) or ``max_retry_duration_on_http_429`` (429) seconds from the first attempt.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from rwrouter.config.model import QueueConfig
from rwrouter.reasons import DropReason, RetryReason
from rwrouter.send.retry import RetryPolicy, parse_retry_after

NETWORK, SERVER_ERROR = RetryReason.NETWORK, RetryReason.SERVER_ERROR
TOO_MANY_REQUESTS, CLIENT_ERROR = RetryReason.TOO_MANY_REQUESTS, RetryReason.CLIENT_ERROR
RETRY_BUDGET = DropReason.RETRY_BUDGET

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z
POLICY = RetryPolicy(min_backoff=0.03, max_backoff=5.0)
POLICY_429 = RetryPolicy(min_backoff=0.03, max_backoff=5.0, retry_on_http_429=True)


def http_date(unix: float) -> str:
    return format_datetime(datetime.fromtimestamp(unix, tz=UTC), usegmt=True)


# (id, policy, status, attempt, retry_after, retry, delay_low, delay_high, reason)
DECISIONS = [
    ("network", POLICY, None, 0, None, True, 0.015, 0.03, NETWORK),
    ("network_attempt_3", POLICY, None, 3, None, True, 0.12, 0.24, NETWORK),
    ("500", POLICY, 500, 0, None, True, 0.015, 0.03, SERVER_ERROR),
    ("502", POLICY, 502, 1, None, True, 0.03, 0.06, SERVER_ERROR),
    ("503", POLICY, 503, 0, None, True, 0.015, 0.03, SERVER_ERROR),
    ("503_retry_after_2", POLICY, 503, 0, "2", True, 2.0, 2.0, SERVER_ERROR),
    ("599", POLICY, 599, 0, None, True, 0.015, 0.03, SERVER_ERROR),
    ("429_not_retried_by_default", POLICY, 429, 0, None, False, 0.0, 0.0, TOO_MANY_REQUESTS),
    ("429_retry_after_ignored_when_off", POLICY, 429, 0, "1", False, 0.0, 0.0, TOO_MANY_REQUESTS),
    ("429_retried_when_on", POLICY_429, 429, 0, None, True, 0.015, 0.03, TOO_MANY_REQUESTS),
    ("429_retry_after_when_on", POLICY_429, 429, 2, "3", True, 3.0, 3.0, TOO_MANY_REQUESTS),
    ("400", POLICY, 400, 0, None, False, 0.0, 0.0, CLIENT_ERROR),
    ("400_with_retry_after", POLICY, 400, 0, "1", False, 0.0, 0.0, CLIENT_ERROR),
    ("401", POLICY_429, 401, 0, None, False, 0.0, 0.0, CLIENT_ERROR),
    ("403", POLICY, 403, 0, None, False, 0.0, 0.0, CLIENT_ERROR),
    ("404", POLICY, 404, 0, None, False, 0.0, 0.0, CLIENT_ERROR),
    ("409", POLICY, 409, 0, None, False, 0.0, 0.0, CLIENT_ERROR),
    ("413", POLICY_429, 413, 0, None, False, 0.0, 0.0, CLIENT_ERROR),
    ("retry_after_capped", POLICY, 503, 0, "3600", True, 5.0, 5.0, SERVER_ERROR),
    ("retry_after_zero", POLICY, 503, 0, "0", True, 0.0, 0.0, SERVER_ERROR),
    ("retry_after_http_date", POLICY, 503, 0, http_date(NOW + 3), True, 3.0, 3.0, SERVER_ERROR),
    ("retry_after_past_date", POLICY, 503, 0, http_date(NOW - 60), True, 0.0, 0.0, SERVER_ERROR),
    (
        "retry_after_far_date_capped",
        POLICY,
        503,
        0,
        http_date(NOW + 86400),
        True,
        5.0,
        5.0,
        SERVER_ERROR,
    ),
    ("retry_after_garbage_falls_back", POLICY, 503, 2, "soon", True, 0.06, 0.12, SERVER_ERROR),
    ("retry_after_negative_falls_back", POLICY, 500, 0, "-5", True, 0.015, 0.03, SERVER_ERROR),
    ("retry_after_fraction_falls_back", POLICY, 500, 0, "1.5", True, 0.015, 0.03, SERVER_ERROR),
    ("retry_after_empty_falls_back", POLICY, 500, 0, "", True, 0.015, 0.03, SERVER_ERROR),
]


@pytest.mark.parametrize(
    ("policy", "status", "attempt", "retry_after", "retry", "low", "high", "reason"),
    [c[1:] for c in DECISIONS],
    ids=[c[0] for c in DECISIONS],
)
@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999], ids=["rand0", "rand_half", "rand_max"])
def test_decide(
    policy: RetryPolicy,
    status: int | None,
    attempt: int,
    retry_after: str | None,
    retry: bool,
    low: float,
    high: float,
    reason: str,
    rand: float,
) -> None:
    decision = policy.decide(
        status, attempt=attempt, retry_after=retry_after, now=NOW, rand=rand, elapsed=0.0
    )
    assert decision.retry is retry
    assert decision.reason == reason
    assert low - 1e-9 <= decision.delay <= high + 1e-9


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("2", 2.0),
        (" 7 ", 7.0),
        ("120", 120.0),
        (http_date(NOW + 10), 10.0),
        ("Tue, 14 Nov 2023 22:13:30 GMT", 10.0),  # IMF-fixdate
        ("Tuesday, 14-Nov-23 22:13:30 GMT", 10.0),  # obsolete RFC 850 form
        (http_date(NOW - 1), 0.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("garbage", None),
        ("1e3", None),
        ("0x10", None),
        ("-1", None),
        ("Tue, 14 Nov 99999 22:13:30 GMT", None),
        ("Tue, 14 Nov 2023 25:13:30 GMT", None),
    ],
    ids=[
        "missing",
        "empty",
        "seconds",
        "seconds_with_spaces",
        "seconds_large",
        "http_date",
        "imf_fixdate_literal",
        "rfc850_date",
        "past_date",
        "epoch",
        "garbage",
        "exponent",
        "hex",
        "negative",
        "year_out_of_range",
        "hour_out_of_range",
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    got = parse_retry_after(value, now=NOW)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize("value", ["²", "1²", "³"], ids=["superscript_two", "mixed", "cube"])
def test_non_ascii_digits_fall_back_to_backoff(value: str) -> None:
    decision = POLICY.decide(503, attempt=0, retry_after=value, now=NOW, rand=0.0, elapsed=0.0)
    assert decision.retry and decision.delay == pytest.approx(0.015)


def test_retry_after_asctime_date() -> None:
    assert parse_retry_after("Tue Nov 14 22:13:30 2023", now=NOW) == pytest.approx(10.0)


# ---------------------------------------------------------------------------------------------
# Backoff


@pytest.mark.parametrize(
    ("attempt", "rand", "expected"),
    [
        (0, 0.0, 0.015),
        (0, 0.999, 0.03 * 0.9995),
        (1, 0.0, 0.03),
        (2, 0.0, 0.06),
        (4, 0.0, 0.24),
        (4, 0.999, 0.48 * 0.9995),
        (7, 0.0, 1.92),
        (8, 0.0, 2.5),  # 0.03 * 256 = 7.68 -> capped at 5.0
        (8, 0.999, 5.0 * 0.9995),
        (62, 0.999, 5.0 * 0.9995),
        (63, 0.0, 2.5),
        (10_000, 0.0, 2.5),
        (10**18, 0.999, 5.0 * 0.9995),
    ],
    ids=[
        "first_rand0",
        "first_rand_max",
        "second",
        "third",
        "fifth",
        "fifth_rand_max",
        "eighth_below_cap",
        "ninth_capped",
        "ninth_capped_rand_max",
        "attempt_62",
        "attempt_63",
        "attempt_10k",
        "attempt_1e18",
    ],
)
def test_backoff(attempt: int, rand: float, expected: float) -> None:
    got = POLICY.backoff(attempt, rand=rand)
    assert got == pytest.approx(expected)
    assert math.isfinite(got)


def test_backoff_grows_then_caps_and_jitter_bounds() -> None:
    policy = RetryPolicy(min_backoff=0.1, max_backoff=3.0)
    previous = 0.0
    for attempt in range(200):
        low = policy.backoff(attempt, rand=0.0)
        high = policy.backoff(attempt, rand=0.999999)
        base = min(3.0, 0.1 * 2**attempt)
        assert low == pytest.approx(base / 2)
        assert base / 2 <= high < base
        assert low >= previous  # never shrinks
        previous = low
    assert previous == pytest.approx(1.5)


def test_decide_huge_attempt_does_not_overflow() -> None:
    decision = POLICY.decide(None, attempt=2**80, now=NOW, rand=0.5, elapsed=0.0)
    assert decision.retry and decision.delay == pytest.approx(5.0 * 0.75)


# ---------------------------------------------------------------------------------------------
# Retry budget (max_retry_duration, max_retry_duration_on_http_429), seconds from the first
# attempt: a retry that would start after the budget is not made.

BUDGET_60 = RetryPolicy(min_backoff=1.0, max_backoff=8.0, max_retry_duration=60.0)
BUDGET_429 = RetryPolicy(
    min_backoff=1.0,
    max_backoff=8.0,
    retry_on_http_429=True,
    max_retry_duration=10.0,
    max_retry_duration_on_http_429=100.0,
)
UNBOUNDED = RetryPolicy(
    min_backoff=1.0,
    max_backoff=8.0,
    retry_on_http_429=True,
    max_retry_duration=0.0,
    max_retry_duration_on_http_429=0.0,
)

# (id, policy, status, attempt, retry_after, elapsed, retry, delay, reason); rand is 0, so the
# backoff of attempt n is min(8, 2**n) / 2.
BUDGETS = [
    ("5xx_within_budget", BUDGET_60, 503, 0, None, 10.0, True, 0.5, SERVER_ERROR),
    ("5xx_retry_ends_exactly_at_budget", BUDGET_60, 500, 3, None, 56.0, True, 4.0, SERVER_ERROR),
    ("5xx_retry_would_start_after_budget", BUDGET_60, 500, 3, None, 56.5, False, 0.0, RETRY_BUDGET),
    ("5xx_budget_already_spent", BUDGET_60, 502, 9, None, 61.0, False, 0.0, RETRY_BUDGET),
    ("network_within_budget", BUDGET_60, None, 1, None, 58.0, True, 1.0, NETWORK),
    ("network_budget_exhausted", BUDGET_60, None, 1, None, 59.5, False, 0.0, RETRY_BUDGET),
    ("retry_after_counts_against_budget", BUDGET_60, 503, 0, "5", 56.0, False, 0.0, RETRY_BUDGET),
    (
        "retry_after_capped_before_budget_check",
        BUDGET_60,
        503,
        0,
        "3600",
        50.0,
        True,
        8.0,
        SERVER_ERROR,
    ),
    (
        "4xx_is_client_error_even_over_budget",
        BUDGET_60,
        400,
        0,
        None,
        100.0,
        False,
        0.0,
        CLIENT_ERROR,
    ),
    ("zero_is_unlimited_for_5xx", UNBOUNDED, 503, 3, None, 1e9, True, 4.0, SERVER_ERROR),
    ("zero_is_unlimited_for_network", UNBOUNDED, None, 0, None, 1e9, True, 0.5, NETWORK),
    ("zero_is_unlimited_for_429", UNBOUNDED, 429, 0, None, 1e9, True, 0.5, TOO_MANY_REQUESTS),
    ("429_has_its_own_longer_budget", BUDGET_429, 429, 4, None, 50.0, True, 4.0, TOO_MANY_REQUESTS),
    ("429_budget_exhausted", BUDGET_429, 429, 4, None, 96.5, False, 0.0, RETRY_BUDGET),
    ("429_retry_after_over_its_budget", BUDGET_429, 429, 0, "8", 93.0, False, 0.0, RETRY_BUDGET),
    ("5xx_keeps_its_shorter_budget", BUDGET_429, 503, 0, None, 50.0, False, 0.0, RETRY_BUDGET),
    (
        "429_not_retried_when_off_whatever_the_budget",
        BUDGET_60,
        429,
        0,
        None,
        0.0,
        False,
        0.0,
        TOO_MANY_REQUESTS,
    ),
    (
        "default_429_budget_is_an_hour",
        RetryPolicy(retry_on_http_429=True),
        429,
        0,
        "5",
        3596.0,
        False,
        0.0,
        RETRY_BUDGET,
    ),
    (
        "default_5xx_budget_is_unlimited",
        RetryPolicy(),
        500,
        0,
        None,
        86400.0 * 365,
        True,
        0.015,
        SERVER_ERROR,
    ),
]


@pytest.mark.parametrize(
    ("policy", "status", "attempt", "retry_after", "elapsed", "retry", "delay", "reason"),
    [c[1:] for c in BUDGETS],
    ids=[c[0] for c in BUDGETS],
)
def test_retry_budget(
    policy: RetryPolicy,
    status: int | None,
    attempt: int,
    retry_after: str | None,
    elapsed: float,
    retry: bool,
    delay: float,
    reason: str,
) -> None:
    decision = policy.decide(
        status, attempt=attempt, retry_after=retry_after, now=NOW, rand=0.0, elapsed=elapsed
    )
    assert (decision.retry, decision.reason) == (retry, reason)
    assert decision.delay == pytest.approx(delay)


def test_policy_defaults_match_the_config_defaults() -> None:
    """The policy's defaults are the documented queue_config defaults (seconds)."""
    q = QueueConfig()
    policy = RetryPolicy()
    assert (policy.max_retry_duration, policy.max_retry_duration_on_http_429) == (0.0, 3600.0)
    assert (policy.max_retry_duration, policy.max_retry_duration_on_http_429) == (
        q.max_retry_duration,
        q.max_retry_duration_on_http_429,
    )


@pytest.mark.parametrize(
    ("max_retries", "attempt", "retry"),
    [(0, 50, True), (3, 2, True), (3, 3, False), (1, 0, True), (1, 1, False)],
    ids=["zero_is_unlimited", "under", "reached", "one_allowed", "one_spent"],
)
def test_max_retries(max_retries: int, attempt: int, retry: bool) -> None:
    policy = RetryPolicy(max_retries=max_retries)
    decision = policy.decide(503, attempt=attempt, now=0.0, rand=0.0, elapsed=0.0)
    assert decision.retry is retry
    if not retry:
        assert decision.reason == "retry_budget"
