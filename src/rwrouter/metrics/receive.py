"""The receive side's metrics (:mod:`rwrouter.server.app`): the requests received, by the
answer and by protocol, what the accepted ones carried, the refusals by reason, and the time
to receive one; the front door's refusals by reason and whether its web configuration file was
read (:mod:`rwrouter.server.frontdoor`); its bounds (:mod:`rwrouter.server.connections`,
:mod:`rwrouter.server.bodies`): the connections open, refused and closed, the failed accepts,
the bodies being read, waiting and held."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rwrouter.reasons import (
    CLOSED_CONNECTION_REASONS,
    REFUSED_CONNECTION_REASONS,
    AuthReason,
    RefuseReason,
    listing,
)


class ReceiveMetrics:
    """``rwrouter_received_*``, ``rwrouter_refused_requests_total``,
    ``rwrouter_receive_duration_seconds``, ``rwrouter_auth_failures_total``,
    ``rwrouter_web_config_last_reload_successful`` and the front door's bounds
    (``rwrouter_connections*``, ``rwrouter_accept_errors_total``, ``rwrouter_body_*``: the
    gauges report what :meth:`watch_bounds` is given, 0 before), registered on ``registry``."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Counter(
            "rwrouter_received_requests",
            "Remote write requests received, by the HTTP status answered.",
            ["code"],
            registry=r,
        )
        self.protocol_requests = Counter(
            "rwrouter_received_protocol_requests",
            "Remote write requests received, by the protocol their Content-Type named "
            "(1.0: prometheus.WriteRequest, 2.0: io.prometheus.write.v2.Request), whatever "
            "the answer.",
            ["protocol"],
            registry=r,
        )
        self.series = Counter(
            "rwrouter_received_series", "Series received in accepted requests.", registry=r
        )
        self.samples = Counter(
            "rwrouter_received_samples",
            "Samples, exemplars and histograms received in accepted requests.",
            registry=r,
        )
        self.metadata = Counter(
            "rwrouter_received_metadata", "Metadata entries received.", registry=r
        )
        self.duration = Histogram(
            "rwrouter_receive_duration_seconds",
            "Time to decode, route and enqueue a remote write request.",
            registry=r,
        )
        self.refused = Counter(
            "rwrouter_refused_requests",
            "Remote write requests refused whole, by reason: " + listing(RefuseReason) + ".",
            ["reason"],
            registry=r,
        )
        self.auth_failures = Counter(
            "rwrouter_auth_failures",
            "Requests the front door refused, by reason: " + listing(AuthReason) + ".",
            ["reason"],
            registry=r,
        )
        self.web_config_ok = Gauge(
            "rwrouter_web_config_last_reload_successful",
            "1 when the web configuration file (--web.config.file) and the files it names were "
            "last read without error (or there is none), 0 while a broken change is ignored.",
            registry=r,
        )
        self.web_config_ok.set(1)
        self._front_door(r)

    def _front_door(self, r: CollectorRegistry) -> None:
        """The front door's metrics (:mod:`rwrouter.server.connections`, ``bodies``)."""
        self.connections_refused = Counter(
            "rwrouter_connections_refused",
            "Connections accepted and closed at once, by reason: "
            + listing(REFUSED_CONNECTION_REASONS)
            + ".",
            ["reason"],
            registry=r,
        )
        self.connections_closed = Counter(
            "rwrouter_connections_closed",
            "Connections rwrouter closed, by reason: " + listing(CLOSED_CONNECTION_REASONS) + ".",
            ["reason"],
            registry=r,
        )
        self.accept_errors = Counter(
            "rwrouter_accept_errors",
            "Accepts that failed for lack of file descriptors or memory (EMFILE, ENFILE, "
            "ENOBUFS, ENOMEM; retried every second; logged once per episode).",
            registry=r,
        )
        self.connections = Gauge(
            "rwrouter_connections", "Connections open on the listener.", registry=r
        )
        self.body_reads = Gauge(
            "rwrouter_body_reads",
            "Request bodies being read (at most server.max_concurrent_reads).",
            registry=r,
        )
        self.body_reads_waiting = Gauge(
            "rwrouter_body_reads_waiting",
            "Uploads waiting for a read, their bodies unread (TCP pushes back).",
            registry=r,
        )
        self.body_bytes = Gauge(
            "rwrouter_body_buffered_bytes",
            "Bytes of request bodies held or reserved, from their read until their answer "
            "(at most server.max_buffered_body_bytes).",
            registry=r,
        )

    def watch_bounds(
        self,
        *,
        connections: Callable[[], float],
        reads: Callable[[], float],
        waiting: Callable[[], float],
        held: Callable[[], float],
    ) -> None:
        """Make the front door's gauges report these at every scrape."""
        self.connections.set_function(connections)
        self.body_reads.set_function(reads)
        self.body_reads_waiting.set_function(waiting)
        self.body_bytes.set_function(held)
