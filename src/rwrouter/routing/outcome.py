"""The outcome of one label set (pure): each destination's rules on its own copy (Prometheus
relabel semantics), the exemplar/histogram filters, and the pieces the cache's template
shortcut is made of. The routing semantics (fallback, caching) are in :mod:`rwrouter.routing`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rwrouter.relabel import FILTER_ACTIONS, Action, RelabelConfig, passes, process
from rwrouter.wire import RawSeries, strip_fields
from rwrouter.wire.scan import DROPPED, KEPT_SAME, NOT_SENT, Item, encode_labels

# Drop reasons (label values of rwrouter_samples_dropped_total); FILTERED (in wire.scan): only
# exemplars or histograms the destination does not take.
RELABEL = "relabel"
INVALID = "invalid"
REASONS = (RELABEL, INVALID)  # what a cache entry's drop reason index refers to

_EXEMPLARS, _HISTOGRAMS = 3, 4


@dataclass(frozen=True, slots=True)
class Route:
    """What routing needs to know about one destination. ``shadow``: its outcome is computed
    (for the audit) but does not count as keeping a series for a ``fallback`` route."""

    name: str
    rules: tuple[RelabelConfig, ...] = ()
    fallback: bool = False
    shadow: bool = False
    send_exemplars: bool = True
    send_native_histograms: bool = True



def filter_series(raw: RawSeries, route: Route) -> tuple[bytes, int]:
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


def labels_read(
    global_rules: tuple[RelabelConfig, ...], routes: tuple[Route, ...]
) -> tuple[bytes, ...] | None:
    """The label names filter-only rules read (with ``__name__``, whose absence makes a series
    invalid), sorted by byte order; None when global rules exist or a rule changes labels."""
    if global_rules:
        return None
    names = {"__name__"}
    for route in routes:
        for rule in route.rules:
            if rule.action not in FILTER_ACTIONS:
                return None
            names.update(rule.source_labels)
            if rule.action in (Action.KEEPEQUAL, Action.DROPEQUAL):
                names.add(rule.target_label)
    return tuple(sorted(name.encode() for name in names))


def template_parts(items: list[Item]) -> tuple[bytes, ...]:
    """An entry of kept-unchanged/dropped/not-sent items as the pieces around its shard
    hashes: ``hash.join(parts)`` is the entry of a label set with that hash."""
    parts, current = [], bytearray()
    for item in items:
        if item is None:
            current.append(NOT_SENT)
        elif isinstance(item, int):
            current += bytes((DROPPED, item))
        else:
            current.append(KEPT_SAME)
            parts.append(bytes(current))
            current = bytearray()
    parts.append(bytes(current))
    return tuple(parts)


class RuleCopies:
    """Each destination's rules on its own copy of one label set (sorted by name): encoded
    labels, or the drop reason. Rules that only filter (keep/drop, :data:`FILTER_ACTIONS`)
    leave the set unchanged, so they are checked without copying it, and the set is encoded
    once for all the destinations that keep it unchanged."""

    __slots__ = ("_encoded", "_labels", "_mapping")

    def __init__(self, labels: tuple[tuple[str, str], ...]) -> None:
        self._labels = labels
        self._mapping: dict[str, str] | None = None
        self._encoded: bytes | str | None = None

    def __call__(self, rules: tuple[RelabelConfig, ...], filter_only: bool) -> bytes | str:
        if filter_only:
            if rules:
                if self._mapping is None:
                    self._mapping = dict(self._labels)
                if not passes(self._mapping, rules):
                    return RELABEL
            if self._encoded is None:
                self._encoded = _finish(self._labels)
            return self._encoded
        result = process(self._labels, rules)
        if not result:
            return RELABEL
        return _finish(result)


def _finish(labels: tuple[tuple[str, str], ...]) -> bytes | str:
    """The encoded output labels, or INVALID without ``__name__`` or with an empty name."""
    if not labels:
        return RELABEL
    names = [name for name, _ in labels]
    if "__name__" not in names or "" in names:  # "" can come from a labelmap replacement
        return INVALID
    return encode_labels(labels)
