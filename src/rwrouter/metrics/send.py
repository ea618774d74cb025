"""A destination's send metrics: what became of its samples and metadata (delivered, already
delivered, dropped by reason), its requests (by status, bytes, duration, retries by reason),
and its senders' state (shards, the protocol in use and its fallbacks, a stop on a bug).
Every series has a ``destination`` label (the remote_write ``name``).

Updated by the deliverer (:mod:`rwrouter.send.delivery`), the shards, the reader and the
metadata queue, and by admission (:mod:`rwrouter.pipeline.fanout`: what the rules dropped,
``queue_full``, ``too_large``) and the destination (``drop_oldest``, the gauges)."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rwrouter.metrics.ha import HaCollector
from rwrouter.protocol import MESSAGES
from rwrouter.reasons import (
    METADATA_DROP_REASONS,
    RETRY_LABELS,
    SAMPLE_DROP_REASONS,
    FallbackReason,
    listing,
)

PACING_BUCKETS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)  # seconds
SEND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)  # seconds


class SendMetrics:
    """``rwrouter_sent_*``, ``rwrouter_samples_dropped_total``, ``rwrouter_retries_total``,
    ``rwrouter_shards``, ``rwrouter_destination_*`` and the others below, registered on
    ``registry``."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self._delivered(registry)
        self._dropped(registry)
        self._requests(registry)
        self._senders(registry)
        self._pacing(registry)
        self._ha(registry)

    def _delivered(self, r: CollectorRegistry) -> None:
        """What was delivered."""
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

    def _dropped(self, r: CollectorRegistry) -> None:
        """What was not delivered, by reason."""
        self.dropped_samples = Counter(
            "rwrouter_samples_dropped",
            "Samples not delivered to a destination, by reason: "
            + listing(SAMPLE_DROP_REASONS)
            + ".",
            ["destination", "reason"],
            registry=r,
        )
        self.dropped_metadata = Counter(
            "rwrouter_metadata_dropped",
            "Metadata entries not delivered to a destination, by reason: "
            + listing(METADATA_DROP_REASONS)
            + ".",
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

    def _requests(self, r: CollectorRegistry) -> None:
        """The requests sent: answers, bytes, durations, retries."""
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
        self.retries = Counter(
            "rwrouter_retries",
            "Send attempts that will be retried, by reason: the HTTP status answered (e.g. "
            "503, 429), " + listing(RETRY_LABELS) + ".",
            ["destination", "reason"],
            registry=r,
        )
        self.send_duration = Histogram(
            "rwrouter_send_duration_seconds",
            "Duration of one send attempt to a destination.",
            ["destination"],
            buckets=SEND_BUCKETS,
            registry=r,
        )

    def _senders(self, r: CollectorRegistry) -> None:
        """The senders' state: how many, which protocol, stopped on a bug."""
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
            "next reload, by reason: " + listing(FallbackReason) + ".",
            ["destination", "reason"],
            registry=r,
        )

    def _pacing(self, r: CollectorRegistry) -> None:
        """Pacing to an ingestion quota (``queue_config.max_samples_per_second``): only
        destinations with it set have these series."""
        self.pacing_delay = Histogram(
            "rwrouter_pacing_delay_seconds",
            "Seconds a request waited for its destination's pacing (max_samples_per_second, "
            "burst_samples) before it was sent; every attempt.",
            ["destination"],
            buckets=PACING_BUCKETS,
            registry=r,
        )
        self.pacing_rate = Gauge(
            "rwrouter_pacing_rate",
            "Samples (and metadata entries) per second a destination is paced at now: "
            "max_samples_per_second, or less for a while after a 429.",
            ["destination"],
            registry=r,
        )
        self.pacing_limit = Gauge(
            "rwrouter_pacing_max_samples_per_second",
            "queue_config.max_samples_per_second (with --workers N: this worker's share, 1/N).",
            ["destination"],
            registry=r,
        )
        self.pacing_burst = Gauge(
            "rwrouter_pacing_burst_samples",
            "queue_config.burst_samples (with --workers N: this worker's share, 1/N).",
            ["destination"],
            registry=r,
        )
        self.pacing_decreases = Counter(
            "rwrouter_pacing_decreases",
            "429 answers that lowered a destination's paced rate (halved, at most once a "
            "second, not below a tenth of max_samples_per_second).",
            ["destination"],
            registry=r,
        )

    def _ha(self, r: CollectorRegistry) -> None:
        """HA pairs (``ha_dedup``): elections of a replica per cluster."""
        self.ha_leader_changes = Counter(
            "rwrouter_ha_leader_changes",
            "Times a destination with ha_dedup elected a replica of an HA cluster: the first "
            "one, and each failover after the elected one was silent for failover_timeout "
            "(the replica not elected is dropped: rwrouter_samples_dropped_total"
            '{reason="ha_replica"}). With --workers, counted by the worker that elected it.',
            ["destination", "cluster"],
            registry=r,
        )
        self.ha = HaCollector()  # settings and elected replicas (source: the fan-out)
        r.register(self.ha)

    def forget(self, name: str) -> None:
        """Remove destination ``name``'s gauges (the counters stay)."""
        self.forget_pacing(name)
        for gauge in (self.shards, self.destination_failed):
            with contextlib.suppress(KeyError):
                gauge.remove(name)
        for message in MESSAGES:
            with contextlib.suppress(KeyError):
                self.destination_protocol.remove(name, message)

    def forget_pacing(self, name: str) -> None:
        """Remove destination ``name``'s pacing gauges (removed, or no longer paced)."""
        for gauge in (self.pacing_rate, self.pacing_limit, self.pacing_burst):
            with contextlib.suppress(KeyError):
                gauge.remove(name)
