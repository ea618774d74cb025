"""Fan-out: global relabel rules, per-destination copies, fallback routing, drop counts (pure).

Rules (rwrouter's routing semantics, built on Prometheus relabel semantics):

1. The global ``relabel_configs`` run first, on every series.
2. Each destination applies its own ``write_relabel_configs`` to its *own copy* of the result.
3. A ``fallback`` destination receives exactly the series that no non-fallback destination kept
   after its own rules (then applies its own rules too).
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

from collections.abc import Sequence
from dataclasses import dataclass, field

from rwrouter.relabel import RelabelConfig, process
from rwrouter.wire import (
    RawSeries,
    WriteRequestParts,
    decode_labels,
    encode_labels,
    frame_metadata,
    frame_series,
    metadata_family,
    strip_fields,
)

# Drop reasons (label values of rwrouter_samples_dropped_total).
RELABEL = "relabel"
INVALID = "invalid"
FILTERED = "filtered"  # only exemplars/histograms the destination does not take

_EXEMPLARS, _HISTOGRAMS = 3, 4
DEFAULT_CACHE_SIZE = 500_000  # label sets
DEFAULT_CACHE_BYTES = 128 * 1024 * 1024  # raw + encoded label bytes held by the cache


@dataclass(frozen=True, slots=True)
class Route:
    """What routing needs to know about one destination."""

    name: str
    rules: tuple[RelabelConfig, ...] = ()
    fallback: bool = False
    send_exemplars: bool = True
    send_native_histograms: bool = True


@dataclass(slots=True)
class RoutedSeries:
    """Series routed to one destination: framed ``timeseries`` fields, each with its shard key
    (the encoded output labels) and its sample count (samples + exemplars + histograms, >= 1:
    a series carrying none is not forwarded)."""

    frames: list[bytes] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    samples: int = 0
    nbytes: int = 0  # bytes held: the frames and their keys


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

    ``cache_size``: how many distinct label sets to remember, ``cache_bytes``: how many bytes
    of raw and encoded labels at most (oldest forgotten first when either is reached). The
    cache is safe to use from several threads under the GIL (lookups and inserts are single
    dict operations; eviction tolerates a concurrent one).
    """

    def __init__(
        self,
        *,
        global_rules: Sequence[RelabelConfig],
        routes: Sequence[Route],
        cache_size: int = DEFAULT_CACHE_SIZE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.global_rules = tuple(global_rules)
        self.routes = tuple(routes)
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes
        self._cache: dict[bytes, Outcome] = {}
        self._cached_bytes = 0
        # Per route: does it filter out exemplars or native histograms?
        self._filters = [not (r.send_exemplars and r.send_native_histograms) for r in routes]
        self.hits = 0
        self.misses = 0

    def outcome(self, raw_labels: bytes) -> Outcome:
        """The routing outcome of a series' raw Label fields.

        Raises DecodeError (from decode_labels) for invalid labels; that is not cached.
        """
        cached = self._cache.get(raw_labels)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        result = self.route_labels(decode_labels(raw_labels))
        size = _entry_bytes(raw_labels, result)
        if len(self._cache) >= self.cache_size or self._cached_bytes + size > self.cache_bytes:
            self._evict()
        self._cache[raw_labels] = result
        self._cached_bytes += size
        return result

    def route_labels(self, labels: tuple[tuple[str, str], ...]) -> Outcome:
        """Apply global then per-destination rules and fallback routing to one label set."""
        base = process(labels, self.global_rules) if self.global_rules else labels
        if base is None or not base:
            return (RELABEL,) * len(self.routes)
        results: list[bytes | str | None] = []
        kept_by_primary = False
        for route in self.routes:
            if route.fallback:
                results.append(None)
                continue
            res = _apply(base, route.rules)
            kept_by_primary = kept_by_primary or isinstance(res, bytes)
            results.append(res)
        for i, route in enumerate(self.routes):
            if route.fallback:
                results[i] = None if kept_by_primary else _apply(base, route.rules)
        return tuple(results)

    def route(self, parts: WriteRequestParts) -> RoutedRequest:
        """Route every series and metadata entry of a decoded write request.

        Raises DecodeError when a series has invalid labels (the whole request is refused).
        """
        routes = self.routes
        out = RoutedRequest(
            series=[RoutedSeries() for _ in routes],
            metadata=[[] for _ in routes],
            dropped={},
        )
        filters = self._filters
        for raw in parts.series:
            n = raw.samples + raw.exemplars + raw.histograms
            if not n:  # nothing to deliver (its labels are still checked)
                self.outcome(raw.labels)
                continue
            out.samples_in += n
            for i, res in enumerate(self.outcome(raw.labels)):
                if isinstance(res, bytes):
                    rest, kept = raw.rest, n
                    if filters[i] and (raw.exemplars or raw.histograms):
                        rest, kept = _filter(raw, routes[i])
                        if not kept:
                            out.dropped[(i, FILTERED)] = out.dropped.get((i, FILTERED), 0) + n
                            continue
                    dest = out.series[i]
                    frame = frame_series(res, rest)
                    dest.frames.append(frame)
                    dest.keys.append(res)
                    dest.counts.append(kept)
                    dest.samples += kept
                    dest.nbytes += len(frame) + len(res)  # the frame, and its shard key
                elif res is not None:
                    out.dropped[(i, res)] = out.dropped.get((i, res), 0) + n
        out.series_in = len(parts.series)
        out.metadata_in = len(parts.metadata)
        for payload in parts.metadata:
            family = metadata_family(payload)
            if not family:
                out.metadata_invalid += 1
                continue
            for i, res in enumerate(self.route_labels((("__name__", family),))):
                if isinstance(res, bytes):
                    out.metadata[i].append(frame_metadata(payload))
        return out

    def _evict(self) -> None:
        """Forget the oldest tenth of the cache, and more until it is under its byte bound
        (dicts keep insertion order)."""
        drop = max(1, self.cache_size // 10)
        target = self.cache_bytes * 0.9
        for i, key in enumerate(list(self._cache)):
            if i >= drop and self._cached_bytes <= target:
                break
            outcome = self._cache.pop(key, None)
            if outcome is not None:
                self._cached_bytes -= _entry_bytes(key, outcome)

    def __len__(self) -> int:
        return len(self._cache)


def _entry_bytes(key: bytes, outcome: Outcome) -> int:
    """What a cache entry holds: the raw label bytes and each destination's encoded labels."""
    return len(key) + sum(len(res) for res in outcome if isinstance(res, bytes))


def _filter(raw: RawSeries, route: Route) -> tuple[bytes, int]:
    """A series' raw fields without what ``route`` does not take (``send_exemplars``,
    ``send_native_histograms``), and how many samples/exemplars/histograms are left."""
    stripped: set[int] = set()
    kept = raw.samples + raw.exemplars + raw.histograms
    if not route.send_exemplars and raw.exemplars:
        stripped.add(_EXEMPLARS)
        kept -= raw.exemplars
    if not route.send_native_histograms and raw.histograms:
        stripped.add(_HISTOGRAMS)
        kept -= raw.histograms
    if not stripped:
        return raw.rest, kept
    return strip_fields(raw.rest, frozenset(stripped)), kept


def _apply(labels: tuple[tuple[str, str], ...], rules: tuple[RelabelConfig, ...]) -> bytes | str:
    """One destination's rules on its own copy: encoded labels, or the drop reason."""
    result = process(labels, rules) if rules else labels
    if not result:
        return RELABEL
    names = [name for name, _ in result]
    if "__name__" not in names or "" in names:  # "" can come from a labelmap replacement
        return INVALID
    return encode_labels(result)
