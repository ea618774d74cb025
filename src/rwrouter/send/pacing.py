"""Pacing of a destination's requests to an ingestion quota (pure; time is passed in).

A token bucket (``queue_config.max_samples_per_second`` tokens a second, at most
``burst_samples`` held) in the reservation form of ``golang.org/x/time/rate``'s
``Limiter.ReserveN``: a request of ``n`` samples takes its tokens when it asks
(:meth:`Pacing.reserve`), possibly leaving the bucket in debt, and is told how long to wait
before it goes: until the level is back at zero. Requests are served in the order they ask,
and what goes out in any window of ``t`` seconds is at most ``burst + rate x t``.

What counts: a request's samples as rwrouter counts them everywhere (samples, exemplars and
native histograms) plus its metadata entries, as the managed workspace's rate limiter counts
them (Cortex and Mimir distributors: ``validatedSamples + validatedExemplars +
len(validatedMetadata)``, histograms among the samples). Every attempt counts, retries and
the halves of a split too: each is a request the destination counts.

A request larger than the burst (a single series carrying more samples than ``burst_samples``:
the shards cut batches at the burst, so only such a series or a metadata request is) still
goes: it waits for a full bucket and takes it below zero, and the debt is paid before
anything else goes. In a window holding it, at most ``its samples + rate x t`` go out.

A 429 (rate limited) lowers the rate, additive increase / multiplicative decrease (AIMD, as
TCP's congestion control): the rate in force is halved (:data:`DECREASE`), not below
:data:`FLOOR` of the configured one, at most once per :data:`HOLD` seconds (the 429s of
requests already in flight answer the same excess), then grows back by :data:`INCREASE` of
the configured rate each second until it is the configured rate again. An *episode* runs
from the first decrease until the rate is back: :meth:`Pacing.throttled` says when one
starts, :meth:`Pacing.reserve` when one ended, so the shell logs each once.

With ``rwrouter run --workers N`` each worker sends its own share of the series and paces
them at ``1/N`` of the settings (:func:`worker_share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECREASE = 0.5  # a 429 multiplies the rate in force by this
FLOOR = 0.1  # the rate is never lowered below this fraction of the configured one
INCREASE = 0.05  # fraction of the configured rate added back each second (50 % -> 100 %: 10 s)
HOLD = 1.0  # seconds after a decrease in which another 429 does not lower the rate again


@dataclass(frozen=True, slots=True)
class Episode:
    """A throttling episode: when it started (clock seconds), how long it lasted (seconds;
    0 while it runs), the 429s seen in it, the lowest rate (samples per second)."""

    started: float
    seconds: float
    throttles: int
    lowest: float


@dataclass(frozen=True, slots=True)
class Throttle:
    """What a 429 did: ``decreased`` (the rate was lowered; False within :data:`HOLD` of the
    last decrease, or at the floor), the ``rate`` in force now (samples per second) and
    ``started``: True when it began an episode."""

    decreased: bool
    rate: float
    started: bool


@dataclass(frozen=True, slots=True)
class Reservation:
    """What :meth:`Pacing.reserve` granted: ``wait`` seconds before the request goes, the
    ``rate`` in force (samples per second), and the episode that ``ended`` when the rate
    came back to the configured one (None otherwise)."""

    wait: float
    rate: float
    ended: Episode | None = None


class Pacing:
    """One destination's token bucket and AIMD state (see the module docstring).

    ``rate``: the configured samples per second (> 0); ``burst``: the bucket's size, samples
    (>= 1); ``now``: clock seconds (any monotonic clock, the same for every call), when the
    bucket starts full. Not thread-safe: one event loop owns it.
    """

    __slots__ = ("_at", "_episode", "_lowered", "_since", "_tokens", "burst", "rate")

    def __init__(self, *, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"pacing needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate, self.burst = float(rate), float(burst)
        self._tokens, self._at = self.burst, now
        self._lowered: float | None = None  # the rate set by the last decrease, if recovering
        self._since = now  # when it was set
        self._episode: Episode | None = None

    # -- the rate in force -----------------------------------------------------------------
    def rate_at(self, now: float) -> float:
        """The rate in force at ``now``, samples per second: the configured one, or a lowered
        one growing back by :data:`INCREASE` x the configured rate a second."""
        if self._lowered is None:
            return self.rate
        return min(self.rate, self._lowered + self.rate * INCREASE * max(0.0, now - self._since))

    def _refill(self, now: float) -> None:
        """Add the tokens earned since the last call (the integral of the rate in force),
        up to the burst."""
        if now > self._at:
            earned = (self.rate_at(self._at) + self.rate_at(now)) / 2 * (now - self._at)
            if self._lowered is not None:  # the rate reaches the configured one within
                full = self._since + (self.rate - self._lowered) / (self.rate * INCREASE)
                if self._at < full < now:  # ... the interval: its ramp, then flat
                    ramp = (self.rate_at(self._at) + self.rate) / 2 * (full - self._at)
                    earned = ramp + self.rate * (now - full)
            self._tokens = min(self.burst, self._tokens + earned)
            self._at = now

    # -- requests and answers --------------------------------------------------------------
    def reserve(self, samples: int, *, now: float) -> Reservation:
        """Take ``samples`` tokens for a request asking at ``now``; returns how long it waits.

        A request of at most the burst waits until the level, after its tokens are taken, is
        back at zero; a larger one waits for a full bucket (see the module docstring). The
        wait uses the rate in force now (a recovering rate only grows: never too short)."""
        self._refill(now)
        ended = self._recovered(now)
        rate = self.rate_at(now)
        need = min(float(samples), self.burst)
        wait = max(0.0, (need - self._tokens) / rate)
        self._tokens -= samples
        return Reservation(wait, rate, ended)

    def throttled(self, *, now: float) -> Throttle:
        """A 429 answered at ``now``: lower the rate (see the module docstring)."""
        self._refill(now)
        rate = self.rate_at(now)
        episode = self._episode
        started = episode is None
        floor = self.rate * FLOOR
        held = episode is not None and now - self._since < HOLD
        lowered = rate if held else max(floor, rate * DECREASE)
        decreased = lowered < rate
        if decreased:
            self._lowered, self._since = lowered, now
        current = lowered if decreased else rate
        if episode is None:
            self._episode = Episode(now, 0.0, 1, current)
        else:
            self._episode = Episode(
                episode.started, 0.0, episode.throttles + 1, min(episode.lowest, current)
            )
        return Throttle(decreased, current, started)

    def _recovered(self, now: float) -> Episode | None:
        """The episode that ended by ``now`` (the rate is the configured one again), once."""
        if self._lowered is None or self.rate_at(now) < self.rate:
            return None
        episode = self._episode
        self._lowered, self._episode = None, None
        if episode is None:
            return None
        # it ends when noticed: at the first request after the rate came back
        return Episode(episode.started, now - episode.started, episode.throttles, episode.lowest)

    @property
    def throttling(self) -> bool:
        """Whether an episode is under way (the rate in force may be lowered)."""
        return self._episode is not None


def worker_share(rate: float, burst: int, workers: int) -> tuple[float, int]:
    """Each of ``workers`` processes' part of a destination's pacing (``rwrouter run
    --workers N``: the settings are for the whole rwrouter, each worker sends its own share
    of the series): ``(rate / N, ceil(burst / N))``, the burst at least 1. ``rate`` 0 (no
    pacing) stays 0."""
    if workers <= 1 or rate <= 0:
        return rate, burst
    return rate / workers, max(1, math.ceil(burst / workers))
