"""Fan-out: global relabel rules, per-destination copies, fallback routing, drop counts (pure).

Rules (rwrouter's routing semantics, built on Prometheus relabel semantics):

1. The global ``relabel_configs`` run first, on every series.
2. Each destination applies its own ``write_relabel_configs`` to its *own copy* of the result.
3. A ``fallback`` destination receives exactly the series that no non-fallback destination kept
   after its own rules (then applies its own rules too). A ``shadow`` destination (counted by
   the audit, never sent) does not count as keeping a series: adding one changes nothing else.
4. A series left without labels is not sent (reason ``relabel``); one left without ``__name__``
   or with an empty label name is not sent either (reason ``invalid``: every receiver would
   reject it, and with it the rest of the batch).
   A destination with ``send_exemplars: false`` or ``send_native_histograms: false`` gets the
   series without those; a series left with nothing to send is not sent (reason ``filtered``).
5. Metadata entries are routed by applying the same rules to the label set
   ``{__name__: <metric family name>}``; the entry itself is forwarded unchanged. An entry
   without a family name is sent nowhere (counted as ``invalid``).

The outcome of a label set depends only on its raw bytes, so it is computed once and cached (the
same series return every scrape). Samples, exemplars and histograms are never decoded: a routed
series is its re-encoded labels followed by the sender's raw bytes.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from rwrouter.relabel import FILTER_ACTIONS, RelabelConfig, process
from rwrouter.routing.outcome import (
    INVALID,
    REASONS,
    RELABEL,
    Route,
    RuleCopies,
    filter_series,
    labels_read,
    template_parts,
)
from rwrouter.wire import RawSeries, frame_metadata, metadata_family
from rwrouter.wire.scan import (
    FILTERED,
    Cache,
    Entry,
    Item,
    counts_of,
    decode_labels,
    frames_of,
    hashes_of,
    new_cache,
    pack_entry,
    scan_request,
    signature,
    unpack_entry,
)

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CACHE_MAX_AGE",
    "DEFAULT_CACHE_SIZE",
    "FILTERED",
    "INVALID",
    "RELABEL",
    "Route",
    "RoutedRequest",
    "RoutedSeries",
    "Router",
    "shard_hash",
]


# Defaults of the relabel_cache section (rwrouter.config.RelabelCacheConfig).
DEFAULT_CACHE_SIZE = 2_000_000  # label sets
DEFAULT_CACHE_BYTES = 1024 * 1024 * 1024  # raw label bytes and outcomes held by the cache
DEFAULT_CACHE_MAX_AGE = 600.0  # seconds: a label set not seen for this long is forgotten
HIT_RATIO_WINDOW = 60.0  # seconds over which Router.hit_ratio is computed
MAX_TEMPLATES = 10_000  # distinct values of the labels filter-only rules read (metric names)
_U32 = struct.Struct("<I")


def shard_hash(key: bytes) -> int:
    """The shard hash of a series: crc32 of its encoded output labels (u32; stable across
    restarts and processes, so a series keeps its shard however its queue is read back)."""
    return zlib.crc32(key)


@dataclass(slots=True)
class RoutedSeries:
    """Series routed to one destination: ``body``, its framed ``timeseries`` fields
    concatenated (``snappy(body)`` is a valid write request), and ``index``, per frame
    :data:`~rwrouter.wire.scan.INDEX` (frame bytes, samples, shard hash). ``samples``
    (samples + exemplars + histograms) and ``series`` are the totals; a series carrying
    nothing is not forwarded."""

    body: bytes = b""
    index: bytes = b""
    samples: int = 0
    series: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes held: the body and its index."""
        return len(self.body) + len(self.index)

    @property
    def counts(self) -> list[int]:
        """Each frame's sample count (decodes the index: for tools and tests)."""
        return counts_of(self.index)

    @property
    def hashes(self) -> list[int]:
        """Each frame's shard hash (decodes the index: for tools and tests)."""
        return hashes_of(self.index)

    @property
    def frames(self) -> list[bytes]:
        """Each framed series (slices the body: for tools and tests)."""
        return frames_of(self.body, self.index)


