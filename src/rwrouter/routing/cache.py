"""The routing cache's generations and bounds (pure): raw label bytes -> compact outcome
(:data:`~rwrouter.wire.scan.Entry`), rwrouter's own policy.

The cache is bounded three ways: ``cache_size`` label sets, ``cache_bytes`` bytes of raw and
encoded labels, and ``cache_max_age`` seconds (a label set not seen for that long is forgotten:
series churn, e.g. restarted pods, cannot grow it). It keeps two generations: lookups try the
young one, then the old one (a hit there is copied to the young one). The old generation is
forgotten and the young one becomes old every ``cache_max_age / 2`` seconds, and whenever the
young one holds half of ``cache_size`` or ``cache_bytes``: the label sets seen most recently
stay, and a stable set of up to ``cache_size / 2`` label sets is always fully cached. Bounds
are applied after each request (a request may add its own series on top).
"""

from __future__ import annotations

import math

from rwrouter.wire.scan import Cache, new_cache

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CACHE_MAX_AGE",
    "DEFAULT_CACHE_SIZE",
    "HIT_RATIO_WINDOW",
    "Generations",
]

# Defaults of the relabel_cache section (rwrouter.config.RelabelCacheConfig).
DEFAULT_CACHE_SIZE = 2_000_000  # label sets
DEFAULT_CACHE_BYTES = 1024 * 1024 * 1024  # raw label bytes and outcomes held by the cache
DEFAULT_CACHE_MAX_AGE = 600.0  # seconds: a label set not seen for this long is forgotten
HIT_RATIO_WINDOW = 60.0  # seconds over which Router.hit_ratio is computed


class Generations:
    """The two generations, their bounds and the hit counters (the module docstring); the
    router fills them (``_young``) and counts ``hits``/``misses``. :meth:`_rotated` is
    called after every rotation."""

    def __init__(self, *, cache_size: int, cache_bytes: int, cache_max_age: float) -> None:
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes
        self.cache_max_age = cache_max_age
        self._young: Cache = new_cache()
        self._old: Cache = new_cache()
        self._young_bytes = self._old_bytes = 0
        self._overlap = self._overlap_bytes = 0  # in both generations (copied since rotation)
        self._rotated_at: float | None = None
        self.hits = 0
        self.misses = 0
        self._window: tuple[float, int, int] | None = None  # start, hits, misses at start
        self._ratio = math.nan

    def __len__(self) -> int:
        """Distinct label sets in the cache."""
        return len(self._young) + len(self._old) - self._overlap

    @property
    def cached_bytes(self) -> int:
        """Bytes of raw and encoded labels the cache holds (distinct entries)."""
        return self._young_bytes + self._old_bytes - self._overlap_bytes

    @property
    def hit_ratio(self) -> float:
        """Cache hits / lookups over the last :data:`HIT_RATIO_WINDOW` seconds completed (the
        current window until one completed); NaN before any lookup."""
        if math.isnan(self._ratio):
            lookups = self.hits + self.misses
            return self.hits / lookups if lookups else math.nan
        return self._ratio

    def maintain(self, now: float) -> None:
        """Apply the age bound and roll the hit-ratio window; ``now``: seconds on any monotonic
        clock. :meth:`route` calls it first."""
        if self._rotated_at is None:
            self._rotated_at = now
        elif (idle := now - self._rotated_at) >= self.cache_max_age / 2:
            self._rotate(now)
            if idle >= self.cache_max_age:
                self._rotate(now)  # no request for a whole max_age: nothing is recent
        if self._window is None:
            self._window = (now, self.hits, self.misses)
        elif now - self._window[0] >= HIT_RATIO_WINDOW:
            hits, misses = self.hits - self._window[1], self.misses - self._window[2]
            if hits + misses:
                self._ratio = hits / (hits + misses)
            self._window = (now, self.hits, self.misses)

    def _bound(self, now: float) -> None:
        """The size and byte bounds: a young generation holding half of either becomes old
        (the previous old one is forgotten); an old one over the whole bound (one request
        larger than the cache) is forgotten at once."""
        if len(self._young) >= self.cache_size / 2 or self._young_bytes >= self.cache_bytes / 2:
            self._rotate(now)
            if len(self._old) > self.cache_size or self._old_bytes > self.cache_bytes:
                self._forget_old()

    def _forget_old(self) -> None:
        self._old = new_cache()
        self._old_bytes = 0
        self._overlap = self._overlap_bytes = 0

    def _rotate(self, now: float) -> None:
        self._forget_old()
        self._old, self._old_bytes = self._young, self._young_bytes
        self._young, self._young_bytes = new_cache(), 0
        self._rotated_at = now
        self._rotated()

    def _rotated(self) -> None:
        """Called after every rotation (the young generation is new and empty)."""

    def _cached(self, key: bytes) -> bool:
        """Whether a label set is in the cache (seen within about ``cache_max_age``)."""
        return self._young.get(key) is not None or self._old.get(key) is not None
