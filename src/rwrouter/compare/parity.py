"""Result parity of one range query answered by two stores (pure; ``rwrouter compare``).

Each store's answer is read by :func:`~rwrouter.compare.answer.parse_matrix` (re-exported
here) into series by label set, each a mapping of timestamps (ms since epoch) to values (a
float, or a native histogram as :class:`Histogram`). :func:`compare` then says which
series are in one store only, and which points differ: at a timestamp one store has and
the other has not, or with values not equal within a relative tolerance (:func:`close`).

Sources: Prometheus HTTP API docs ("Range queries", "Expression query result formats":
``values`` as ``[<unix seconds>, "<value>"]``, ``histograms`` as ``[<unix seconds>,
{count, sum, buckets: [[<boundary rule>, "<left>", "<right>", "<count>"], ...]}]``; float
values as strings, ``NaN``, ``+Inf`` and ``-Inf`` included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rwrouter.compare.answer import AnswerError, Histogram, Labels, Matrix, Value, parse_matrix
from rwrouter.relabel.series import format_labels

__all__ = [
    "AnswerError",
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
        """``<series> at <unix seconds>: self-hosted <v>, workspace <v>``."""
        return (
            f"{format_labels(self.labels)} at {self.timestamp_ms / 1000:g}: "
            f"self-hosted {self.self_hosted}, workspace {self.workspace}"
        )


@dataclass(frozen=True, slots=True)
class FamilyCounts:
    """Series of one family (metric name): in both stores, only in the self-hosted store
    (missing in the workspace), only in the workspace, with differing points, and in the
    self-hosted store but not migrated (the configuration does not send them to the
    workspace: not a difference)."""

    in_both: int = 0
    missing_in_workspace: int = 0
    missing_in_self_hosted: int = 0
    differing: int = 0
    not_migrated: int = 0


@dataclass(frozen=True, slots=True)
class Parity:
    """What :func:`compare` found. ``differences`` holds the first ``limit`` differing points
    (``differing_points`` counts them all); ``families`` the counts by metric name."""

    series_compared: int
    points_compared: int
    missing_in_workspace: tuple[Labels, ...]
    missing_in_self_hosted: tuple[Labels, ...]
    not_migrated: tuple[Labels, ...]
    differing_series: int
    differing_points: int
    differences: tuple[Difference, ...]
    families: Mapping[str, FamilyCounts]

    @property
    def equal(self) -> bool:
        """No series missing on either side and no differing point (series not migrated
        do not count)."""
        return not (
            self.missing_in_workspace or self.missing_in_self_hosted or self.differing_series
        )


#: How the workspace names a self-hosted series: its label set there, or None when the
#: configuration does not send it to the workspace (not migrated).
Expected = Callable[[Labels], Labels | None]


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
    ``tolerance``: relative (:func:`close`); ``limit``: differing points kept as examples."""
    families: dict[str, dict[str, int]] = {}

    def count(labels: Labels, field: str) -> None:
        counts = families.setdefault(family_of(labels), {})
        counts[field] = counts.get(field, 0) + 1

    missing_ws, not_migrated, seen = [], [], set()
    differences: list[Difference] = []
    points = differing_series = differing_points = 0
    for labels, mine in sorted(self_hosted.items()):
        target = labels if expected is None else expected(labels)
        if target is None:
            not_migrated.append(labels)
            count(labels, "not_migrated")
            continue
        theirs = workspace.get(target)
        if theirs is None:
            missing_ws.append(labels)
            count(labels, "missing_in_workspace")
            continue
        seen.add(target)
        count(labels, "in_both")
        points += len(mine.keys() | theirs.keys())
        found = _point_differences(labels, mine, theirs, tolerance)
        if found:
            differing_series += 1
            differing_points += len(found)
            count(labels, "differing")
            differences.extend(found[: max(0, limit - len(differences))])
    missing_sh = [labels for labels in sorted(workspace) if labels not in seen]
    for labels in missing_sh:
        count(labels, "missing_in_self_hosted")
    return Parity(
        series_compared=len(seen),
        points_compared=points,
        missing_in_workspace=tuple(missing_ws),
        missing_in_self_hosted=tuple(missing_sh),
        not_migrated=tuple(not_migrated),
        differing_series=differing_series,
        differing_points=differing_points,
        differences=tuple(differences),
        families={name: FamilyCounts(**c) for name, c in sorted(families.items())},
    )


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
