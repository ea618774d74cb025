"""The sender's external labels in a comparison (pure; ``rwrouter compare --external-label``).

A Prometheus adds its ``global.external_labels`` to every series it sends by remote write
(to each series that does not already have a label of that name), but not to what it stores
in its own TSDB. When the self-hosted store ``compare`` queries is the sender itself, each
migrated series is therefore in the workspace with labels its self-hosted copy lacks, and a
plain selector finds every series missing on both sides. :class:`ExternalLabels` makes the
comparison see both stores as the sender does: a self-hosted series gets the external labels
it lacks before the router's rules are applied (the rules saw them), and then, on both sides,
a label equal to an external label (same name and value) is left out of the label set that
is compared (:meth:`ExternalLabels.keyed`). An aggregation's result
(``avg by (Hostname) (...)``) has none of them, and is compared as it is.

:func:`labels_only_in_workspace` finds the other case: labels that every series missing in
the self-hosted store has and no series missing in the workspace has, the likely external
labels of a sender, for a hint.

Sources: Prometheus configuration docs (``external_labels``: "The labels to add to any time
series or alerts when communicating with external systems"); Prometheus' remote write
storage, which adds them to series lacking a label of that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rwrouter.compare.answer import Labels, Value
from rwrouter.compare.parity import Expected

__all__ = ["ExternalLabels", "labels_only_in_workspace", "parse_external_label"]


def parse_external_label(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (split at the first ``=``) as a label pair. Raises ValueError for a
    missing ``=``, an empty name or ``__name__`` (Prometheus refuses external labels named
    ``__name__``; any other UTF-8 name is valid in Prometheus 3)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    if name == "__name__":
        raise ValueError("an external label cannot be __name__")
    return name, value


@dataclass(frozen=True, slots=True)
class ExternalLabels:
    """The sender's external labels, as (name, value) pairs with distinct names."""

    pairs: tuple[tuple[str, str], ...]

    def strip(self, labels: Labels) -> Labels:
        """``labels`` without the pairs equal to an external label (a label of the same name
        with another value stays: the series had it before the sender added anything)."""
        if not self.pairs:
            return labels
        external = set(self.pairs)
        return tuple(pair for pair in labels if pair not in external)

    def add(self, labels: Labels) -> Labels:
        """``labels`` with each external label it has no label of that name for (sorted by
        name), as the sender's remote write adds them."""
        names = {name for name, _ in labels}
        extra = [pair for pair in self.pairs if pair[0] not in names]
        return tuple(sorted((*labels, *extra))) if extra else labels

    def expected(self, inner: Expected) -> Expected:
        """``inner`` (the router's rules) seen through the sender: a series with a metric name
        gets the external labels it lacks, then the rules, then :meth:`strip`; a series
        without one (an aggregation's result) is only stripped."""

        def expected(labels: Labels) -> Labels | None:
            if not any(name == "__name__" for name, _ in labels):
                return self.strip(labels)
            target = inner(self.add(labels))
            return None if target is None else self.strip(target)

        return expected

    def keyed(
        self, series: Mapping[Labels, Mapping[int, Value]]
    ) -> dict[Labels, Mapping[int, Value]]:
        """An answer (either store's) keyed by stripped label sets: the workspace's copies
        carry the external labels, and a self-hosted store that is not the sender (a
        federating one) may too. Two series that become one when stripped (one with an
        external label, one without) keep their own label sets, so that neither hides the
        other."""
        stripped: dict[Labels, list[Labels]] = {}
        for labels in series:
            stripped.setdefault(self.strip(labels), []).append(labels)
        out: dict[Labels, Mapping[int, Value]] = {}
        for key, originals in stripped.items():
            if len(originals) == 1:
                out[key] = series[originals[0]]
            else:
                out.update((labels, series[labels]) for labels in originals)
        return out


def labels_only_in_workspace(
    missing_in_self_hosted: Sequence[Labels], missing_in_workspace: Sequence[Labels]
) -> tuple[tuple[str, str], ...]:
    """The (name, value) pairs every series of ``missing_in_self_hosted`` (workspace series)
    has and whose names no series of ``missing_in_workspace`` (self-hosted series) has; empty
    unless both are non-empty. Such labels are most likely the sender's external labels
    (:class:`ExternalLabels`)."""
    if not missing_in_self_hosted or not missing_in_workspace:
        return ()
    common = set(missing_in_self_hosted[0])
    for labels in missing_in_self_hosted[1:]:
        common &= set(labels)
    names = {name for labels in missing_in_workspace for name, _ in labels}
    return tuple(sorted(pair for pair in common if pair[0] not in names and pair[0] != "__name__"))
