"""The sample age limit of a destination (pure): which samples are too old to send, given
the time now (``queue_config.sample_age_limit``).

Source: Prometheus ``storage/remote/queue_manager.go`` (since 2.50): with a limit L > 0, a
sample whose timestamp is before ``now - L`` is dropped instead of being sent, counted with
reason ``too_old`` (``isSampleOld``), when a batch is built and again before every retry of
it; L = 0 (the default) turns it off. rwrouter applies it to samples, exemplars and native
histograms alike (each by its own timestamp), when a batch read from the disk queue is sent
and before each retry (:mod:`rwrouter.send.too_old`, its shell), and counts all three as
samples (``rwrouter_samples_dropped_total{reason="too_old"}``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rwrouter.wire.age import Recent, drop_older

__all__ = ["SampleAgeLimit"]


@dataclass(frozen=True, slots=True)
class SampleAgeLimit:
    """``limit``: seconds (``queue_config.sample_age_limit``); 0 means off (every method
    then keeps everything). Times are unix seconds (``now``), timestamps milliseconds since
    the epoch, as in remote write."""

    limit: float = 0.0

    @property
    def active(self) -> bool:
        """Whether samples may be dropped at all (``limit`` > 0)."""
        return self.limit > 0

    def cutoff_ms(self, *, now: float) -> int | None:
        """The first timestamp (ms) that is not too old at ``now``: every timestamp below it
        is (Prometheus: the sample's time is before ``now - limit``). None when off."""
        if not self.active:
            return None
        return math.ceil((now - self.limit) * 1000)

    def is_too_old(self, timestamp_ms: int, *, now: float) -> bool:
        """Whether a sample at ``timestamp_ms`` is too old to send at ``now``."""
        cutoff = self.cutoff_ms(now=now)
        return cutoff is not None and timestamp_ms < cutoff

    def recent(self, body: bytes, *, now: float) -> Recent | None:
        """``body`` (RW1-form frames) without its samples too old at ``now``
        (:func:`~rwrouter.wire.age.drop_older`); None when off. Raises DecodeError for
        malformed frames."""
        cutoff = self.cutoff_ms(now=now)
        return None if cutoff is None else drop_older(body, cutoff)

    def aged_at(self, oldest_ms: int | None) -> float | None:
        """When (unix seconds) the sample at ``oldest_ms`` becomes too old, so that a batch
        still being retried must be filtered again; None when off or nothing is left."""
        if not self.active or oldest_ms is None:
            return None
        return oldest_ms / 1000 + self.limit
