"""Delivery of one batch (rwrouter.send.delivery): retry budget, credential refresh on
401/403, 413 splitting, the ``on_rejected`` hook, and the counters they feed.

Rules: RW 1.0 spec and Prometheus ``storage/remote`` (retry network errors and 5xx, 429 only
when asked, never other 4xx); rwrouter's own retry budget (seconds from the batch's first
attempt), one credential refresh per request (managed-workspace.md "Answers you will see") and
413 splitting. Fakes only, no sockets: the clock moves only when the deliverer sleeps.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest

from rwrouter.auth.credentials import CredentialsSource, FrozenCredentials
from rwrouter.auth.schemes import Authenticator, HeaderAuth, NoAuth, SigV4
from rwrouter.errors import CredentialsError, TransportError
from rwrouter.metrics import Metrics
from rwrouter.send.attempts import Attempts
from rwrouter.send.delivery import SPLIT_BUDGET, Deliverer
from rwrouter.send.refusals import Item, Kind, Refusal, RejectHook
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.stopping import HandedOver
from rwrouter.send.transport import Answer
from rwrouter.wire import decompress
from tests.support.clients import FakeClient

NAME = "dest"
START = 1_000.0  # the fake monotonic clock at the batch's first attempt, seconds
WALL = 1_700_000_000.0  # the fake unix clock, seconds
FAST = RetryPolicy(min_backoff=1.0, max_backoff=4.0)  # rand 0: delays 0.5, 1, 2, 2, 2, ...

Reply = int | None  # an HTTP status, or None for "no answer" (TransportError)


def item(i: int, *, size: int = 0) -> Item:
    """A fake framed series: the marker ``<iii>`` padded to ``size`` bytes; ``i + 1`` samples
    so that sums tell which items were delivered."""
    marker = b"<%03d>" % i
    return (marker + b"." * max(0, size - len(marker)), i + 1)


def items_in(raw: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb"<(\d{3})>", raw)]


class Clock:
    """Monotonic clock that advances only by the deliverer's sleeps."""

    def __init__(self) -> None:
        self.now = START
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay


class FakeTransport(FakeClient):
    """Answers each POST with ``reply(raw_body, attempt_number)``; records what was sent."""

    def __init__(
        self, reply: Callable[[bytes, int], Reply], clock: Clock, headers: Mapping[str, str]
    ) -> None:
        super().__init__()
        self._reply = reply
        self._clock = clock
        self._answer_headers = headers
        self.sent: list[list[int]] = []  # the items of every attempt, in order
        self.started: list[float] = []  # clock seconds at every attempt
        self.headers: list[dict[str, str]] = []

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        raw = decompress(body, max_decoded_bytes=1 << 24)
        self.sent.append(items_in(raw))
        self.started.append(self._clock())
        self.headers.append(dict(headers))
        status = self._reply(raw, len(self.sent) - 1)
        if status is None:
            raise TransportError("connection reset by peer")
        return Answer(status, self._answer_headers, b"answer %d" % status)


def script(*replies: Reply) -> Callable[[bytes, int], Reply]:
    """Scripted replies by attempt number, then 200 for good."""
    return lambda _raw, n: replies[n] if n < len(replies) else 200


def forever(reply: Reply) -> Callable[[bytes, int], Reply]:
    return lambda _raw, _n: reply


class CountingSource(CredentialsSource):
    """Static keys that change on every forced refresh (``AKID0`` -> ``AKID1`` ...)."""

    def __init__(self, *, fail_refresh: bool = False) -> None:
        super().__init__(
            credentials=None,  # frozen() and force_refresh() are replaced
            region="us-east-1",
            service="aps",
            method="static",
        )
        self.refreshes = 0
        self._fail = fail_refresh

    async def frozen(self) -> FrozenCredentials:
        return FrozenCredentials(f"AKID{self.refreshes}", "SECRET")

    async def force_refresh(self) -> FrozenCredentials:
        if self._fail:
            raise CredentialsError("refreshing static credentials failed: no network")
        self.refreshes += 1
        return await self.frozen()


