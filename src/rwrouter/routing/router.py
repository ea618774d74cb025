"""The router (pure): the routing rules of :mod:`rwrouter.routing` applied to write requests,
with the routing cache (:mod:`rwrouter.routing.cache`) in front of the relabel engine."""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

from rwrouter.errors import InvariantError
from rwrouter.protocol import Written
from rwrouter.reasons import DropReason
from rwrouter.relabel import FILTER_ACTIONS, RelabelConfig, process_compiled, program
from rwrouter.relabel.series import format_labels
from rwrouter.routing.cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CACHE_MAX_AGE,
    DEFAULT_CACHE_SIZE,
    Entry,
    Generations,
    Slot,
    pack_entry,
    unpack_entry,
)
from rwrouter.routing.collisions import LABEL, SERIES, Claims, Collision, CollisionLog
from rwrouter.routing.escape import ALLOW_UTF8, SCHEMES, escape_metadata
from rwrouter.routing.outcome import (
    REASONS,
    Renamed,
    Result,
    Route,
    RuleCopies,
    filter_series,
    labels_read,
    template_parts,
)
from rwrouter.routing.routed import RoutedRequest, shard_hash
from rwrouter.routing.scan import Review, scan_request, scan_rw2, signature
from rwrouter.wire import RawSeries, frame_metadata, metadata_family
from rwrouter.wire.accelerator import compiled, decode_labels, encode_labels
from rwrouter.wire.index import Frames

__all__ = ["Router"]


MAX_TEMPLATES = 10_000  # distinct values of the labels filter-only rules read (metric names)
MAX_METADATA_OUTCOMES = 50_000  # distinct metadata payloads whose routing is remembered
_U32 = struct.Struct("<I")
_COLLIDED = REASONS.index(DropReason.NAME_COLLISION)
_route_labels = compiled("route_labels")  # the miss path in C (wire/_route.h), when built


# Per destination: encoded output labels, or the drop reason — or None for a fallback
# destination whose series went elsewhere.
Outcome = tuple[bytes | DropReason | None, ...]


def _same(report: Collision) -> Collision:
    return report


