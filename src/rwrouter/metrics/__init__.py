"""rwrouter's own metrics, on an injected prometheus-client registry (the only importer of
prometheus_client). Names follow Prometheus conventions: ``_total`` counters, base units
(seconds, bytes), ``destination`` labels carrying the remote_write ``name``.

One group per component, each in its module and each registered on the shared registry;
a component gets the group(s) it updates:

- ``receive`` (:mod:`~rwrouter.metrics.receive`): the receive side, ``server/app.py``;
- ``cache`` (:mod:`~rwrouter.metrics.cache`): the routing cache, counted by the fan-out;
- ``queue`` (:mod:`~rwrouter.metrics.queue`): a destination's disk queue and read-ahead;
- ``send`` (:mod:`~rwrouter.metrics.send`): what became of a destination's samples and
  metadata, its requests and senders (the deliverer, shards, reader, metadata queue);
- ``deadletter`` (:mod:`~rwrouter.metrics.deadletter`): the dead-letter store;
- ``audit`` (:mod:`~rwrouter.metrics.audit`): the audit's counts and the name shares;
- ``process`` (:mod:`~rwrouter.metrics.process`): build, reloads, write connections,
  credential expiry.

Expositions read back (``--workers``' merged view, the status page's figures) are in
:mod:`rwrouter.metrics.expositions`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from rwrouter.metrics.audit import AuditMetrics, AuditTotals
from rwrouter.metrics.cache import CacheMetrics
from rwrouter.metrics.deadletter import DeadLetterMetrics
from rwrouter.metrics.expositions import merge_expositions, status_snapshot
from rwrouter.metrics.process import ProcessMetrics
from rwrouter.metrics.queue import QueueMetrics
from rwrouter.metrics.receive import ReceiveMetrics
from rwrouter.metrics.send import SendMetrics

# No *_created series: they would double the exposition for no use here.
disable_created_metrics()  # type: ignore[no-untyped-call]


class Metrics:
    """All self-metrics: the groups above on one registry (a new ``CollectorRegistry`` unless
    one is given). Build one per process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.process = ProcessMetrics(registry=r)
        self.receive = ReceiveMetrics(registry=r)
        self.cache = CacheMetrics(registry=r)
        self.queue = QueueMetrics(registry=r)
        self.send = SendMetrics(registry=r)
        self.deadletter = DeadLetterMetrics(registry=r)
        self.audit = AuditMetrics(registry=r)

    def forget_destination(self, name: str) -> None:
        """Remove a destination's gauges (after a reload removed it); counters stay."""
        self.queue.forget(name)
        self.send.forget(name)
        self.deadletter.forget(name)
        self.process.forget(name)

    @staticmethod
    def watch(gauge: Gauge, read: Callable[[], float], *labels: str) -> None:
        """Make ``gauge`` (with ``labels``) report ``read()`` at every scrape."""
        (gauge.labels(*labels) if labels else gauge).set_function(read)

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition of the registry and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = [
    "AuditMetrics",
    "AuditTotals",
    "CacheMetrics",
    "DeadLetterMetrics",
    "Metrics",
    "ProcessMetrics",
    "QueueMetrics",
    "ReceiveMetrics",
    "SendMetrics",
    "merge_expositions",
    "status_snapshot",
]
