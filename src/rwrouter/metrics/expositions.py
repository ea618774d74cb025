"""Text expositions (``/metrics``) read back: one view of several worker processes'
(:func:`merge_expositions`), and the status page's figures (:func:`status_snapshot`). Part
of :mod:`rwrouter.metrics`, the only importer of prometheus_client."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from rwrouter.errors import InvariantError


def merge_expositions(parts: Mapping[str, str | None], *, workers: int) -> bytes:
    """One text exposition of several worker processes' own expositions (``rwrouter run
    --workers``): every sample gets a ``worker="<key>"`` label; a family present in several
    parts is written once. ``None`` (or text that does not parse) marks a worker that did not
    answer: its metrics are absent and ``rwrouter_worker_up{worker}`` is 0. Also
    ``rwrouter_workers``: the configured number of workers (``workers``)."""
    families: dict[str, Metric] = {}
    up = GaugeMetricFamily(
        "rwrouter_worker_up",
        "Whether a worker process answered for this scrape (1) or not (0: absent, its metrics "
        "too).",
        labels=["worker"],
    )
    for worker, text in parts.items():
        parsed = _parse(text)
        up.add_metric([worker], 0.0 if parsed is None else 1.0)
        for family in parsed or ():
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            merged.samples += [s._replace(labels={**s.labels, "worker": worker})
                               for s in family.samples]  # fmt: skip
    count = GaugeMetricFamily("rwrouter_workers", "Worker processes configured (--workers).")
    count.add_metric([], float(workers))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed([count, up, *families.values()]))
    return generate_latest(registry)


def _parse(text: str | None) -> list[Metric] | None:
    if text is None:
        return None
    try:
        return list(text_string_to_metric_families(text))
    except ValueError:
        return None


class _Fixed(Collector):
    """Collects the families it was given."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


#: What the status page shows per destination: JSON key -> (metric sample name, how workers'
#: values combine: "sum" or "max"/"min"), from the exposition (counters as totals; the page
#: turns them into per-second rates between two reads).
_STATUS_FIELDS: dict[str, tuple[str, str]] = {
    "sent_samples_total": ("rwrouter_sent_samples_total", "sum"),
    "sent_requests_total": ("rwrouter_sent_requests_total", "sum"),
    "queue_disk_bytes": ("rwrouter_queue_disk_bytes", "sum"),
    "queue_disk_capacity_bytes": ("rwrouter_queue_disk_capacity_bytes", "sum"),
    "queue_memory_bytes": ("rwrouter_queue_bytes", "sum"),
    "queue_samples": ("rwrouter_queue_samples", "sum"),
    "oldest_unsent_age_seconds": ("rwrouter_queue_oldest_unsent_age_seconds", "max"),
    "shards": ("rwrouter_shards", "sum"),
    "rejected_store_bytes": ("rwrouter_rejected_store_bytes", "sum"),
    "credentials_expiry_timestamp_seconds": (
        "rwrouter_credentials_expiry_timestamp_seconds", "min"
    ),
}
_COMBINE: dict[str, Callable[[float, float], float]] = {"sum": float.__add__, "max": max,
                                                     "min": min}  # fmt: skip
_STATUS_BY_REASON = {
    "dropped_samples_total": "rwrouter_samples_dropped_total",
    "retries_total": "rwrouter_retries_total",
}


def status_snapshot(exposition: str) -> dict[str, object]:
    """The figures of the status page, read from a text exposition (one process's, or the
    merged one of ``--workers``: per-worker values are combined). Shape::

        {"version": str, "accelerated": bool, "workers": int,
         "received_samples_total": float, "received_requests_total": float,
         "relabel_cache_hit_ratio": float | None,
         "destinations": {name: {<_STATUS_FIELDS keys>: float | None,
                                 "dropped_samples_total": {reason: float},
                                 "retries_total": {reason: float},
                                 "top_names": [[metric name, share 0..1], ...]}}}

    ``top_names``: the 10 largest estimated shares (``rwrouter_metric_name_share``; with
    workers, the mean over the workers reporting names for that destination, a name one of
    them does not list counting 0 there), largest first.

    Counters are totals since start; gauges as exposed (bytes, seconds, unix seconds for the
    credential expiry); a value that is not finite (NaN, e.g. a hit ratio before any lookup)
    counts as absent, so the result is always valid JSON. The hit ratio of several workers is
    the mean of those that have one. Raises ValueError for text that is not an exposition."""
    destinations: dict[str, dict[str, object]] = {}
    by_metric = {metric: (key, how) for key, (metric, how) in _STATUS_FIELDS.items()}
    by_reason = {metric: key for key, metric in _STATUS_BY_REASON.items()}
    out: dict[str, object] = {"version": "", "accelerated": False, "workers": 1,
                              "received_samples_total": 0.0, "received_requests_total": 0.0,
                              "relabel_cache_hit_ratio": None}  # fmt: skip
    ratios: list[float] = []
    names: dict[str, dict[str, list[float]]] = {}  # destination -> metric -> workers' shares
    reporters: dict[str, set[str]] = {}  # destination -> workers reporting its names

    def dest(name: str) -> dict[str, object]:
        if name not in destinations:
            destinations[name] = {  # counters start at 0, gauges unknown until exposed
                key: 0.0 if key.endswith("_total") else None for key in _STATUS_FIELDS
            } | {key: {} for key in _STATUS_BY_REASON} | {"top_names": []}
        return destinations[name]

    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if not math.isfinite(value):  # e.g. a hit ratio before any lookup: unknown
                continue
            if name == "rwrouter_build_info":
                out["version"] = labels.get("version", "")
                out["accelerated"] = labels.get("accelerated") == "true"
            elif name == "rwrouter_workers":
                out["workers"] = int(value)
            elif name in ("rwrouter_received_samples_total", "rwrouter_received_requests_total"):
                key = name.removeprefix("rwrouter_")
                out[key] = float(out[key]) + value  # type: ignore[arg-type]
            elif name == "rwrouter_relabel_cache_hit_ratio":
                ratios.append(value)
            elif name in by_metric and "destination" in labels:
                key, how = by_metric[name]
                entry = dest(labels["destination"])
                old = entry[key]
                entry[key] = value if old is None else _COMBINE[how](float(old), value)  # type: ignore[arg-type]
            elif name == "rwrouter_metric_name_share" and "destination" in labels:
                per_metric = names.setdefault(labels["destination"], {})
                per_metric.setdefault(labels.get("metric", ""), []).append(value)
                reporters.setdefault(labels["destination"], set()).add(labels.get("worker", ""))
            elif name in by_reason and "destination" in labels:
                reasons = dest(labels["destination"])[by_reason[name]]
                if not isinstance(reasons, dict):
                    raise InvariantError(f"{by_reason[name]} is not counted per reason")
                reason = labels.get("reason", "")
                reasons[reason] = reasons.get(reason, 0.0) + value
    out["relabel_cache_hit_ratio"] = sum(ratios) / len(ratios) if ratios else None
    for destination, per_metric in names.items():
        count = len(reporters[destination])  # a worker that reports others: 0 for this one
        means = {m: sum(v) / count for m, v in per_metric.items()}
        dest(destination)["top_names"] = sorted(means.items(), key=lambda item: -item[1])[:10]
    out["destinations"] = destinations
    return out
