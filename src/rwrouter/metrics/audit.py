"""What a destination's series cost, for ``/metrics``: the audit's counts
(:mod:`rwrouter.audit.live`, audited destinations only) and the estimated share of each
metric name (:mod:`rwrouter.metrics.names`, every destination). Both are collected at
scrape time from a source :class:`rwrouter.pipeline.fanout.FanOut` sets."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Per audited destination: (active series, samples counted since the start); and the limit.
AuditTotals = tuple[Mapping[str, tuple[int, int]], int]


class AuditMetrics:
    """The audit's families (``totals``) and ``rwrouter_metric_name_share``
    (``name_shares``), registered on ``registry``; set each one's ``source``."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self.name_shares = NameShareCollector()
        registry.register(self.name_shares)
        self.totals = AuditCollector()
        registry.register(self.totals)


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
