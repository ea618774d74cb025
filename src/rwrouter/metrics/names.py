"""Which metric names make up each destination's samples: an estimate for the status page
("top metric names by samples/s") and ``rwrouter_metric_name_share``.

Counting names exactly would put a per-series step back on the hot path. Instead one routed
request per :attr:`MetricNameShares.interval` seconds is looked at (its shares' frames, up to
``max_frames`` per destination, :func:`rwrouter.wire.index.metric_name_samples`), and each
destination's share per name is an exponentially weighted mean over those looks. Its samples
per second per name are then that share times the destination's samples per second (what the
page shows). The shares of a destination sum to 1 (the first look counts whole). Fleets send
every family every scrape, so the shares settle within seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from rwrouter.wire.index import Frames, metric_name_samples


class MetricNameShares:
    """Per destination, the estimated fraction (0..1) of its samples per metric name.

    ``interval``: seconds between two looks; ``max_frames``: series looked at per destination
    and look; ``weight``: of the newest look in the mean; ``keep``: names kept per destination
    (the largest). Safe to call from the decode threads and the event loop."""

    def __init__(
        self, *, interval: float = 1.0, max_frames: int = 5000, weight: float = 0.2, keep: int = 50
    ) -> None:
        self.interval, self.max_frames, self.weight, self.keep = interval, max_frames, weight, keep
        self._next = 0.0
        self._lock = threading.Lock()
        self._shares: dict[str, dict[str, float]] = {}

    def due(self, now: float) -> bool:
        """Whether the request routed at ``now`` (seconds, monotonic) should be looked at;
        claims the look (the next one is due ``interval`` later)."""
        if now < self._next:
            return False
        with self._lock:
            if now < self._next:
                return False
            self._next = now + self.interval
            return True

    def observe(self, destinations: Sequence[str], routed: Sequence[Frames]) -> None:
        """Fold one request in: ``routed[i]`` is what destination ``destinations[i]`` got."""
        looks = [
            (name, metric_name_samples(series.body, series.index, max_frames=self.max_frames))
            for name, series in zip(destinations, routed, strict=True)
        ]
        with self._lock:
            for name, counts in looks:
                total = sum(counts.values())
                if not total:
                    continue
                old = self._shares.get(name, {})
                mixed = {
                    m: (1 - self.weight) * old.get(m, 0.0) + self.weight * n / total
                    for m, n in counts.items()
                }
                for m, share in old.items():
                    mixed.setdefault(m, (1 - self.weight) * share)
                whole = sum(mixed.values())  # the first look counts whole; shares sum to 1
                kept = sorted(mixed.items(), key=lambda item: -item[1])[: self.keep]
                self._shares[name] = {m: s / whole for m, s in kept if s / whole >= 1e-4}

    def top(self, limit: int = 10) -> dict[str, list[tuple[str, float]]]:
        """Per destination, its ``limit`` largest (metric name, share), largest first."""
        with self._lock:
            return {
                dest: sorted(shares.items(), key=lambda item: -item[1])[:limit]
                for dest, shares in self._shares.items()
            }

    def forget(self, keep: Sequence[str]) -> None:
        """Drop the destinations not in ``keep`` (after a reload)."""
        with self._lock:
            self._shares = {d: s for d, s in self._shares.items() if d in keep}