@dataclass
class Rejected:
    """Records the ``on_rejected`` calls."""

    calls: list[tuple[list[int], str, Refusal]] = field(default_factory=list)
    tenants: list[str | None] = field(default_factory=list)

    def __call__(self, items: list[Item], kind: str, refusal: Refusal, tenant: str | None) -> None:
        self.tenants.append(tenant)
        self.calls.append(([int(frame[1:4]) for frame, _ in items], kind, refusal))


@dataclass
class Rig:
    deliverer: Deliverer
    transport: FakeTransport
    clock: Clock
    metrics: Metrics
    rejected: Rejected

    def value(self, metric: str, **labels: str) -> float:
        got = self.metrics.registry.get_sample_value(metric, {"destination": NAME, **labels})
        return got or 0.0

    def retries(self) -> dict[str, float]:
        return {
            s.labels["reason"]: s.value
            for m in self.metrics.registry.collect()
            if m.name == "rwrouter_retries"
            for s in m.samples
            if s.name == "rwrouter_retries_total"
        }


def rig(
    reply: Callable[[bytes, int], Reply],
    *,
    policy: RetryPolicy = FAST,
    auth: Authenticator | None = None,
    on_rejected: RejectHook | None = None,
    record: bool = True,
    answer_headers: Mapping[str, str] | None = None,
    clock: Clock | None = None,
    transport: FakeTransport | None = None,
    abandon: Callable[[], bool] | None = None,
) -> Rig:
    """A deliverer on fakes; ``on_rejected`` replaces the recording hook, ``record=False``
    leaves the hook out; ``transport`` (on ``clock``) replaces the one answering ``reply``."""
    clock = clock or Clock()
    transport = transport or FakeTransport(reply, clock, answer_headers or {})
    metrics = Metrics()
    rejected = Rejected()
    hook = on_rejected or (rejected if record else None)
    attempts = Attempts(
        name=NAME,
        transport=transport,
        auth=auth if auth is not None else NoAuth(),
        policy=policy,
        headers={"X-Team": "gpu"},
        metrics=metrics.send,
        abandon=abandon,
        clock=clock,
        wall_clock=lambda: WALL,
        rand=lambda: 0.0,
        sleep=clock.sleep,
    )
    deliverer = Deliverer(attempts=attempts, on_rejected=hook)
    return Rig(deliverer, transport, clock, metrics, rejected)


# ---------------------------------------------------------------------------------------------
# Retry budget: no retry starts after max_retry_duration (network, 5xx) or
# max_retry_duration_on_http_429 (429) seconds from the batch's first attempt.

B10 = RetryPolicy(min_backoff=1.0, max_backoff=4.0, max_retry_duration=10.0)
B10_429 = RetryPolicy(
    min_backoff=1.0,
    max_backoff=4.0,
    retry_on_http_429=True,
    max_retry_duration=1.0,
    max_retry_duration_on_http_429=10.0,
)
UNLIMITED = RetryPolicy(min_backoff=1.0, max_backoff=4.0, max_retry_duration=0.0)
# With rand 0 attempts start at +0, 0.5, 1.5, 3.5, 5.5, 7.5, 9.5; the next would be 11.5 > 10.
SEVEN = [0.0, 0.5, 1.5, 3.5, 5.5, 7.5, 9.5]