class Router(Generations):
    """Routes series and metadata to destinations; caches the outcome per raw label set
    (bounds and generations: :class:`~rwrouter.routing.cache.Generations`).

    Lookups run in :func:`~rwrouter.routing.scan.scan_request` (compiled when available). Safe
    to use from several threads under the GIL: the cache is only ever a cache (an outcome
    depends on the label bytes alone, and, at a destination that escapes names, on the
    collision memory), though concurrent requests may blur the counters. Collisions are
    counted once per label set routed the full way (a cache miss), not per request:
    :meth:`take_collisions`.
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
        super().__init__(
            cache_size=cache_size, cache_bytes=cache_bytes, cache_max_age=cache_max_age
        )
        self.global_rules = tuple(global_rules)
        self.routes = tuple(routes)
        self.ha_dedup = any(r.ha_dedup is not None for r in routes)  # some route has ha_dedup
        # Per route: does it filter out exemplars or native histograms?
        self._filters = tuple(not (r.send_exemplars and r.send_native_histograms) for r in routes)
        # Per route: are its rules only keep/drop (they never change the labels)?
        self._filter_only = [all(c.action in FILTER_ACTIONS for c in r.rules) for r in routes]
        # When every rule only filters: the labels they read (sorted bytes), for the
        # template shortcut of the miss path (:meth:`_from_template`); else None.
        self._signature_names = labels_read(self.global_rules, self.routes)
        self._templates: dict[tuple[bytes | None, ...], tuple[bytes, ...]] = {}
        # Escaping: per route its scheme; the claims of escaped label sets (None when no route
        # escapes); signature values the template shortcut must not take (a claim's labels).
        self._escaping = tuple(r.escaping for r in routes)
        if unknown := [s for s in self._escaping if s not in SCHEMES]:
            raise ValueError(f"unknown metric_name_escaping_scheme {unknown[0]!r}")
        escaping = sum(s != ALLOW_UTF8 for s in self._escaping)
        self._claims = (
            Claims(routes=len(self.routes), max_claims=cache_size * escaping, alive=self._cached)
            if escaping
            else None
        )
        self._no_template: set[tuple[bytes | None, ...]] = set()
        self._metadata_outcomes: dict[bytes, tuple[bytes | None, ...]] = {}
        self._collisions = CollisionLog()
        self._now = 0.0
        self._plan: tuple[tuple[object, ...], tuple[tuple[object, bool, bool], ...]] | None = None
        if (
            _route_labels is not None
            and self._claims is None
            and type(self)._results is Router._results
        ):
            # What the compiled miss path needs: the rules compiled, and per route its
            # fallback and shadow flags (escaping routes take the Python way: collisions;
            # so does a subclass with results of its own).
            self._plan = (
                program(self.global_rules),
                tuple((program(r.rules), r.fallback, r.shadow) for r in self.routes),
            )

    # -- cache -----------------------------------------------------------------------------

    def _rotated(self) -> None:
        if self._claims is not None and self._claims.losers:
            self._claims.recheck(self._route_again)

    def _route_again(self, key: bytes) -> None:
        """Route a cached label set again (a collision loser whose claimant is gone) to young."""
        entry = self._route_raw(key)
        self._young[key] = entry
        self._young_bytes += len(key) + len(entry)

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
        None when the set is not canonical, or that outcome would change its labels. When a
        route escapes names, only legacy names are canonical (escaping changes no such set),
        and values whose labels a claim holds (:meth:`_taint`) go the full way, where the
        collision memory is asked."""
        if self._signature_names is None:
            raise InvariantError("the template shortcut needs rules that only filter")
        values = signature(raw_labels, self._signature_names, self._claims is not None)
        if values is None or values in self._no_template:
            return None
        parts = self._templates.get(values)
        if parts is None:
            slots = unpack_entry(raw_labels, self._route_raw(raw_labels))
            if any((isinstance(v, tuple) and v[0] != raw_labels) or v == _COLLIDED for v in slots):
                return None  # (cannot happen with filter-only rules on a legacy canonical set)
            parts = template_parts(slots)
            if len(self._templates) >= MAX_TEMPLATES:
                self._templates.clear()
            self._templates[values] = parts
        return _U32.pack(shard_hash(raw_labels)).join(parts)

    def _route_raw(self, raw_labels: bytes) -> Entry:
        """The full way: decode the labels, apply the rules, escape, ask the collision
        memory, encode the results. Compiled (``route_labels``, the same entry) when the
        accelerator is built and no route escapes names."""
        if self._plan is not None and _route_labels is not None:
            entry: Entry = _route_labels(raw_labels, *self._plan, self._drop_after)
            return entry
        return self._route_raw_py(raw_labels)

    def _route_raw_py(self, raw_labels: bytes) -> Entry:
        """:meth:`_route_raw` in Python (the reference of ``route_labels``)."""
        slots: list[Slot] = []
        for i, res in enumerate(self._results(decode_labels(raw_labels))):
            if isinstance(res, Renamed) or (
                isinstance(res, bytes)
                and self._claims is not None
                and self._escaping[i] != ALLOW_UTF8
            ):
                res = self._collide(i, res, raw_labels)
            if isinstance(res, bytes):
                slots.append((res, shard_hash(res)))
            else:
                slots.append(None if res is None else REASONS.index(res))
        return pack_entry(raw_labels, slots)

    # -- routing ---------------------------------------------------------------------------

    def route_labels(self, labels: tuple[tuple[str, str], ...]) -> Outcome:
        """Apply global then per-destination rules, fallback routing and escaping to one
        label set (sorted by name, as :func:`~rwrouter.wire.accelerator.decode_labels` gives it);
        without the collision memory (see :meth:`route_series`)."""
        return tuple(r.escaped if isinstance(r, Renamed) else r for r in self._results(labels))

    _drop_after: str | None = None  # a label removed after the rules (a tenant's __tenant__)
    _review: Review | None = None  # the compiled loop's review of its misses (BudgetedRouter)

    def _results(self, labels: tuple[tuple[str, str], ...]) -> list[Result | None]:
        base = process_compiled(labels, self.global_rules) if self.global_rules else labels
        if base is None or not base:
            return [DropReason.RELABEL] * len(self.routes)
        apply = RuleCopies(base, drop=self._drop_after)
        results: list[Result | None] = []
        kept_by_primary = False
        routes = tuple(zip(self.routes, self._filter_only, strict=True))
        for route, filter_only in routes:
            if route.fallback:
                results.append(None)
                continue
            res = apply(route.rules, filter_only, route.escaping)
            kept_by_primary = kept_by_primary or (not isinstance(res, str) and not route.shadow)
            results.append(res)
        if not kept_by_primary:
            for i, (route, filter_only) in enumerate(routes):
                if route.fallback:
                    results[i] = apply(route.rules, filter_only, route.escaping)
        return results

    def route_series(self, labels: tuple[tuple[str, str], ...]) -> Outcome:
        """What the router does with a series of these labels (sorted by name): its cached
        outcome, or the miss path's (with the collision memory; then cached). For tools: the
        relabel debugger routes several series through one router."""
        raw = encode_labels(labels)
        entry = self._young.get(raw) or self._old.get(raw) or self._miss(raw)
        return tuple(
            slot if slot is None else REASONS[slot] if isinstance(slot, int) else slot[0]
            for slot in unpack_entry(raw, entry)
        )

    # -- collisions ------------------------------------------------------------------------

    def _collide(self, i: int, res: bytes | Renamed, key: bytes) -> bytes | DropReason:
        """Route ``i``'s escaped output labels for the series of cache key ``key``, or
        ``name_collision`` when an earlier series holds them (:class:`Claims`)."""
        if self._claims is None:
            raise InvariantError("a name collision is asked for only when a route escapes names")
        route, log = self.routes[i], self._collisions
        escaped: bytes = res.escaped if isinstance(res, Renamed) else res
        original = res.original if isinstance(res, Renamed) else None
        if isinstance(res, Renamed):
            sent = format_labels(res.detail.labels)
            for dropped, kept in () if route.shadow else res.detail.dropped:
                report = Collision(route.name, LABEL, sent, kept, dropped)
                log.add(
                    destination=route.name,
                    kind=LABEL,
                    key=(i, dropped, kept),
                    now=self._now,
                    describe=functools.partial(_same, report),
                )
        verdict = self._claims.check(
            route=i, escaped=escaped, original=original, key=key, twin=self._twin
        )
        if verdict.recorded:
            self._taint(escaped)
        if verdict.kept:
            return escaped
        if not route.shadow:
            claimant = verdict.claimant
            describe = functools.partial(self._describe, i, escaped, original or escaped, claimant)
            log.add(
                destination=route.name,
                kind=SERIES,
                key=(i, escaped, original),
                now=self._now,
                describe=describe,
            )
        return DropReason.NAME_COLLISION

    def _describe(
        self, i: int, escaped: bytes, dropped: bytes, claimant: bytes | None
    ) -> Collision:
        """The report of a series collision at route ``i`` (the kept series routed again)."""
        kept = "(unknown)"
        res = self._results(decode_labels(claimant))[i] if claimant is not None else None
        if isinstance(res, Renamed | bytes):
            kept = format_labels(decode_labels(res.original if isinstance(res, Renamed) else res))
        return Collision(
            self.routes[i].name,
            SERIES,
            format_labels(decode_labels(escaped)),
            kept,
            format_labels(decode_labels(dropped)),
        )

    def _twin(self, i: int, labels: bytes) -> bool:
        """Whether ``labels`` are a cached key that route ``i`` sends unchanged."""
        entry = self._young.get(labels) or self._old.get(labels)
        if entry is None:
            return False
        slot = unpack_entry(labels, entry)[i]
        return isinstance(slot, tuple) and slot[0] == labels

    def _taint(self, escaped: bytes) -> None:
        """A claim holds ``escaped``: label sets with its signature values go the full way
        (where the memory is asked); too many such values turn the shortcut off."""
        if not self._signature_names:
            return
        values = signature(escaped, self._signature_names, True)
        if values is None:
            return
        self._no_template.add(values)
        self._templates.pop(values, None)
        if len(self._no_template) > MAX_TEMPLATES:
            self._signature_names = None  # the shortcut off (for good)
            self._templates.clear()  # (the compiled loop may hold the dict until it returns)

    def take_collisions(self) -> tuple[dict[tuple[str, str], int], list[Collision], int]:
        """Collisions since the last call: counts by (destination, kind ``label``|``series``),
        the distinct ones to log (at most 10 a minute) and how many more were not logged."""
        return self._collisions.take()

    def route(
        self, data: bytes, *, now: float = 0.0, rw2: bool = False, max_bytes: int | None = None
    ) -> RoutedRequest:
        """Route every series and metadata entry of a decompressed write request, RW 1.0 or
        with ``rw2`` RW 2.0 (:func:`~rwrouter.routing.scan.scan_rw2`: ``max_bytes`` bounds its
        RW1 form, bytes, None: no bound; the result carries its ``written`` counts); ``now``:
        seconds on a monotonic clock, for the cache's age bound.

        Raises DecodeError for malformed input or a series with invalid labels (the whole
        request is refused), TooLargeError for an RW 2.0 request over ``max_bytes``.
        """
        self._now = now
        self.maintain(now)
        templates = self._templates if self._signature_names else None
        # Without the template shortcut, the compiled loop routes misses itself (_route_raw)
        plan = (
            None if self._plan is None or templates is not None else (*self._plan, self._drop_after)
        )
        args = (self._young, self._old, self._miss, self._filters, self._filter, REASONS)
        shortcut = (templates, self._signature_names or (), self._claims is not None, plan)
        if rw2:  # one pass over the RW 2.0 request, its RW1 form not written out
            scan, *counts, starts = scan_rw2(data, max_bytes, *args, *shortcut, self._review)
        else:
            scan, counts, starts = scan_request(data, *args, *shortcut, self._review), [], False
        self.hits += scan.hits
        self.misses += scan.misses
        self._young_bytes += scan.miss_bytes + scan.promoted_bytes
        self._copied_from_old(scan.promoted, scan.promoted_bytes)
        self._bound(now)
        out = RoutedRequest(
            shares=[
                Frames(body, index, samples, series)
                for body, index, samples, series in zip(
                    scan.bodies, scan.indexes, scan.samples, scan.series, strict=True
                )
            ],
            metadata=[[] for _ in self.routes],
            dropped={(i, DropReason(reason)): n for (i, reason), n in scan.dropped.items()},
            samples_in=scan.samples_in,
            series_in=scan.series_in,
            metadata_in=len(scan.metadata),
            written=Written(*counts) if rw2 else None,
            start_timestamps=starts,
        )
        for payload in scan.metadata:
            framed = self._metadata_outcomes.get(payload)
            if framed is None:
                framed = self._route_metadata(payload)
            if not framed:
                out.metadata_invalid += 1
            for i, entry in enumerate(framed):
                if entry is not None:
                    out.metadata[i].append(entry)
        return out

    def _route_metadata(self, payload: bytes) -> tuple[bytes | None, ...]:
        """Per destination the framed entry a metadata payload becomes (None: not sent there),
        remembered per payload (a sender repeats its metadata: Prometheus's RW 2.0 in every
        request); ``()`` for an entry without a family name (sent nowhere)."""
        family = metadata_family(payload)
        framed: tuple[bytes | None, ...] = ()
        if family:
            framed = tuple(
                frame_metadata(escape_metadata(payload, family, self._escaping[i]))
                if isinstance(res, bytes)
                else None
                for i, res in enumerate(self.route_labels((("__name__", family),)))
            )
        if len(self._metadata_outcomes) >= MAX_METADATA_OUTCOMES:
            self._metadata_outcomes.clear()
        self._metadata_outcomes[payload] = framed
        return framed

    def _filter(self, i: int, raw: RawSeries) -> tuple[bytes, int]:
        return filter_series(raw, self.routes[i])
