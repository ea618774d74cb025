"""rwrouter's own metrics, on an injected prometheus-client registry (the only importer of
prometheus_client). Names follow Prometheus conventions: ``_total`` counters, base units
(seconds, bytes), ``destination`` labels carrying the remote_write ``name``. Expositions
read back (``--workers``' merged view, the status page's figures) are in
:mod:`rwrouter.metrics.expositions`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from rwrouter import __version__
from rwrouter.metrics.expositions import merge_expositions, status_snapshot
from rwrouter.protocol import MESSAGES
from rwrouter.wire.accelerator import ACCELERATED

# No *_created series: they would double the exposition for no use here.
disable_created_metrics()  # type: ignore[no-untyped-call]

_SEND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """All self-metrics. Build one per process with its own ``CollectorRegistry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        Gauge(
            "rwrouter_build_info",
            "Build information: version, and whether the compiled accelerator of the hot path "
            "runs (accelerated=\"true\") or the pure-Python fallback (\"false\").",
            ["version", "accelerated"],
            registry=r,
        ).labels(__version__, "true" if ACCELERATED else "false").set(1)
        self.requests = Counter(
            "rwrouter_received_requests",
            "Remote write requests received, by the HTTP status answered.",
            ["code"],
            registry=r,
        )
        self.received_protocol_requests = Counter(
            "rwrouter_received_protocol_requests",
            "Remote write requests received, by the protocol their Content-Type named "
            "(1.0: prometheus.WriteRequest, 2.0: io.prometheus.write.v2.Request), whatever "
            "the answer.",
            ["protocol"],
            registry=r,
        )
        self.received_series = Counter(
            "rwrouter_received_series", "Series received in accepted requests.", registry=r
        )
        self.received_samples = Counter(
            "rwrouter_received_samples",
            "Samples, exemplars and histograms received in accepted requests.",
            registry=r,
        )
        self.received_metadata = Counter(
            "rwrouter_received_metadata", "Metadata entries received.", registry=r
        )
        self.request_duration = Histogram(
            "rwrouter_receive_duration_seconds",
            "Time to decode, route and enqueue a remote write request.",
            registry=r,
        )
        self.sent_samples = Counter(
            "rwrouter_sent_samples",
            "Samples (incl. exemplars and histograms) delivered with a 2xx answer.",
            ["destination"],
            registry=r,
        )
        self.already_delivered = Counter(
            "rwrouter_samples_already_delivered",
            "Samples sent again after a crash that the destination already had (refused as "
            "out of order): delivered before, not dropped.",
            ["destination"],
            registry=r,
        )
        self.sent_metadata = Counter(
            "rwrouter_sent_metadata", "Metadata entries delivered.", ["destination"], registry=r
        )
        self.sent_requests = Counter(
            "rwrouter_sent_requests",
            "Requests sent to a destination, by HTTP status ('error' for no answer).",
            ["destination", "code"],
            registry=r,
        )
        self.sent_bytes = Counter(
            "rwrouter_sent_bytes",
            "Compressed request bytes sent (every attempt).",
            ["destination"],
            registry=r,
        )
        self.dropped_samples = Counter(
            "rwrouter_samples_dropped",
            "Samples not delivered to a destination, by reason: relabel (its rules dropped the "
            "series), invalid (no metric name left), name_collision (its escaped names equal "
            "a series seen first), filtered (only exemplars or histograms "
            "the destination does not take), 4xx/3xx (refused by the destination), "
            "retry_budget (max_retry_duration spent), too_large (one series over "
            "max_request_bytes), queue_full (the request was refused with 503, the sender "
            "retries), drop_oldest (removed from a full disk queue), corrupt (a queue record "
            "that failed its checksum), not_written (answered 2xx, but the destination's "
            "X-Prometheus-Remote-Write-*-Written headers count less than was sent).",
            ["destination", "reason"],
            registry=r,
        )
        self.dropped_metadata = Counter(
            "rwrouter_metadata_dropped",
            "Metadata entries not delivered, by reason (queue_full, 4xx, invalid: no family "
            "name, book_full: a family evicted from a remote write 2.0 destination's "
            "metadata book).",
            ["destination", "reason"],
            registry=r,
        )
        self.refused_requests = Counter(
            "rwrouter_refused_requests",
            "Remote write requests refused whole, by reason (decode, too_large, unsupported, "
            "slow_body, client_gone, queue_full, busy, storage).",
            ["reason"],
            registry=r,
        )
        self.retries = Counter(
            "rwrouter_retries",
            "Send attempts that will be retried, by reason: the HTTP status (e.g. 503, 429), "
            "network (no answer) or credential_refresh (401/403 answered, credentials "
            "refreshed).",
            ["destination", "reason"],
            registry=r,
        )
        self.send_duration = Histogram(
            "rwrouter_send_duration_seconds",
            "Duration of one send attempt to a destination.",
            ["destination"],
            buckets=_SEND_BUCKETS,
            registry=r,
        )
        self.queue_disk_bytes = Gauge(
            "rwrouter_queue_disk_bytes",
            "Bytes of a destination's queue segment files on disk.",
            ["destination"],
            registry=r,
        )
        self.queue_disk_capacity_bytes = Gauge(
            "rwrouter_queue_disk_capacity_bytes",
            "Bound of a destination's disk queue (queue_config.max_disk_bytes).",
            ["destination"],
            registry=r,
        )
        self.queue_blocks = Gauge(
            "rwrouter_queue_blocks",
            "Queue blocks (a request's share each) not yet sent: on disk or in flight.",
            ["destination"],
            registry=r,
        )
        self.queue_oldest_age = Gauge(
            "rwrouter_queue_oldest_unsent_age_seconds",
            "Age of the oldest block read for sending and not yet done, since it was "
            "received (0 when none).",
            ["destination"],
            registry=r,
        )
        self.queue_corrupt_records = Counter(
            "rwrouter_queue_corrupt_records",
            "Queue records found torn or corrupt (checksum) and skipped; their samples are lost.",
            ["destination"],
            registry=r,
        )
        self.rejected_bytes = Gauge(
            "rwrouter_rejected_store_bytes",
            "Bytes in a destination's dead-letter store (storage.path/rejected).",
            ["destination"],
            registry=r,
        )
        self.rejected_entries = Gauge(
            "rwrouter_rejected_store_entries",
            "Batches in a destination's dead-letter store.",
            ["destination"],
            registry=r,
        )
        self.rejected_batches = Counter(
            "rwrouter_rejected_batches",
            "Batches refused for good and stored in the dead-letter store, by reason.",
            ["destination", "reason"],
            registry=r,
        )
        self.queue_samples = Gauge(
            "rwrouter_queue_samples",
            "Samples read from the disk queue and waiting or in flight in memory.",
            ["destination"],
            registry=r,
        )
        self.queue_capacity = Gauge(
            "rwrouter_queue_capacity_samples",
            "Read-ahead bound of a destination's in-memory queue (capacity x max_shards).",
            ["destination"],
            registry=r,
        )
        self.queue_bytes = Gauge(
            "rwrouter_queue_bytes",
            "Bytes of series read from the disk queue and waiting or in flight in memory.",
            ["destination"],
            registry=r,
        )
        self.queue_capacity_bytes = Gauge(
            "rwrouter_queue_capacity_bytes",
            "Byte bound of a destination's in-memory queue (queue_config.max_memory_bytes).",
            ["destination"],
            registry=r,
        )
        self.shards = Gauge(
            "rwrouter_shards", "Concurrent senders of a destination.", ["destination"], registry=r
        )
        self.destination_protocol = Gauge(
            "rwrouter_destination_protocol",
            "The protobuf message a destination's samples go out in (1), by protobuf_message; "
            "a remote write 2.0 destination has 0 for the other one (1 for "
            "prometheus.WriteRequest after a fallback).",
            ["destination", "protobuf_message"],
            registry=r,
        )
        self.destination_failed = Gauge(
            "rwrouter_destination_failed",
            "Whether a destination stopped sending on a bug in rwrouter (1; logged once with "
            "its traceback; its queue stays on disk and /-/ready answers 503 until a reload or "
            "a restart), else 0.",
            ["destination"],
            registry=r,
        )
        self.protocol_fallbacks = Counter(
            "rwrouter_protocol_fallbacks",
            "Times a remote write 2.0 destination was switched to remote write 1.0 until the "
            "next reload, by reason: 415 (it answered 415), nothing_written (a 2xx without "
            "the Written headers, or with all three 0: a remote write 1.0 receiver).",
            ["destination", "reason"],
            registry=r,
        )
        self.start_timestamps_dropped = Counter(
            "rwrouter_start_timestamps_dropped",
            "Start timestamps (of samples and native histograms received by remote write 2.0) "
            "removed from what was delivered to a remote write 1.0 destination, which has no "
            "field for them; the samples themselves were delivered.",
            ["destination"],
            registry=r,
        )
        self.credentials_expiry = _ExpiryCollector()
        r.register(self.credentials_expiry)
        self.name_shares = _NameShareCollector()
        r.register(self.name_shares)
        self.audit = _AuditCollector()
        r.register(self.audit)
        self.config_reload_ok = Gauge(
            "rwrouter_config_last_reload_successful",
            "Whether the last configuration reload succeeded (1) or failed (0).",
            registry=r,
        )
        self.config_reload_ok.set(1)
        self.config_reload_time = Gauge(
            "rwrouter_config_last_reload_success_timestamp_seconds",
            "When the configuration was last loaded successfully (unix seconds).",
            registry=r,
        )
        self.config_reload_time.set_to_current_time()
        self.cache_entries = Gauge(
            "rwrouter_relabel_cache_entries", "Label sets in the relabel cache.", registry=r
        )
        self.cache_bytes = Gauge(
            "rwrouter_relabel_cache_bytes",
            "Bytes of raw and encoded labels the relabel cache holds.",
            registry=r,
        )
        self.cache_hit_ratio = Gauge(
            "rwrouter_relabel_cache_hit_ratio",
            "Relabel cache hits / lookups over the last completed minute (NaN before any).",
            registry=r,
        )
        self.name_collisions = Counter(
            "rwrouter_name_collisions",
            "Names that collide after a destination's metric_name_escaping_scheme, per label set "
            "routed (a relabel cache miss): kind=label (two label names of one series: the "
            "first by original name is kept), kind=series (two series: the later one is not "
            "sent, reason name_collision).",
            ["destination", "kind"],
            registry=r,
        )
        self.cache_lookups = Counter(
            "rwrouter_relabel_cache_lookups",
            "Relabel cache lookups, by result (hit, miss).",
            ["result"],
            registry=r,
        )

        # Registered by watch_write_connections (rwrouter run --workers only).
        self.write_connections = Gauge(
            "rwrouter_write_connections",
            "Open connections of this worker that have carried an accepted remote write "
            "request (the workers balance them).",
            registry=None,
        )

    def watch_write_connections(self, read: Callable[[], float]) -> None:
        """Expose ``rwrouter_write_connections``, reporting ``read()`` at every scrape."""
        with contextlib.suppress(ValueError):  # already registered (a second start)
            self.registry.register(self.write_connections)
        self.write_connections.set_function(read)

    def forget_destination(self, name: str) -> None:
        """Remove a destination's gauges (after a reload removed it); counters stay."""
        gauges = (
            self.queue_samples, self.queue_capacity, self.queue_bytes, self.queue_capacity_bytes,
            self.queue_disk_bytes, self.queue_disk_capacity_bytes, self.queue_blocks,
            self.queue_oldest_age, self.rejected_bytes, self.rejected_entries, self.shards,
            self.destination_failed,
        )  # fmt: skip
        for gauge in gauges:
            with contextlib.suppress(KeyError):
                gauge.remove(name)
        for message in MESSAGES:
            with contextlib.suppress(KeyError):
                self.destination_protocol.remove(name, message)
        self.credentials_expiry.sources.pop(name, None)

    def watch(self, gauge: Gauge, read: Callable[[], float], *labels: str) -> None:
        """Make ``gauge`` (with ``labels``) report ``read()`` at every scrape."""
        (gauge.labels(*labels) if labels else gauge).set_function(read)

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition of the registry and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _ExpiryCollector(Collector):
    """``rwrouter_credentials_expiry_timestamp_seconds{destination}``: when a destination's
    SigV4 credentials expire (unix seconds); absent while they do not expire or are unknown."""

    def __init__(self) -> None:
        self.sources: dict[str, Callable[[], float | None]] = {}

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "rwrouter_credentials_expiry_timestamp_seconds",
            "When the SigV4 credentials of a destination expire (unix seconds).",
            labels=["destination"],
        )
        for name, read in self.sources.items():
            value = read()
            if value is not None:
                family.add_metric([name], value)
        yield family


class _NameShareCollector(Collector):
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


# Per audited destination: (active series, samples counted since the start); and the limit.
AuditTotals = tuple[Mapping[str, tuple[int, int]], int]


class _AuditCollector(Collector):
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


__all__ = ["Metrics", "merge_expositions", "status_snapshot"]