# (id, policy, reply, attempt starts (seconds after START), delivered, rejected reason or None,
#  retries by label)
BUDGET_CASES = [
    ("5xx_budget_spent", B10, forever(503), SEVEN, 0, "retry_budget", {"503": 6}),
    (
        "5xx_last_retry_starts_exactly_at_budget",
        replace(B10, max_retry_duration=9.5),
        forever(503),
        SEVEN,
        0,
        "retry_budget",
        {"503": 6},
    ),
    (
        "5xx_next_retry_just_past_budget",
        replace(B10, max_retry_duration=11.4),
        forever(503),
        SEVEN,
        0,
        "retry_budget",
        {"503": 6},
    ),
    ("network_budget_spent", B10, forever(None), SEVEN, 0, "retry_budget", {"network": 6}),
    ("429_uses_its_own_budget", B10_429, forever(429), SEVEN, 0, "retry_budget", {"429": 6}),
    (
        "5xx_then_200_within_budget",
        B10,
        script(503, 500, 503),
        SEVEN[:4],
        6,
        None,
        {"503": 2, "500": 1},
    ),
    (
        "zero_is_unlimited",
        UNLIMITED,
        script(*[503] * 40),
        [*SEVEN, *(11.5 + 2 * k for k in range(34))],
        6,
        None,
        {"503": 40},
    ),
    ("429_not_retried_when_off", B10, forever(429), [0.0], 0, "4xx", {}),
]


@pytest.mark.parametrize(
    ("policy", "reply", "starts", "delivered", "reason", "retries"),
    [c[1:] for c in BUDGET_CASES],
    ids=[c[0] for c in BUDGET_CASES],
)
async def test_retry_budget(
    policy: RetryPolicy,
    reply: Callable[[bytes, int], Reply],
    starts: list[float],
    delivered: int,
    reason: str | None,
    retries: dict[str, float],
) -> None:
    r = rig(reply, policy=policy)
    batch = [item(0), item(1), item(2)]  # 1 + 2 + 3 samples
    assert await r.deliverer.deliver(batch, Kind.SAMPLES) == delivered
    assert r.transport.started == pytest.approx([START + s for s in starts])
    assert r.retries() == retries
    if reason is None:
        assert r.rejected.calls == []
        return
    ((sent, kind, refusal),) = r.rejected.calls  # exactly once, with the whole batch
    assert (sent, kind, refusal.reason) == ([0, 1, 2], "samples", reason)
    assert r.value("rwrouter_samples_dropped_total", reason=reason) == 6


async def test_budget_counts_from_the_batch_first_attempt_across_split_parts() -> None:
    """5xx at +0 .. +8 s, then a 400 at +10 s splits the batch: each half's first 503 would
    need a retry after the batch's 10 s budget, so both halves are given up at once."""
    policy = RetryPolicy(min_backoff=4.0, max_backoff=4.0, max_retry_duration=10.0)  # 2 s
    r = rig(lambda _raw, n: 400 if n == 5 else 503, policy=policy)
    assert await r.deliverer.deliver([item(i) for i in range(4)], Kind.SAMPLES) == 0
    assert r.transport.started == [START + s for s in (0, 2, 4, 6, 8, 10, 10, 10)]
    assert r.transport.sent[5:] == [[0, 1, 2, 3], [0, 1], [2, 3]]
    assert [(s, ref.reason, ref.status) for s, _, ref in r.rejected.calls] == [
        ([0, 1], "retry_budget", 503),
        ([2, 3], "retry_budget", 503),
    ]
    assert r.value("rwrouter_samples_dropped_total", reason="retry_budget") == 10


async def test_retry_after_counts_against_the_budget() -> None:
    policy = RetryPolicy(min_backoff=1.0, max_backoff=30.0, max_retry_duration=10.0)
    r = rig(forever(503), policy=policy, answer_headers={"Retry-After": "6"})
    assert await r.deliverer.deliver([item(0)], Kind.SAMPLES) == 0
    assert r.clock.sleeps == [6.0]  # attempts at +0 and +6; +12 would be after 10 s
    assert [ref.reason for _, _, ref in r.rejected.calls] == ["retry_budget"]


# ---------------------------------------------------------------------------------------------
# 401/403: SigV4 refreshes its credentials once and retries once; other schemes do not.

