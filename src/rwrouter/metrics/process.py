"""The process's own metrics: its build, its configuration reloads, the write connections
a worker holds (``--workers``), and each destination's SigV4 credential expiry (from its
authenticator, :mod:`rwrouter.auth.schemes`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rwrouter import __version__
from rwrouter.wire.accelerator import ACCELERATED


class ProcessMetrics:
    """``rwrouter_build_info``, ``rwrouter_config_last_reload_*``,
    ``rwrouter_write_connections`` (registered by :meth:`watch_write_connections` only) and
    ``rwrouter_credentials_expiry_timestamp_seconds`` (``credentials_expiry``), on
    ``registry``. The reload gauges start as a successful load now."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self._registry = registry
        Gauge(
            "rwrouter_build_info",
            "Build information: version, and whether the compiled accelerator of the hot path "
            'runs (accelerated="true") or the pure-Python fallback ("false").',
            ["version", "accelerated"],
            registry=registry,
        ).labels(__version__, "true" if ACCELERATED else "false").set(1)
        self.credentials_expiry = ExpiryCollector()
        registry.register(self.credentials_expiry)
        self.config_reload_ok = Gauge(
            "rwrouter_config_last_reload_successful",
            "Whether the last configuration reload succeeded (1) or failed (0).",
            registry=registry,
        )
        self.config_reload_ok.set(1)
        self.config_reload_time = Gauge(
            "rwrouter_config_last_reload_success_timestamp_seconds",
            "When the configuration was last loaded successfully (unix seconds).",
            registry=registry,
        )
        self.config_reload_time.set_to_current_time()
        self.write_connections = Gauge(
            "rwrouter_write_connections",
            "Open connections of this worker that have carried an accepted remote write "
            "request (the workers balance them).",
            registry=None,
        )

    def watch_write_connections(self, read: Callable[[], float]) -> None:
        """Expose ``rwrouter_write_connections``, reporting ``read()`` at every scrape."""
        with contextlib.suppress(ValueError):  # already registered (a second start)
            self._registry.register(self.write_connections)
        self.write_connections.set_function(read)

    def forget(self, name: str) -> None:
        """Stop reporting destination ``name``'s credential expiry."""
        self.credentials_expiry.sources.pop(name, None)


class ExpiryCollector(Collector):
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
