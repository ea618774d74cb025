"""Pacing to an ingestion quota (``rwrouter.send.pacing``): the token bucket, AIMD after a 429,
the workers' shares, and the configuration keys. Time is passed in: nothing sleeps."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.config import parse_config
from rwrouter.config.describe import describe_config
from rwrouter.send.pacing import DECREASE, FLOOR, HOLD, INCREASE, Pacing, worker_share
from rwrouter.server.workers import WorkerSpec, worker_config

RATE, BURST = 500.0, 1000.0


def waits(pacing: Pacing, asks: Sequence[tuple[float, int]]) -> list[float]:
    """The wait of each (time, samples) request, in order."""
    return [round(pacing.reserve(n, now=t).wait, 6) for t, n in asks]


@pytest.mark.parametrize(
    ("asks", "expected"),
    [
        pytest.param([(0.0, 1000)], [0.0], id="a full bucket lets a burst go at once"),
        pytest.param([(0.0, 1000), (0.0, 500)], [0.0, 1.0], id="the next waits for its tokens"),
        pytest.param(
            [(0.0, 1000), (0.0, 500), (0.0, 500)],
            [0.0, 1.0, 2.0],
            id="requests are served in the order they ask",
        ),
        pytest.param([(0.0, 1000), (1.0, 500)], [0.0, 0.0], id="tokens refill at the rate"),
        pytest.param(
            [(0.0, 1000), (60.0, 1000), (60.0, 1)],
            [0.0, 0.0, 0.002],
            id="a long idle refills up to the burst only",
        ),
        pytest.param(
            [(0.0, 3000), (0.0, 500)],
            [0.0, 5.0],
            id="larger than the burst: goes from a full bucket, the debt is paid first",
        ),
        pytest.param(
            [(0.0, 500), (0.0, 3000)],
            [0.0, 1.0],
            id="larger than the burst: waits for a full bucket",
        ),
        pytest.param([(0.0, 0)], [0.0], id="nothing to send never waits"),
    ],
)
def test_token_bucket_waits(asks: list[tuple[float, int]], expected: list[float]) -> None:
    assert waits(Pacing(rate=RATE, burst=BURST, now=0.0), asks) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=3.0), st.integers(1, 1000)),
        min_size=1,
        max_size=40,
    )
)
def test_no_window_gets_more_than_rate_times_its_length_plus_the_burst(
    gaps_and_sizes: list[tuple[float, int]],
) -> None:
    """Requests of at most the burst, sent when their wait ends: every window [a, b] of send
    times holds at most ``burst + rate x (b - a)`` samples."""
    pacing, now, sent = Pacing(rate=RATE, burst=BURST, now=0.0), 0.0, []
    for gap, samples in gaps_and_sizes:
        now += gap
        sent.append((now + pacing.reserve(samples, now=now).wait, samples))
    sent.sort()
    for i, (start, _) in enumerate(sent):
        total = 0
        for end, samples in sent[i:]:
            total += samples
            assert total <= BURST + RATE * (end - start) + 1e-6


@pytest.mark.parametrize(
    ("throttles", "at", "rate"),
    [
        pytest.param([0.0], 0.0, RATE * DECREASE, id="a 429 halves the rate"),
        pytest.param(
            [0.0, 0.5], 0.5, RATE * (DECREASE + 0.5 * INCREASE), id="another within HOLD does not"
        ),
        pytest.param(
            [0.0, HOLD], HOLD, RATE * DECREASE * (DECREASE + INCREASE * HOLD), id="after HOLD"
        ),
        pytest.param([float(i) for i in range(10)], 9.0, RATE * FLOOR, id="never below the floor"),
        pytest.param([0.0], 4.0, RATE * (DECREASE + 4 * INCREASE), id="grows back additively"),
        pytest.param([0.0], 10.0, RATE, id="back at the configured rate"),
        pytest.param([0.0], 100.0, RATE, id="never above it"),
    ],
)
def test_aimd_rate(throttles: list[float], at: float, rate: float) -> None:
    pacing = Pacing(rate=RATE, burst=BURST, now=0.0)
    for t in throttles:
        pacing.throttled(now=t)
    assert pacing.rate_at(at) == pytest.approx(rate)


def test_an_episode_starts_once_and_ends_once() -> None:
    pacing = Pacing(rate=RATE, burst=BURST, now=0.0)
    first, second = pacing.throttled(now=0.0), pacing.throttled(now=0.2)
    assert (first.started, first.decreased, first.rate) == (True, True, RATE / 2)
    assert (second.started, second.decreased) == (False, False)
    assert second.rate == pytest.approx(RATE / 2 + RATE * INCREASE * 0.2)
    assert pacing.reserve(1, now=5.0).ended is None  # still recovering
    ended = pacing.reserve(1, now=12.0).ended
    assert ended is not None
    assert (ended.started, ended.seconds, ended.throttles, ended.lowest) == (
        0.0,
        12.0,
        2,
        RATE / 2,
    )
    assert pacing.reserve(1, now=13.0).ended is None
    assert not pacing.throttling
    assert pacing.throttled(now=14.0).started  # a new episode


@pytest.mark.parametrize(
    ("asks", "expected"),
    [
        pytest.param(
            [(0.0, 1000), (0.0, 250)],
            [0.0, 1.0],
            id="a lowered rate makes the next wait longer",
        ),
        pytest.param(
            # from 0 tokens at t=0 (rate 250, +25/s): by t=2 earned (250+300)/2*2 = 550
            [(0.0, 1000), (2.0, 550)],
            [0.0, 0.0],
            id="the recovering rate's tokens are its integral",
        ),
        pytest.param(
            # full at t=10; by t=12: ramp to t=10 earns (250+500)/2*10 = 3750 (cap 1000)
            [(0.0, 1000), (12.0, 1000), (12.0, 500)],
            [0.0, 0.0, 1.0],
            id="after the recovery the configured rate again",
        ),
    ],
)
def test_throttled_bucket_refills_at_the_rate_in_force(
    asks: list[tuple[float, int]], expected: list[float]
) -> None:
    pacing = Pacing(rate=RATE, burst=BURST, now=0.0)
    pacing.throttled(now=0.0)
    assert waits(pacing, asks) == expected


@pytest.mark.parametrize(
    ("rate", "burst", "workers", "share"),
    [
        pytest.param(1000.0, 2000, 1, (1000.0, 2000), id="one process: the settings"),
        pytest.param(1000.0, 2000, 2, (500.0, 1000), id="two workers: half each"),
        pytest.param(1000.0, 2001, 2, (500.0, 1001), id="the burst rounds up"),
        pytest.param(1000.0, 1, 4, (250.0, 1), id="the burst is at least 1"),
        pytest.param(0.0, 0, 4, (0.0, 0), id="not paced stays not paced"),
    ],
)
def test_worker_share(rate: float, burst: int, workers: int, share: tuple[float, int]) -> None:
    assert worker_share(rate, burst, workers) == share


def _config(queue: str) -> str:
    return (
        "remote_write:\n"
        "  - name: ws\n"
        "    url: http://127.0.0.1:1/api/v1/write\n"
        f"    queue_config: {queue}\n"
    )


@pytest.mark.parametrize(
    ("queue", "rate", "burst", "batch"),
    [
        pytest.param("{}", 0.0, 0, 2000, id="off by default"),
        pytest.param("{max_samples_per_second: 0}", 0.0, 0, 2000, id="0 is off"),
        pytest.param(
            "{max_samples_per_second: 5000}", 5000.0, 5000, 2000, id="burst: one second's worth"
        ),
        pytest.param(
            "{max_samples_per_second: 500}",
            500.0,
            2000,
            2000,
            id="burst: at least max_samples_per_send",
        ),
        pytest.param(
            "{max_samples_per_second: 500, burst_samples: 300}",
            500.0,
            300,
            300,
            id="batches cut at a smaller burst",
        ),
    ],
)
def test_pacing_keys(queue: str, rate: float, burst: int, batch: int) -> None:
    q_ = parse_config(_config(queue), env={}).remote_write[0].queue_config
    assert (q_.max_samples_per_second, q_.burst_samples, q_.batch_samples) == (rate, burst, batch)


@pytest.mark.parametrize(
    ("queue", "line"),
    [
        pytest.param("{}", "    pacing: off", id="off"),
        pytest.param(
            "{max_samples_per_second: 5000, burst_samples: 8000}",
            "    pacing: max_samples_per_second=5000 burst_samples=8000",
            id="rate and burst",
        ),
        pytest.param(
            "{max_samples_per_second: 500, burst_samples: 300}",
            "    pacing: max_samples_per_second=500 burst_samples=300 (batches cut at 300 samples)",
            id="a burst below max_samples_per_send",
        ),
    ],
)
def test_check_config_shows_pacing(queue: str, line: str) -> None:
    assert line in describe_config(parse_config(_config(queue), env={})).splitlines()


@pytest.mark.parametrize(
    ("workers", "rate", "burst"),
    [
        pytest.param(1, 6000.0, 9000, id="one worker"),
        pytest.param(3, 2000.0, 3000, id="three workers: a third each"),
    ],
)
def test_each_worker_paces_its_share(workers: int, rate: float, burst: int) -> None:
    config = parse_config(_config("{max_samples_per_second: 6000, burst_samples: 9000}"), env={})
    spec = WorkerSpec(index=0, count=workers, port=1, runtime_dir="/x", ready_fd=0, lifeline_fd=0)
    q_ = worker_config(config, spec).remote_write[0].queue_config
    assert (q_.max_samples_per_second, q_.burst_samples) == (rate, burst)
    unpaced = dataclasses.replace(config.remote_write[0], queue_config=type(q_)())
    plain = dataclasses.replace(config, remote_write=(unpaced,))
    assert worker_config(plain, spec).remote_write[0].queue_config == type(q_)()
