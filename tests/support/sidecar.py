"""A trainer sidecar's series next to a demo GPU node's DCGM ones: UTF-8 names for a Prometheus
3 to scrape, or the legacy names of its previous version for a Prometheus 2.

What an OpenTelemetry-instrumented training job exposes through prometheus-client
(:class:`SidecarCollector`, registered in a demo :class:`rwrouter.demo.exporter.ExporterNode`'s
registry): dotted metric and label names (``{"gpu.utilization", "service.name"="trainer",
"k8s.pod.name"=...}``), served quoted to a scraper that asks for them (prometheus-client 0.26
``choose_encoder``: Prometheus 3 sends ``escaping=allow-utf-8`` in its ``Accept`` header) and
escaped with underscores to one that does not (Prometheus 2). The legacy form
(``utf8=False``) is a different exporter version with its own names (``trainer_gpu_*``), so
series scraped by two senders from the two forms never share a family name.

Values are functions of the node's model at ``elapsed_s`` seconds (deterministic, as
:mod:`rwrouter.demo.fleet`); units follow the OpenMetrics rule prometheus-client enforces (the
name ends with ``_<unit>``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from rwrouter.demo.fleet import GPUS_PER_NODE, NodeModel

__all__ = ["SIDECAR", "SidecarCollector", "SidecarFamily", "sidecar_series"]


@dataclass(frozen=True)
class SidecarFamily:
    """One family: its UTF-8 and legacy names (``None``: not in that form), OpenMetrics type,
    help, unit, whether it has a series per GPU, and whether the managed workspace keeps it."""

    utf8: str
    legacy: str | None
    kind: str  # "gauge" | "counter"
    help: str
    unit: str
    per_gpu: bool
    critical: bool

    def name(self, *, utf8: bool) -> str | None:
        return self.utf8 if utf8 else self.legacy

    def sample_name(self, *, utf8: bool) -> str | None:
        """The exposed sample name (a counter's ends with ``_total``)."""
        name = self.name(utf8=utf8)
        return None if name is None else name + ("_total" if self.kind == "counter" else "")


SIDECAR: tuple[SidecarFamily, ...] = (
    SidecarFamily(
        "gpu.utilization",
        "trainer_gpu_utilization",
        "gauge",
        "Fraction of time the GPU was busy (OpenTelemetry hw.gpu.utilization).",
        "",
        per_gpu=True,
        critical=True,
    ),
    SidecarFamily(
        "gpu.memory.used_bytes",
        "trainer_gpu_memory_used_bytes",
        "gauge",
        "GPU memory in use by the training process.",
        "bytes",
        per_gpu=True,
        critical=True,
    ),
    SidecarFamily(
        "trainer.tokens",
        None,
        "counter",
        "Tokens processed by the trainer.",
        "",
        per_gpu=False,
        critical=False,
    ),
    SidecarFamily(
        "trainer.step.duration_seconds",
        None,
        "gauge",
        "Duration of the last training step.",
        "seconds",
        per_gpu=False,
        critical=False,
    ),
)


def _labels(model: NodeModel, *, utf8: bool, gpu: int | None) -> dict[str, str]:
    service, pod, node, gpu_id = (
        ("service.name", "k8s.pod.name", "k8s.node.name", "gpu.id")
        if utf8
        else ("service_name", "pod", "node", "gpu")
    )
    labels = {service: "trainer", pod: model.trainer.pod, node: model.hostname}
    return labels if gpu is None else {**labels, gpu_id: str(gpu)}


def _value(family: SidecarFamily, model: NodeModel, elapsed_s: float, gpu: int) -> float:
    load = min(1.0, max(0.0, model.gpu_load[gpu].at(elapsed_s)))
    if family.utf8 == "gpu.utilization":
        return round(load, 4)
    if family.utf8 == "gpu.memory.used_bytes":
        return float(round(18e9 + 60e9 * load))
    if family.utf8 == "trainer.tokens":
        return float(round(4096 * model.gpu_load[0].integral(elapsed_s)))
    return round(0.5 + 0.2 * load, 4)


def sidecar_series(
    model: NodeModel, elapsed_s: float, *, utf8: bool
) -> list[tuple[SidecarFamily, str, dict[str, str], float]]:
    """(family, sample name, labels, value) of every series the sidecar of ``model`` exposes
    in the ``utf8`` or legacy form at ``elapsed_s``."""
    out = []
    for family in SIDECAR:
        sample = family.sample_name(utf8=utf8)
        if sample is None:
            continue
        for gpu in range(GPUS_PER_NODE) if family.per_gpu else (None,):
            labels = _labels(model, utf8=utf8, gpu=gpu)
            out.append((family, sample, labels, _value(family, model, elapsed_s, gpu or 0)))
    return out


class SidecarCollector(Collector):
    """The sidecar of ``model`` (``utf8`` or legacy form) at ``clock() - start_s`` seconds."""

    def __init__(
        self,
        model: NodeModel,
        *,
        utf8: bool,
        start_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model, self.utf8, self.start_s, self.clock = model, utf8, start_s, clock

    def collect(self) -> Iterator[Metric]:
        elapsed = max(0.0, self.clock() - self.start_s)
        metrics: dict[str, Metric] = {}
        for family, sample, labels, value in sidecar_series(self.model, elapsed, utf8=self.utf8):
            name = family.name(utf8=self.utf8)
            assert name is not None
            if name not in metrics:
                metrics[name] = Metric(name, family.help, family.kind, unit=family.unit)
            metrics[name].add_sample(sample, labels, value)
        yield from metrics.values()
