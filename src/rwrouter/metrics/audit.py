"""What a destination's series cost, for ``/metrics``: the audit's counts
(:mod:`rwrouter.audit.live`, audited destinations only) and the estimated share of each
metric name (:mod:`rwrouter.metrics.names`, every destination). Both are collected at
scrape time from a source :class:`rwrouter.pipeline.fanout.FanOut` sets."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rwrouter.routing.budget import BudgetState

# Per audited destination: (active series, samples counted since the start); and the limit.
AuditTotals = tuple[Mapping[str, tuple[int, int]], int]


class AuditMetrics:
    """The audit's families (``totals``), the series budgets' (``budgets``) and
    ``rwrouter_metric_name_share`` (``name_shares``), registered on ``registry``; set each
    one's ``source``."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self.name_shares = NameShareCollector()
        registry.register(self.name_shares)
        self.totals = AuditCollector()
        registry.register(self.totals)
        self.budgets = BudgetCollector()
        registry.register(self.budgets)


class NameShareCollector(Collector):
    """``rwrouter_metric_name_share{destination, metric}``: the estimated fraction of a
    destination's samples that carry this metric name, for its 10 largest names (from one
    routed request a second: :mod:`rwrouter.metrics.names`)."""

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, list[tuple[str, float]]]] | None = None

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "rwrouter_metric_name_share",
            "Estimated fraction (0-1) of a destination's samples with this metric name, for "
            "its 10 largest names (sampled from one request a second).",
            labels=["destination", "metric"],
        )
        for destination, shares in (self.source() if self.source else {}).items():
            for metric, share in shares:
                family.add_metric([destination, metric], share)
        yield family


class AuditCollector(Collector):
    """The audit (:mod:`rwrouter.audit.live`), per audited destination:
    ``rwrouter_audit_active_series``, ``rwrouter_audit_samples_total``, and
    ``rwrouter_audit_series_limit`` (``audit.series_limit``). Absent without an audited
    destination. With ``--workers`` each worker counts what it received: ``GET /-/audit``
    gives the union."""

    def __init__(self) -> None:
        self.source: Callable[[], AuditTotals] | None = None

    def collect(self) -> Iterator[Metric]:
        totals, limit = self.source() if self.source else ({}, 0)
        if not totals:
            return
        active = GaugeMetricFamily(
            "rwrouter_audit_active_series",
            "Series of an audited destination with a sample within audit.window.",
            labels=["destination"],
        )
        samples = CounterMetricFamily(
            "rwrouter_audit_samples",
            "Samples (with exemplars and native histograms) counted for an audited destination.",
            labels=["destination"],
        )
        for name, (series, counted) in totals.items():
            active.add_metric([name], series)
            samples.add_metric([name], counted)
        yield active
        yield samples
        yield GaugeMetricFamily(
            "rwrouter_audit_series_limit",
            "Active series a workspace holds (audit.series_limit).",
            limit,
        )


OVER_NAMES = 10  # metric names of the series over a budget exposed (the rest summed)
OTHER_NAMES = "(other names)"


def over_names(over: Mapping[str, int]) -> list[tuple[str, int]]:
    """The :data:`OVER_NAMES` metric names with the most series in ``over`` (largest first;
    ties by name), then :data:`OTHER_NAMES` with the rest's sum when there is a rest."""
    ranked = sorted(over.items(), key=lambda item: (-item[1], item[0]))
    rest = sum(count for _, count in ranked[OVER_NAMES:])
    return ranked[:OVER_NAMES] + ([(OTHER_NAMES, rest)] if rest else [])


class BudgetCollector(Collector):
    """The series budgets (:mod:`rwrouter.routing.budget`), per destination with a
    ``series_limit``: ``rwrouter_series_limit``, ``rwrouter_series_limit_active_series``,
    ``rwrouter_series_limit_over_series{metric}`` (:func:`over_names`) and
    ``rwrouter_series_limited_total{action}``.
    Absent without a budget. With ``--workers`` the workers share one budget: each exposes
    the whole limit and the shared count of active series (read at most a second ago), and
    its own over series and decisions (summed over the workers)."""

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, BudgetState]] | None = None

    def collect(self) -> Iterator[Metric]:
        states = self.source() if self.source else {}
        if not states:
            return
        limit = GaugeMetricFamily(
            "rwrouter_series_limit",
            "A destination's series_limit: active series it may hold.",
            labels=["destination"],
        )
        active = GaugeMetricFamily(
            "rwrouter_series_limit_active_series",
            "Active series of a destination with a series_limit (a sample within its "
            "series_window).",
            labels=["destination"],
        )
        over = GaugeMetricFamily(
            "rwrouter_series_limit_over_series",
            "New series past a destination's series_limit, not sent there until room frees "
            f"up, for its {OVER_NAMES} metric names with the most (the rest: {OTHER_NAMES}).",
            labels=["destination", "metric"],
        )
        limited = CounterMetricFamily(
            "rwrouter_series_limited",
            "Series decided over a destination's series_limit, by on_series_limit "
            "(fallback: sent to the fallback destination; drop: dropped).",
            labels=["destination", "action"],
        )
        for name, state in states.items():
            limit.add_metric([name], state.limit)
            active.add_metric([name], state.active)
            for metric, count in over_names(state.over):
                over.add_metric([name, metric], count)
            limited.add_metric([name, state.action], state.limited)
        yield from (limit, active, over, limited)
