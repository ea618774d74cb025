"""The outcome of one label set (pure): each destination's rules on its own copy (Prometheus
relabel semantics), its escaping scheme (:mod:`rwrouter.routing.escape`), the
exemplar/histogram filters, and the pieces the cache's template shortcut is made of. The
routing semantics (fallback, caching, collisions) are in :mod:`rwrouter.routing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from rwrouter.config.model import EscapingScheme, HaDedupConfig
from rwrouter.reasons import DropReason
from rwrouter.relabel import FILTER_ACTIONS, Action, RelabelConfig, passes, process_compiled
from rwrouter.routing.cache import DROPPED, KEPT_SAME, NOT_SENT, Slot
from rwrouter.routing.escape import ALLOW_UTF8, Escaped, escape_labels, needs_escaping
from rwrouter.wire import RawSeries, strip_fields
from rwrouter.wire.accelerator import encode_labels

# The drop reasons a cache entry holds, by index (its reason byte); the scan loop counts
# DropReason.FILTERED itself (only exemplars or histograms the destination does not take).
REASONS = (
    DropReason.RELABEL,
    DropReason.INVALID,
    DropReason.NAME_COLLISION,
    DropReason.SERIES_LIMIT,
)

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
    escaping: EscapingScheme = ALLOW_UTF8
    """``metric_name_escaping_scheme``: how its output names are written
    (:class:`~rwrouter.config.model.EscapingScheme`)."""
    ha_dedup: HaDedupConfig | None = None
    """``ha_dedup``: only the elected HA replica's requests reach it (:mod:`rwrouter.routing.ha`,
    applied by the fan-out); its ``rules`` end with the replica label's removal."""


class Renamed(NamedTuple):
    """Output labels that escaping changed: ``escaped`` (encoded: what is sent), ``original``
    (encoded, before escaping) and ``detail`` (the names changed or dropped)."""

    escaped: bytes
    original: bytes
    detail: Escaped


Result = bytes | DropReason | Renamed
"""One destination's result for a label set: encoded output labels (that escaping did not
change), the drop reason, or :class:`Renamed`."""


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


def template_parts(slots: list[Slot]) -> tuple[bytes, ...]:
    """An entry of kept-unchanged/dropped/not-sent slots as the pieces around its shard
    hashes: ``hash.join(parts)`` is the entry of a label set with that hash."""
    parts, current = [], bytearray()
    for slot in slots:
        if slot is None:
            current.append(NOT_SENT)
        elif isinstance(slot, int):
            current += bytes((DROPPED, slot))
        else:
            current.append(KEPT_SAME)
            parts.append(bytes(current))
            current = bytearray()
    parts.append(bytes(current))
    return tuple(parts)


class RuleCopies:
    """Each destination's rules on its own copy of one label set (sorted by name), then its
    escaping scheme: a :data:`Result`. Rules that only filter (keep/drop,
    :data:`FILTER_ACTIONS`) leave the set unchanged, so they are checked without copying it,
    and the set is encoded (and escaped) once per scheme for all the destinations that keep
    it unchanged. ``drop``: a label removed after the rules, before the output is judged
    (``__tenant__``: :mod:`rwrouter.routing.tenants`)."""

    __slots__ = ("_drop", "_finished", "_labels", "_mapping")

    def __init__(self, labels: tuple[tuple[str, str], ...], *, drop: str | None = None) -> None:
        self._labels = labels
        self._drop = drop
        self._mapping: dict[str, str] | None = None
        self._finished: dict[str, Result] = {}

    def _output(self, labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        if self._drop is None:
            return labels
        return tuple(pair for pair in labels if pair[0] != self._drop)

    def __call__(
        self,
        rules: tuple[RelabelConfig, ...],
        filter_only: bool,
        escaping: EscapingScheme = ALLOW_UTF8,
    ) -> Result:
        if filter_only:
            if rules:
                if self._mapping is None:
                    self._mapping = dict(self._labels)
                if not passes(self._mapping, rules):
                    return DropReason.RELABEL
            finished = self._finished.get(escaping)
            if finished is None:
                finished = finish(self._output(self._labels), escaping)
                self._finished[escaping] = finished
            return finished
        result = process_compiled(self._labels, rules)
        if not result:
            return DropReason.RELABEL
        return finish(self._output(result), escaping)


def finish(labels: tuple[tuple[str, str], ...], escaping: EscapingScheme = ALLOW_UTF8) -> Result:
    """The output labels of a destination (sorted by name) encoded, escaped by ``escaping``;
    ``relabel`` when none is left, ``invalid`` without ``__name__`` or with an empty name
    (judged before escaping, which never empties a name)."""
    if not labels:
        return DropReason.RELABEL
    names = [name for name, _ in labels]
    if "__name__" not in names or "" in names:  # "" can come from a labelmap replacement
        return DropReason.INVALID
    encoded = encode_labels(labels)
    if escaping == ALLOW_UTF8 or not needs_escaping(labels):
        return encoded
    escaped = escape_labels(labels, escaping)
    if not escaped.changed:
        return encoded
    return Renamed(encode_labels(escaped.labels), encoded, escaped)
