"""HA pairs (``ha_dedup``) for ``/metrics``: each destination's settings and the elected
replica of each cluster, collected at scrape time from a source
:class:`rwrouter.pipeline.fanout.FanOut` sets (the election table, :mod:`rwrouter.pipeline.ha`:
with ``--workers`` every worker reads the same shared table)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Per destination with ha_dedup: (cluster_label, replica_label, failover_timeout seconds).
HaSettings = Mapping[str, tuple[str, str, float]]
# Per (destination, cluster) in the table: (destination, cluster, elected replica, unix
# seconds of its last request).
HaLeaders = Sequence[tuple[str, str, str, float]]


class HaCollector(Collector):
    """``rwrouter_ha_failover_timeout_seconds{destination, cluster_label, replica_label}``
    (the settings of each destination with ``ha_dedup``) and
    ``rwrouter_ha_elected_replica_timestamp_seconds{destination, cluster, replica}`` (when the
    elected replica of a cluster last sent, unix seconds: Cortex's
    ``cortex_ha_tracker_elected_replica_timestamp_seconds``). Absent without ``ha_dedup``."""

    def __init__(self) -> None:
        self.source: Callable[[], tuple[HaSettings, HaLeaders]] | None = None

    def collect(self) -> Iterator[Metric]:
        settings, leaders = self.source() if self.source else ({}, ())
        if not settings and not leaders:
            return
        timeout = GaugeMetricFamily(
            "rwrouter_ha_failover_timeout_seconds",
            "A destination's ha_dedup: its failover_timeout, and the labels naming a "
            "request's cluster and replica.",
            labels=["destination", "cluster_label", "replica_label"],
        )
        for name, (cluster_label, replica_label, seconds) in settings.items():
            timeout.add_metric([name, cluster_label, replica_label], seconds)
        seen = GaugeMetricFamily(
            "rwrouter_ha_elected_replica_timestamp_seconds",
            "When the elected replica of an HA cluster last sent to a destination with "
            "ha_dedup (unix seconds); another replica is elected once it is silent for "
            "longer than failover_timeout.",
            labels=["destination", "cluster", "replica"],
        )
        for destination, cluster, replica, at in leaders:
            seen.add_metric([destination, cluster, replica], at)
        yield from (timeout, seen)
