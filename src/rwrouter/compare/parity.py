"""Result parity of one range query answered by two stores (pure; ``rwrouter compare``).

Each store's answer is read by :func:`~rwrouter.compare.answer.parse_matrix` (re-exported
here) into series by label set, each a mapping of timestamps (ms since epoch) to values (a
float, or a native histogram as :class:`Histogram`). :func:`compare` then says which series
are in one store only, which are in the workspace although the configuration's rules do
not send them there (unexpected), which self-hosted series the rules merge into one
workspace series (a :class:`Collision`), and which points differ: at a timestamp one store
has and the other has not, or with values not equal within a relative tolerance
(:func:`close`). Equal with nothing compared is *no data* (:attr:`Parity.no_data`), not
parity.

Sources: Prometheus HTTP API docs ("Range queries", "Expression query result formats");
the router's own rules (:func:`rwrouter.routing.explain.explain`) for what the workspace
should hold.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rwrouter.compare.answer import AnswerError, Histogram, Labels, Matrix, Value, parse_matrix
from rwrouter.relabel.series import format_labels

__all__ = [
    "NO_NAME",
    "AnswerError",
    "Collision",
    "Difference",
    "FamilyCounts",
    "Histogram",
    "Labels",
    "Matrix",
    "Parity",
    "close",
    "compare",
    "family_of",
    "parse_matrix",
]

Series = Mapping[Labels, Mapping[int, Value]]  # what compare reads: a Matrix, or a literal

NO_NAME = "(no __name__)"  # the family of a series without a metric name (an aggregation)


def close(a: Value, b: Value, *, tolerance: float) -> bool:
    """Whether two values are equal within the relative ``tolerance``
    (``|a - b| <= tolerance * max(|a|, |b|)``, :func:`math.isclose` without an absolute
    tolerance: 0 equals only 0). NaN equals NaN (the stores agree there is no number);
    infinities equal only themselves. Histograms: the same buckets, and count, sum and every
    bucket count close."""
    if isinstance(a, Histogram) or isinstance(b, Histogram):
        if not (isinstance(a, Histogram) and isinstance(b, Histogram)):
            return False
        pairs = [(a.count, b.count), (a.sum, b.sum)]
        if [x[:3] for x in a.buckets] != [x[:3] for x in b.buckets]:
            return False
        pairs += [(x[3], y[3]) for x, y in zip(a.buckets, b.buckets, strict=True)]
        return all(close(x, y, tolerance=tolerance) for x, y in pairs)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=0.0)


def family_of(labels: Labels) -> str:
    """The metric name of a series, or :data:`NO_NAME` (a result of an aggregation)."""
    return dict(labels).get("__name__", NO_NAME)


@dataclass(frozen=True, slots=True)
class Difference:
    """One point that differs: the series (the self-hosted store's labels, else the
    workspace's), its timestamp (ms since epoch) and each store's value as text (``absent``:
    no point at that timestamp)."""

    labels: Labels
    timestamp_ms: int
    self_hosted: str
    workspace: str

    def text(self) -> str:
        """``<series> at <RFC 3339 time, ms>: self-hosted <v>, workspace <v>``."""
        return (
            f"{format_labels(self.labels)} at {rfc3339_ms(self.timestamp_ms)}: "
            f"self-hosted {self.self_hosted}, workspace {self.workspace}"
        )


def rfc3339_ms(ms: int) -> str:
    """``ms`` since the epoch as RFC 3339 UTC to the millisecond
    (``2026-12-06T17:00:15.000Z``); outside datetime's years, exact unix seconds."""
    try:
        moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    except (OverflowError, ValueError, OSError):
        return f"{ms / 1000:.3f}"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Collision:
    """Several self-hosted series (``self_hosted``, sorted) that the configuration sends to
    the workspace under one label set (``workspace``): its rules make them one series
    there (a ``labeldrop``, a ``replace`` that loses what told them apart), so the
    workspace holds one series where the self-hosted store has several and their samples
    collide (the workspace keeps one value per timestamp, refuses the others)."""

    workspace: Labels
    self_hosted: tuple[Labels, ...]

    def text(self) -> str:
        """``<workspace series> <- <self-hosted series>, <self-hosted series>, ...``."""
        return f"{format_labels(self.workspace)} <- " + ", ".join(
            format_labels(labels) for labels in self.self_hosted
        )


@dataclass(frozen=True, slots=True)
class FamilyCounts:
    """Series of one family (metric name): in both stores, only in the self-hosted store
    (missing in the workspace), only in the workspace, in the workspace but not routed there
    by the rules (unexpected), self-hosted series in a :class:`Collision`, with differing
    points, and in the self-hosted store but not migrated (the configuration does not send
    them to the workspace: not a difference)."""

    in_both: int = 0
    missing_in_workspace: int = 0
    missing_in_self_hosted: int = 0
    unexpected_in_workspace: int = 0
    colliding: int = 0
    differing: int = 0
    not_migrated: int = 0


@dataclass(frozen=True, slots=True)
class Parity:
    """What :func:`compare` found. ``series_compared``: series whose points were compared
    (``points_compared``); ``differences`` holds the first ``limit`` differing points
    (``differing_points`` counts them all, ``first_difference_ms`` is the earliest one's
    time); ``families`` the counts by metric name."""

    series_compared: int
    points_compared: int
    missing_in_workspace: tuple[Labels, ...]
    missing_in_self_hosted: tuple[Labels, ...]
    unexpected_in_workspace: tuple[Labels, ...]
    collisions: tuple[Collision, ...]
    not_migrated: tuple[Labels, ...]
    differing_series: int
    differing_points: int
    differences: tuple[Difference, ...]
    families: Mapping[str, FamilyCounts]
    #: The earliest timestamp (ms since epoch) of any differing point; None: none differs.
    first_difference_ms: int | None = None

    @property
    def equal(self) -> bool:
        """No series missing on either side, none unexpected, no collision and no differing
        point (series not migrated do not count)."""
        return not (
            self.missing_in_workspace
            or self.missing_in_self_hosted
            or self.unexpected_in_workspace
            or self.collisions
            or self.differing_series
        )

    @property
    def no_data(self) -> bool:
        """Equal, but with nothing compared: neither store has a series the configuration
        sends to the workspace (both answers empty, or only series not migrated). Not
        parity: a mistyped query looks like this."""
        return self.equal and self.series_compared == 0


#: How the workspace names a self-hosted series: its label set there, or None when the
#: configuration does not send it to the workspace (not migrated).
Expected = Callable[[Labels], Labels | None]


class _Tally:
    """What :func:`compare` finds, as it goes."""

    def __init__(self, tolerance: float, limit: int) -> None:
        self.tolerance, self.limit = tolerance, limit
        self.families: dict[str, dict[str, int]] = {}
        self.missing_ws: list[Labels] = []
        self.not_migrated: list[Labels] = []
        self.collisions: list[Collision] = []
        self.differences: list[Difference] = []
        self.compared = self.points = self.differing_series = self.differing_points = 0
        self.first_difference_ms: int | None = None

    def count(self, labels: Labels, field: str) -> None:
        counts = self.families.setdefault(family_of(labels), {})
        counts[field] = counts.get(field, 0) + 1

    def pair(self, labels: Labels, mine: Mapping[int, Value], theirs: Mapping[int, Value]) -> None:
        """Compare one series present in both stores, point by point."""
        self.compared += 1
        self.count(labels, "in_both")
        self.points += len(mine.keys() | theirs.keys())
        found = _point_differences(labels, mine, theirs, self.tolerance)
        if found:
            self.differing_series += 1
            self.differing_points += len(found)
            first = found[0].timestamp_ms  # found is in timestamp order
            if self.first_difference_ms is None or first < self.first_difference_ms:
                self.first_difference_ms = first
            self.count(labels, "differing")
            self.differences.extend(found[: max(0, self.limit - len(self.differences))])


def compare(
    self_hosted: Series,
    workspace: Series,
    *,
    tolerance: float,
    expected: Expected | None = None,
    limit: int = 10,
) -> Parity:
    """Compare two answers of the same query. ``expected`` maps a self-hosted series to the
    label set the workspace holds it under (its rules and name escaping applied), or None
    when it is not migrated; by default every series is expected under its own labels.
    ``tolerance``: relative (:func:`close`); ``limit``: differing points kept as examples.

    Several self-hosted series expected under one label set are a :class:`Collision` (their
    points are not compared: the workspace's one series cannot match them all). A workspace
    series no self-hosted series is expected under is *unexpected* when the rules do not
    send it there (:func:`_unexpected`), else missing in the self-hosted store."""
    tally = _Tally(tolerance, limit)
    targets: dict[Labels, list[Labels]] = {}  # workspace label set -> self-hosted series
    for labels in sorted(self_hosted):
        target = labels if expected is None else expected(labels)
        if target is None:
            tally.not_migrated.append(labels)
            tally.count(labels, "not_migrated")
        else:
            targets.setdefault(target, []).append(labels)
    for target, sources in targets.items():
        theirs = workspace.get(target)
        if len(sources) > 1:
            tally.collisions.append(Collision(target, tuple(sources)))
            for labels in sources:
                tally.count(labels, "colliding")
        if theirs is None:
            tally.missing_ws.extend(sources)
            for labels in sources:
                tally.count(labels, "missing_in_workspace")
        elif len(sources) == 1:
            tally.pair(sources[0], self_hosted[sources[0]], theirs)
    families = {family_of(target) for target in targets}
    unmatched = [labels for labels in sorted(workspace) if labels not in targets]
    unexpected = [w for w in unmatched if _unexpected(w, self_hosted, expected, families)]
    missing_sh = [w for w in unmatched if w not in set(unexpected)]
    for labels in unexpected:
        tally.count(labels, "unexpected_in_workspace")
    for labels in missing_sh:
        tally.count(labels, "missing_in_self_hosted")
    return Parity(
        series_compared=tally.compared,
        points_compared=tally.points,
        missing_in_workspace=tuple(tally.missing_ws),
        missing_in_self_hosted=tuple(missing_sh),
        unexpected_in_workspace=tuple(unexpected),
        collisions=tuple(tally.collisions),
        not_migrated=tuple(tally.not_migrated),
        differing_series=tally.differing_series,
        differing_points=tally.differing_points,
        first_difference_ms=tally.first_difference_ms,
        differences=tuple(tally.differences),
        families={name: FamilyCounts(**c) for name, c in sorted(tally.families.items())},
    )


def _unexpected(
    labels: Labels, self_hosted: Series, expected: Expected | None, families: set[str]
) -> bool:
    """Whether a workspace series that no self-hosted series is expected under is one the
    rules do not send there: the self-hosted store has it, and the rules send it elsewhere
    or nowhere; or the rules applied to its labels do not give them back, and no
    self-hosted series of the answer is expected in its family (which a renaming rule, e.g.
    name escaping, would explain: then it is missing in the self-hosted store)."""
    if expected is None:
        return False
    if labels in self_hosted:
        return True  # else it would have been expected under its own labels
    return expected(labels) != labels and family_of(labels) not in families


def _point_differences(
    labels: Labels, mine: Mapping[int, Value], theirs: Mapping[int, Value], tolerance: float
) -> list[Difference]:
    found = []
    for ts in sorted(mine.keys() | theirs.keys()):
        a, b = mine.get(ts), theirs.get(ts)
        if a is None or b is None or not close(a, b, tolerance=tolerance):
            found.append(Difference(labels, ts, _text(a), _text(b)))
    return found


def _text(value: Value | None) -> str:
    if value is None:
        return "absent"
    if isinstance(value, Histogram):
        return f"histogram(count={value.count:.17g}, sum={value.sum:.17g})"
    return f"{value:.17g}"