# (id, auth kind, replies, attempts, delivered, refreshes, rejected status or None, retries)
AUTH_CASES = [
    ("sigv4_403_refresh_then_200", "sigv4", (403,), 2, 6, 1, None, {"credential_refresh": 1}),
    ("sigv4_401_refresh_then_200", "sigv4", (401,), 2, 6, 1, None, {"credential_refresh": 1}),
    ("sigv4_403_twice_is_permanent", "sigv4", (403, 403), 2, 0, 1, 403, {"credential_refresh": 1}),
    (
        "sigv4_401_then_403_is_permanent",
        "sigv4",
        (401, 403),
        2,
        0,
        1,
        403,
        {"credential_refresh": 1},
    ),
    (
        "sigv4_second_403_after_a_5xx_is_permanent",
        "sigv4",
        (403, 503, 403),
        3,
        0,
        1,
        403,
        {"credential_refresh": 1, "503": 1},
    ),
    ("sigv4_5xx_does_not_refresh", "sigv4", (500,), 2, 6, 0, None, {"500": 1}),
    ("sigv4_404_does_not_refresh", "sigv4", (404,), 1, 0, 0, 404, {}),
    ("sigv4_refresh_failure_is_permanent", "sigv4_failing", (403,), 1, 0, 0, 403, {}),
    ("no_auth_401_permanent_at_once", "none", (401,), 1, 0, 0, 401, {}),
    ("basic_auth_403_permanent_at_once", "basic", (403,), 1, 0, 0, 403, {}),
    ("bearer_401_permanent_at_once", "bearer", (401,), 1, 0, 0, 401, {}),
]


def make_auth(kind: str) -> tuple[Authenticator, CountingSource | None]:
    if kind.startswith("sigv4"):
        source = CountingSource(fail_refresh=kind == "sigv4_failing")
        return SigV4(source), source
    if kind == "basic":
        return HeaderAuth(scheme="Basic", secret="pw", secret_file=None, username="u"), None
    if kind == "bearer":
        return HeaderAuth(scheme="Bearer", secret="token", secret_file=None), None
    return NoAuth(), None


@pytest.mark.parametrize(
    ("kind", "replies", "attempts", "delivered", "refreshes", "status", "retries"),
    [c[1:] for c in AUTH_CASES],
    ids=[c[0] for c in AUTH_CASES],
)
async def test_auth_refusals(
    kind: str,
    replies: tuple[Reply, ...],
    attempts: int,
    delivered: int,
    refreshes: int,
    status: int | None,
    retries: dict[str, float],
) -> None:
    auth, source = make_auth(kind)
    r = rig(script(*replies), auth=auth)
    assert await r.deliverer.deliver([item(0), item(1), item(2)], Kind.SAMPLES) == delivered
    assert len(r.transport.sent) == attempts
    assert r.retries() == retries
    if source is not None:
        assert source.refreshes == refreshes
        keys = [re.search(r"Credential=(\w+)/", h["Authorization"]) for h in r.transport.headers]
        expected = ["AKID0"] + [f"AKID{min(refreshes, 1)}"] * (attempts - 1)
        assert [k.group(1) if k else None for k in keys] == expected
    if status is None:
        assert r.rejected.calls == []
    else:
        ((sent, _, refusal),) = r.rejected.calls
        assert (sent, refusal.status, refusal.reason) == ([0, 1, 2], status, "4xx")
        assert r.value("rwrouter_samples_dropped_total", reason="4xx") == 6


@pytest.mark.parametrize(
    ("status", "body", "refresh"),
    [
        (403, "The security token included in the request is expired", True),
        (403, "The request signature we calculated does not match", True),
        (403, "Signature expired: 20240101T000000Z is now earlier than ...", True),
        (401, "", True),
        (400, "out of order sample", False),
        (429, "Rate exceeded", False),
        (500, "", False),
    ],
    ids=[
        "403_expired_token",
        "403_signature_mismatch",
        "403_clock_skew",
        "401",
        "400",
        "429",
        "500",
    ],
)
async def test_sigv4_refresh_after(status: int, body: str, refresh: bool) -> None:
    source = CountingSource()
    assert await SigV4(source).refresh_after(status=status, body_text=body) is refresh
    assert source.refreshes == int(refresh)


