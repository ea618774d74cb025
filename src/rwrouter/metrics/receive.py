"""The receive side's metrics (:mod:`rwrouter.server.app`): the requests received, by the
answer and by protocol, what the accepted ones carried, the refusals by reason, and the time
to receive one; the front door's refusals by reason and whether its web configuration file was
read (:mod:`rwrouter.server.frontdoor`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rwrouter.reasons import AuthReason, RefuseReason, listing


class ReceiveMetrics:
    """``rwrouter_received_*``, ``rwrouter_refused_requests_total``,
    ``rwrouter_receive_duration_seconds``, ``rwrouter_auth_failures_total`` and
    ``rwrouter_web_config_last_reload_successful``, registered on ``registry``."""

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
