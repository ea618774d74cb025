"""The routing cache's metrics (:class:`rwrouter.routing.Router`'s cache, counted by
:class:`rwrouter.pipeline.fanout.FanOut`): its size, its lookups and hit ratio, and the
name collisions its misses found. The names say ``relabel_cache`` (the configuration's
``relabel_cache`` section)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class CacheMetrics:
    """``rwrouter_relabel_cache_*`` and ``rwrouter_name_collisions_total``, registered on
    ``registry``."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        r = registry
        self.entries = Gauge(
            "rwrouter_relabel_cache_entries", "Label sets in the relabel cache.", registry=r
        )
        self.nbytes = Gauge(
            "rwrouter_relabel_cache_bytes",
            "Bytes of raw and encoded labels the relabel cache holds.",
            registry=r,
        )
        self.hit_ratio = Gauge(
            "rwrouter_relabel_cache_hit_ratio",
            "Relabel cache hits / lookups over the last completed minute (NaN before any).",
            registry=r,
        )
        self.name_collisions = Counter(
            "rwrouter_name_collisions",
            "Names that collide after a destination's metric_name_escaping_scheme, per label set "
            "routed (a relabel cache miss): kind=label (two label names of one series: the "
            "first by original name is kept), kind=series (two series: the later one is not "
            "sent, reason name_collision).",
            ["destination", "kind"],
            registry=r,
        )
        self.lookups = Counter(
            "rwrouter_relabel_cache_lookups",
            "Relabel cache lookups, by result (hit, miss).",
            ["result"],
            registry=r,
        )

    def watch(
        self,
        *,
        entries: Callable[[], float],
        nbytes: Callable[[], float],
        hit_ratio: Callable[[], float],
    ) -> None:
        """Report the cache's label sets, bytes and hit ratio (0-1, NaN before any lookup)
        by calling these at every scrape."""
        self.entries.set_function(entries)
        self.nbytes.set_function(nbytes)
        self.hit_ratio.set_function(hit_ratio)