# ---------------------------------------------------------------------------------------------
# 413: a batch of several items is split in halves; a single item refused with 413 is final.


def limit_413(max_bytes: int) -> Callable[[bytes, int], Reply]:
    return lambda raw, _n: 413 if len(raw) > max_bytes else 200


# (id, item sizes in bytes, destination limit in bytes, rejected items, attempts)
SPLIT_CASES = [
    ("one_huge_item_among_eight", [10, 10, 10, 10, 10, 5000, 10, 10], 1000, [5], 7),
    ("two_huge_items", [5000, 10, 10, 10, 10, 10, 10, 5000], 1000, [0, 7], 11),
    ("all_fit_once_halved", [300] * 8, 1000, [], 7),
    ("single_item_too_large", [5000], 1000, [0], 1),
]


@pytest.mark.parametrize(
    ("sizes", "limit", "rejected", "attempts"),
    [c[1:] for c in SPLIT_CASES],
    ids=[c[0] for c in SPLIT_CASES],
)
async def test_413_split_down_to_one_item(
    sizes: list[int],
    limit: int,
    rejected: list[int],
    attempts: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = rig(limit_413(limit))
    batch = [item(i, size=s) for i, s in enumerate(sizes)]
    with caplog.at_level(logging.ERROR, logger="rwrouter.sending"):
        delivered = await r.deliverer.deliver(batch, Kind.SAMPLES)
    lost = sum(i + 1 for i in rejected)
    assert delivered == sum(n for _, n in batch) - lost
    assert len(r.transport.sent) == attempts
    assert r.retries() == {}  # a 413 is never retried as such
    for i in rejected:  # each oversized item went alone exactly once
        assert r.transport.sent.count([i]) == 1
    assert [(sent, refusal.status, refusal.reason) for sent, _, refusal in r.rejected.calls] == [
        ([i], 413, "too_large") for i in rejected
    ]
    assert r.value("rwrouter_samples_dropped_total", reason="too_large") == lost
    lines = [m for m in caplog.messages if "series larger than the destination accepts" in m]
    assert len(lines) == len(rejected)


async def test_413_split_budget_spent_is_final_without_too_large() -> None:
    """Every request refused with 413: the split stops after SPLIT_BUDGET extra requests and
    what is left is dropped (reason 4xx for parts of several items, too_large for single
    items), each part handed to the hook once; the request count stays bounded."""
    r = rig(forever(413))
    batch = [item(i) for i in range(300)]
    assert await r.deliverer.deliver(batch, Kind.SAMPLES) == 0
    assert len(r.transport.sent) == 1 + SPLIT_BUDGET
    handed = sorted(i for sent, _, _ in r.rejected.calls for i in sent)
    assert handed == list(range(300))
    reasons = {ref.reason for sent, _, ref in r.rejected.calls if len(sent) > 1}
    assert reasons == {"4xx"}
    dropped = r.value("rwrouter_samples_dropped_total", reason="4xx") + r.value(
        "rwrouter_samples_dropped_total", reason="too_large"
    )
    assert dropped == sum(n for _, n in batch)


# ---------------------------------------------------------------------------------------------
# on_rejected: exactly the refused items, once per part, with the kind and the Refusal.


def poison(*bad: int, status: int = 400) -> Callable[[bytes, int], Reply]:
    return lambda raw, _n: status if set(items_in(raw)) & set(bad) else 200


# (id, kind, reply, batch size, rejected parts, reason, delivered)
HOOK_CASES = [
    ("400_one_poison_series", Kind.SAMPLES, poison(5), 8, [[5]], "4xx", 36 - 6),
    (
        "422_two_poison_series",
        Kind.SAMPLES,
        poison(1, 6, status=422),
        8,
        [[1], [6]],
        "4xx",
        36 - 2 - 7,
    ),
    (
        "409_whole_batch",
        Kind.SAMPLES,
        poison(0, 1, 2, 3, status=409),
        4,
        [[0], [1], [2], [3]],
        "4xx",
        0,
    ),
    ("400_metadata_entry", Kind.METADATA, poison(2), 4, [[2]], "4xx", 10 - 3),
    ("404_not_split", Kind.SAMPLES, poison(3, status=404), 8, [[0, 1, 2, 3, 4, 5, 6, 7]], "4xx", 0),
    ("302_not_split", Kind.SAMPLES, forever(302), 2, [[0, 1]], "3xx", 0),
    ("nothing_refused", Kind.SAMPLES, forever(204), 8, [], "", 36),
]


@pytest.mark.parametrize(
    ("kind", "reply", "size", "parts", "reason", "delivered"),
    [c[1:] for c in HOOK_CASES],
    ids=[c[0] for c in HOOK_CASES],
)
async def test_on_rejected_receives_exactly_the_refused_items(
    kind: Kind,
    reply: Callable[[bytes, int], Reply],
    size: int,
    parts: list[list[int]],
    reason: str,
    delivered: int,
) -> None:
    r = rig(reply)
    batch = [item(i) for i in range(size)]
    assert await r.deliverer.deliver(batch, kind) == delivered
    assert [sent for sent, _, _ in r.rejected.calls] == parts
    assert all(k == kind and ref.reason == reason for _, k, ref in r.rejected.calls)
    counter = (
        "rwrouter_samples_dropped_total"
        if kind == Kind.SAMPLES
        else ("rwrouter_metadata_dropped_total")
    )
    assert r.value(counter, reason=reason) == sum(i + 1 for p in parts for i in p)


async def test_on_rejected_gets_the_item_objects_unchanged() -> None:
    seen: list[list[Item]] = []
    r = rig(poison(1), on_rejected=lambda items, _kind, _refusal, _tenant: seen.append(items))
    batch = [item(0), item(1, size=64), item(2)]
    await r.deliverer.deliver(batch, Kind.SAMPLES)
    assert seen == [[batch[1]]]
    assert seen[0][0] is batch[1]


async def test_no_hook_still_counts() -> None:
    r = rig(poison(0), record=False)
    assert await r.deliverer.deliver([item(0), item(1)], Kind.SAMPLES) == 2
    assert r.value("rwrouter_samples_dropped_total", reason="4xx") == 1


async def test_a_failing_hook_is_logged_and_delivery_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[Sequence[Item]] = []

    def broken(items: list[Item], _kind: str, _refusal: Refusal, _tenant: str | None) -> None:
        calls.append(items)
        raise OSError("disk full")

    r = rig(poison(0, 3), on_rejected=broken)
    with caplog.at_level(logging.ERROR, logger="rwrouter.sending"):
        assert await r.deliverer.deliver([item(i) for i in range(4)], Kind.SAMPLES) == 2 + 3
    assert len(calls) == 2
    assert sum("on_rejected hook failed" in m for m in caplog.messages) == 2


# ---------------------------------------------------------------------------------------------
# Retries counter label values: the exact status, "network", "credential_refresh".

LABEL_CASES = [
    ("exact_5xx_statuses", FAST, (500, 503, 502, 503), {"500": 1, "503": 2, "502": 1}),
    (
        "network_and_429",
        RetryPolicy(min_backoff=1.0, retry_on_http_429=True),
        (None, 429, None),
        {"network": 2, "429": 1},
    ),
    ("no_retries_on_success", FAST, (), {}),
]


@pytest.mark.parametrize(
    ("policy", "replies", "expected"),
    [c[1:] for c in LABEL_CASES],
    ids=[c[0] for c in LABEL_CASES],
)
async def test_retries_label_values(
    policy: RetryPolicy, replies: tuple[Reply, ...], expected: dict[str, float]
) -> None:
    r = rig(script(*replies), policy=policy)
    assert await r.deliverer.deliver([item(0)], Kind.SAMPLES) == 1
    assert r.retries() == expected
    assert r.deliverer.take_failures() == sum(expected.values())
    assert r.deliverer.take_failures() == 0  # taken


# ---------------------------------------------------------------------------------------------
# Re-sent after a crash: a destination that already has some of the samples refuses the whole
# request "out of order" (Prometheus TSDB rolls back); re-sent batches are split down to single
# series, and a single series refused as out of order counts as already delivered.


class RollbackTransport(FakeTransport):
    """A TSDB-like destination: a request holding any item in ``stored`` is refused whole with
    400 "out of order sample"; otherwise every item is stored."""

    def __init__(self, stored: set[int], clock: Clock) -> None:
        super().__init__(forever(200), clock, {})
        self.stored = set(stored)
        self.accepted: list[int] = []

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        sent = items_in(decompress(body, max_decoded_bytes=1 << 24))
        self.sent.append(sent)
        if self.stored.intersection(sent):
            return Answer(400, {}, b"out of order sample")
        self.stored.update(sent)
        self.accepted += sent
        return Answer(200, {}, b"")


RESENT_CASES = [
    # id, items in the batch, items the destination already has
    ("first_third_already_stored", 90, set(range(30))),
    ("scattered", 128, {3, 17, 40, 41, 77, 100, 127}),
    ("all_already_stored", 16, set(range(16))),
    ("none_stored", 50, set()),
    ("one_item", 1, {0}),
]


@pytest.mark.parametrize(
    ("n", "stored"), [c[1:] for c in RESENT_CASES], ids=[c[0] for c in RESENT_CASES]
)
async def test_resent_batch_isolates_samples_the_destination_already_has(
    n: int, stored: set[int]
) -> None:
    clock = Clock()
    transport = RollbackTransport(stored, clock)
    r = rig(forever(200), clock=clock, transport=transport)
    batch = [item(i) for i in range(n)]
    delivered = await r.deliverer.deliver(batch, Kind.SAMPLES, resent=True)
    fresh = [i for i in range(n) if i not in stored]
    assert sorted(transport.accepted) == fresh  # every new sample once, none lost
    assert delivered == sum(i + 1 for i in fresh)
    assert r.value("rwrouter_samples_already_delivered_total") == sum(i + 1 for i in stored)
    assert r.rejected.calls == []  # nothing for the dead-letter store
    assert r.value("rwrouter_samples_dropped_total", reason="4xx") == 0


async def test_out_of_order_of_a_first_send_is_a_refusal_not_a_delivery() -> None:
    """Outside a re-send an out-of-order answer is the destination's word against the data:
    refused (bounded split), counted as 4xx and kept in the dead-letter store."""
    clock = Clock()
    transport = RollbackTransport({5}, clock)
    r = rig(forever(200), clock=clock, transport=transport)
    delivered = await r.deliverer.deliver([item(i) for i in range(8)], Kind.SAMPLES)
    assert delivered == sum(i + 1 for i in range(8) if i != 5)
    assert r.value("rwrouter_samples_already_delivered_total") == 0
    assert [sent for sent, _, _ in r.rejected.calls] == [[5]]


# ---------------------------------------------------------------------------------------------
# A handover (a reload replaced the destination) stops the retries of a batch: not done.

# id, the replies, attempts made before the delivery stops
HANDOVER_CASES = [
    ("network_error", forever(None), 1),
    ("5xx", forever(503), 1),
    ("after_two_attempts", script(503, 503, 503, 503), 2),
]


@pytest.mark.parametrize(
    ("reply", "attempts"), [c[1:] for c in HANDOVER_CASES], ids=[c[0] for c in HANDOVER_CASES]
)
async def test_a_handover_stops_the_retries(
    reply: Callable[[bytes, int], Reply], attempts: int
) -> None:
    r = rig(reply, abandon=lambda: len(r.transport.sent) >= attempts)
    with pytest.raises(HandedOver):
        await r.deliverer.deliver([item(i) for i in range(3)], Kind.SAMPLES)
    assert len(r.transport.sent) == attempts
    assert r.rejected.calls == []  # not refused: the successor sends it
    assert r.value("rwrouter_samples_dropped_total", reason="retry_budget") == 0
