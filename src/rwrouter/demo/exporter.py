"""A synthetic NVIDIA DCGM exporter (plus node-exporter and kubelet series) for the demo.

Each simulated node is its own scrape target: one :class:`NodeCollector` (a custom
prometheus-client collector over :mod:`rwrouter.demo.fleet`) in its own ``CollectorRegistry``,
served by its own prometheus-client HTTP server on 127.0.0.1 (free port, ``GET /metrics``).
Values are computed at scrape time from the seconds since the fleet started, deterministic by
seed. A node can be stopped (its target disappears: scrapes fail, Prometheus marks its series
stale) and restarted on the same port::

    fleet = ExporterFleet(nodes=2, seed=7)
    fleet.start()
    fleet.targets  # ["127.0.0.1:41234", "127.0.0.1:41235"]
    fleet.nodes[1].stop(); fleet.nodes[1].start()
    fleet.stop()

Exposition note: prometheus-client names a counter's ``# TYPE`` line ``<name>_total``; for the
DCGM counters (exposed without ``_total``, as dcgm-exporter does) that line does not match the
samples, so Prometheus keeps no metadata for them. The samples are unaffected.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from rwrouter.demo.fleet import NodeModel
from rwrouter.demo.nodes import node_model

__all__ = ["ExporterFleet", "ExporterNode", "NodeCollector"]


class NodeCollector(Collector):
    """Yields every family of ``model`` at ``clock() - start_s`` seconds (unix seconds)."""

    def __init__(
        self, model: NodeModel, *, start_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.model, self.start_s, self.clock = model, start_s, clock

    def collect(self) -> Iterator[Metric]:
        elapsed = max(0.0, self.clock() - self.start_s)
        for name, kind, doc, samples in self.model.families(elapsed):
            metric = Metric(name.removesuffix("_total") if kind == "counter" else name, doc, kind)
            for labels, value in samples:
                metric.add_sample(name, labels, value)
            yield metric


class ExporterNode:
    """One simulated node: registry + HTTP server on 127.0.0.1 (``port`` 0: a free one)."""

    def __init__(
        self,
        model: NodeModel,
        *,
        start_s: float,
        clock: Callable[[], float] = time.time,
        port: int = 0,
    ) -> None:
        self.model = model
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(model, start_s=start_s, clock=clock))
        self.port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def target(self) -> str:
        """``host:port`` as it goes into a scrape config."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}/metrics"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Serve (again); keeps the port chosen the first time. No-op when running."""
        if self._server is not None:
            return
        server, thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)
        self._server, self._thread = server, thread
        self.port = int(server.server_port)

    def stop(self) -> None:
        """Stop serving and close the socket (connections are refused). Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(5)


class ExporterFleet:
    """``nodes`` simulated GPU nodes drawn from ``seed``, sharing one start time."""

    def __init__(
        self,
        *,
        nodes: int = 2,
        seed: int = 1,
        cluster: str = "demo-gpu-cluster",
        clock: Callable[[], float] = time.time,
    ) -> None:
        start_s = clock()
        self.nodes = [
            ExporterNode(
                node_model(seed=seed, index=i, cluster=cluster), start_s=start_s, clock=clock
            )
            for i in range(nodes)
        ]

    @property
    def targets(self) -> list[str]:
        return [node.target for node in self.nodes]

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