@dataclass(slots=True)
class RoutedRequest:
    """One write request routed: per destination (in config order) its series and metadata,
    and the samples not sent, by destination index and reason."""

    series: list[RoutedSeries]
    metadata: list[list[bytes]]
    dropped: dict[tuple[int, str], int]
    samples_in: int = 0
    series_in: int = 0
    metadata_invalid: int = 0  # entries without a metric family name: sent nowhere
    metadata_in: int = 0


# Per destination: encoded output labels, or the drop reason (a str) — or None for a fallback
# destination whose series went elsewhere.
Outcome = tuple[bytes | str | None, ...]


class Router:
    """Routes series and metadata to destinations; caches the outcome per raw label set.

    The cache is bounded three ways (rwrouter's own policy): ``cache_size`` label sets,
    ``cache_bytes`` bytes of raw and encoded labels, and ``cache_max_age`` seconds (a label set
    not seen for that long is forgotten: series churn, e.g. restarted pods, cannot grow it).
    It keeps two generations: lookups try the young one, then the old one (a hit there is
    copied to the young one). The old generation is forgotten and the young one becomes old
    every ``cache_max_age / 2`` seconds, and whenever the young one holds half of
    ``cache_size`` or ``cache_bytes``: the label sets seen most recently stay, and a stable
    set of up to ``cache_size / 2`` label sets is always fully cached. Bounds are applied
    after each request (a request may add its own series on top).

    Lookups run in :func:`~rwrouter.wire.scan.scan_request` (compiled when available). Safe
    to use from several threads under the GIL: the cache is only ever a cache (an outcome
    depends on the label bytes alone), though concurrent requests may blur the counters.
    """

    def __init__(
        self,
        *,
        global_rules: Sequence[RelabelConfig],
        routes: Sequence[Route],
        cache_size: int = DEFAULT_CACHE_SIZE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache_max_age: float = DEFAULT_CACHE_MAX_AGE,
    ) -> None:
        self.global_rules = tuple(global_rules)
        self.routes = tuple(routes)
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes
        self.cache_max_age = cache_max_age
        self._young: Cache = new_cache()
        self._old: Cache = new_cache()
        self._young_bytes = self._old_bytes = 0
        self._overlap = self._overlap_bytes = 0  # in both generations (copied since rotation)
        self._rotated_at: float | None = None
        # Per route: does it filter out exemplars or native histograms?
        self._filters = tuple(not (r.send_exemplars and r.send_native_histograms) for r in routes)
        # Per route: are its rules only keep/drop (they never change the labels)?
        self._filter_only = [all(c.action in FILTER_ACTIONS for c in r.rules) for r in routes]
        # When every rule only filters: the labels they read (sorted bytes), for the
        # template shortcut of the miss path (:meth:`_from_template`); else None.
        self._signature_names = labels_read(self.global_rules, self.routes)
        self._templates: dict[tuple[bytes | None, ...], tuple[bytes, ...]] = {}
        self.hits = 0
        self.misses = 0
        self._window: tuple[float, int, int] | None = None  # start, hits, misses at start
        self._ratio = math.nan

    # -- cache -----------------------------------------------------------------------------

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

    def _miss(self, raw_labels: bytes) -> Entry:
        """Route a label set not in the cache and remember it (the young generation)."""
        self.misses += 1
        # Not the empty set: it is dropped as "relabel" where a set without the labels the
        # rules read (its same template key) is "invalid" (no __name__).
        entry = self._from_template(raw_labels) if self._signature_names and raw_labels else None
        if entry is None:
            entry = self._route_raw(raw_labels)
        self._young[raw_labels] = entry
        self._young_bytes += len(raw_labels) + len(entry)
        return entry

    def _from_template(self, raw_labels: bytes) -> Entry | None:
        """The shortcut for rules that only filter (keep/drop): their outcome depends only on
        the values of the labels they read, so a canonical label set (:func:`signature`)
        takes the outcome of the first one with the same values, with its own shard hash.
        None when the set is not canonical, or that outcome would change its labels."""
        assert self._signature_names is not None
        values = signature(raw_labels, self._signature_names)
        if values is None:
            return None
        parts = self._templates.get(values)
        if parts is None:
            items = unpack_entry(raw_labels, self._route_raw(raw_labels))
            if any(isinstance(i, tuple) and i[0] != raw_labels for i in items):
                return None  # (cannot happen with filter-only rules on a canonical set)
            parts = template_parts(items)
            if len(self._templates) >= MAX_TEMPLATES:
                self._templates.clear()
            self._templates[values] = parts
        return _U32.pack(shard_hash(raw_labels)).join(parts)

    def _route_raw(self, raw_labels: bytes) -> Entry:
        """The full way: decode the labels, apply the rules, encode the results."""
        outcome = self.route_labels(decode_labels(raw_labels))
        items: list[Item] = []
        for res in outcome:
            if isinstance(res, bytes):
                items.append((res, shard_hash(res)))
            else:
                items.append(None if res is None else REASONS.index(res))
        return pack_entry(raw_labels, items)

    # -- routing ---------------------------------------------------------------------------

    def route_labels(self, labels: tuple[tuple[str, str], ...]) -> Outcome:
        """Apply global then per-destination rules and fallback routing to one label set
        (sorted by name, as :func:`~rwrouter.wire.scan.decode_labels` gives it)."""
        base = process(labels, self.global_rules) if self.global_rules else labels
        if base is None or not base:
            return (RELABEL,) * len(self.routes)
        apply = RuleCopies(base)
        results: list[bytes | str | None] = []
        kept_by_primary = False
        for route, filter_only in zip(self.routes, self._filter_only, strict=True):
            if route.fallback:
                results.append(None)
                continue
            res = apply(route.rules, filter_only)
            kept_by_primary = kept_by_primary or (isinstance(res, bytes) and not route.shadow)
            results.append(res)
        if not kept_by_primary:
            for i, (route, filter_only) in enumerate(zip(self.routes, self._filter_only,
                                                         strict=True)):  # fmt: skip
                if route.fallback:
                    results[i] = apply(route.rules, filter_only)
        return tuple(results)

    def route(self, data: bytes, *, now: float = 0.0) -> RoutedRequest:
        """Route every series and metadata entry of a decompressed write request (RW 1.0);
        ``now``: seconds on a monotonic clock, for the cache's age bound.

        Raises DecodeError for malformed input or a series with invalid labels (the whole
        request is refused).
        """
        self.maintain(now)
        templates = self._templates if self._signature_names else None
        scan = scan_request(data, self._young, self._old, self._miss, self._filters, self._filter,
                            REASONS, templates, self._signature_names or ())  # fmt: skip
        self.hits += scan.hits
        self.misses += scan.misses
        self._young_bytes += scan.miss_bytes
        self._young_bytes += scan.promoted_bytes
        self._overlap += scan.promoted
        self._overlap_bytes += scan.promoted_bytes
        self._bound(now)
        out = RoutedRequest(
            series=[
                RoutedSeries(body, index, samples, series)
                for body, index, samples, series in zip(
                    scan.bodies, scan.indexes, scan.samples, scan.series, strict=True
                )
            ],
            metadata=[[] for _ in self.routes],
            dropped=scan.dropped,
            samples_in=scan.samples_in,
            series_in=scan.series_in,
            metadata_in=len(scan.metadata),
        )
        for payload in scan.metadata:
            family = metadata_family(payload)
            if not family:
                out.metadata_invalid += 1
                continue
            for i, res in enumerate(self.route_labels((("__name__", family),))):
                if isinstance(res, bytes):
                    out.metadata[i].append(frame_metadata(payload))
        return out

    def _filter(self, i: int, raw: RawSeries) -> tuple[bytes, int]:
        return filter_series(raw, self.routes[i])
