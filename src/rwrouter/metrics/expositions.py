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

from rwrouter.reasons import DropReason


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
            merged.samples += [
                s._replace(labels={**s.labels, "worker": worker}) for s in family.samples
            ]
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
    # what is not sent yet, whatever the disk holds: samples, and records (requests' shares)
    "unsent_samples": ("rwrouter_queue_unsent_samples", "sum"),
    "unsent_records": ("rwrouter_queue_blocks", "sum"),
    "oldest_unsent_age_seconds": ("rwrouter_queue_oldest_unsent_age_seconds", "max"),
    "shards": ("rwrouter_shards", "sum"),
    "rejected_store_bytes": ("rwrouter_rejected_store_bytes", "sum"),
    # pacing (absent: not paced); workers' shares add up to the configured values
    "pacing_rate": ("rwrouter_pacing_rate", "sum"),
    "pacing_max_samples_per_second": ("rwrouter_pacing_max_samples_per_second", "sum"),
    "pacing_burst_samples": ("rwrouter_pacing_burst_samples", "sum"),
    "pacing_delay_seconds_total": ("rwrouter_pacing_delay_seconds_sum", "sum"),
    "series_limit": ("rwrouter_series_limit", "max"),  # the workers share one budget
    "series_limit_active_series": ("rwrouter_series_limit_active_series", "max"),
    "series_limited_total": ("rwrouter_series_limited_total", "sum"),
    "credentials_expiry_timestamp_seconds": (
        "rwrouter_credentials_expiry_timestamp_seconds",
        "min",
    ),
}
_COMBINE: dict[str, Callable[[float, float], float]] = {
    "sum": float.__add__,
    "max": max,
    "min": min,
}
_STATUS_BY_REASON = {
    "dropped_samples_total": "rwrouter_samples_dropped_total",
    "retries_total": "rwrouter_retries_total",
}
#: The drop reasons that are routing decisions, not losses: the destination's rules kept the
#: series out (or it carried only what the destination does not take). The status page and
#: ``/-/status`` show them as ``kept_out_samples_total``, apart from ``dropped_samples_total``.
KEPT_OUT_REASONS = frozenset((DropReason.RELABEL.value, DropReason.FILTERED.value))


def status_snapshot(exposition: str) -> dict[str, object]:
    """The figures of the status page, read from a text exposition (one process's, or the
    merged one of ``--workers``: per-worker values are combined). Shape::

        {"version": str, "accelerated": bool, "workers": int,
         "received_samples_total": float, "received_requests_total": float,
         "relabel_cache_hit_ratio": float | None,
         "destinations": {name: {<_STATUS_FIELDS keys>: float | None,
                                 "dropped_samples_total": {reason: float},
                                 "kept_out_samples_total": {reason: float},
                                 "retries_total": {reason: float},
                                 "top_names": [[metric name, share 0..1], ...],
                                 "series_over": [[metric name, series], ...],
                                 "ha_dedup": None | {"cluster_label": str,
                                     "replica_label": str, "failover_timeout": seconds,
                                     "clusters": [{"cluster": str, "replica": str | None,
                                                   "last_seen": unix seconds | None,
                                                   "elections_total": float}, ...]}}}}

    ``top_names``: the 10 largest estimated shares (``rwrouter_metric_name_share``; with
    workers, the mean over the workers reporting names for that destination, a name one of
    them does not list counting 0 there), largest first. ``series_over``: the series over the
    destination's ``series_limit`` by metric name (``rwrouter_series_limit_over_series``,
    summed over the workers), most first; empty without a budget. ``ha_dedup``: None without
    it, else its settings (``rwrouter_ha_failover_timeout_seconds``) and per cluster, by name,
    the elected replica and when it last sent (``rwrouter_ha_elected_replica_timestamp_seconds``:
    with workers, the latest of theirs) and the elections (``rwrouter_ha_leader_changes_total``,
    summed over the workers); a cluster no longer in the election table has replica None.

    ``dropped_samples_total`` holds the reasons that lose samples the destination would
    have got; ``kept_out_samples_total`` those of :data:`KEPT_OUT_REASONS` (``relabel``: its
    rules kept the series out, as routing does on purpose; ``filtered``), both from
    ``rwrouter_samples_dropped_total``. ``unsent_samples`` and ``unsent_records`` are what
    is queued and not sent yet (``rwrouter_queue_unsent_samples``, ``rwrouter_queue_blocks``);
    ``queue_disk_bytes`` is disk usage (whole segment files, sent records included).

    Counters are totals since start; gauges as exposed (bytes, seconds, unix seconds for the
    credential expiry); a value that is not finite (NaN, e.g. a hit ratio before any lookup)
    counts as absent, so the result is always valid JSON. The hit ratio of several workers is
    the mean of those that have one. Raises ValueError for text that is not an exposition."""
    snapshot = _Snapshot()
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            value = float(sample.value)
            if math.isfinite(value):  # else unknown (NaN: e.g. a hit ratio before any lookup)
                snapshot.add(sample.name, sample.labels, value)
    return snapshot.result()


_BY_METRIC = {metric: (key, how) for key, (metric, how) in _STATUS_FIELDS.items()}
_BY_REASON = {metric: key for key, metric in _STATUS_BY_REASON.items()}
_RECEIVED = ("rwrouter_received_samples_total", "rwrouter_received_requests_total")


class _Destination:
    """One destination's figures: ``_STATUS_FIELDS`` (counters start at 0, gauges unknown
    until exposed), ``_STATUS_BY_REASON`` (reason -> total) and the top names."""

    def __init__(self) -> None:
        self.values = {k: 0.0 if k.endswith("_total") else None for k in _STATUS_FIELDS}
        self.by_reason: dict[str, dict[str, float]] = {key: {} for key in _STATUS_BY_REASON}
        self.top_names: list[tuple[str, float]] = []
        self.over: dict[str, float] = {}
        self.ha: dict[str, object] | None = None  # ha_dedup's settings
        self.leaders: dict[str, tuple[float, str]] = {}  # cluster -> (last seen, replica)
        self.elections: dict[str, float] = {}  # cluster -> elections

    def as_dict(self) -> dict[str, object]:
        over = sorted(self.over.items(), key=lambda item: (-item[1], item[0]))
        dropped = self.by_reason["dropped_samples_total"]
        return {
            **self.values,
            **self.by_reason,
            "dropped_samples_total": {
                r: n for r, n in dropped.items() if r not in KEPT_OUT_REASONS
            },
            "kept_out_samples_total": {r: n for r, n in dropped.items() if r in KEPT_OUT_REASONS},
            "top_names": self.top_names,
            "series_over": over,
            "ha_dedup": self._ha(),
        }

    def _ha(self) -> dict[str, object] | None:
        if self.ha is None:
            return None
        clusters = []
        for cluster in sorted(self.leaders.keys() | self.elections.keys()):
            seen, replica = self.leaders.get(cluster, (None, None))
            elections = self.elections.get(cluster, 0.0)
            clusters.append(
                {
                    "cluster": cluster,
                    "replica": replica,
                    "last_seen": seen,
                    "elections_total": elections,
                }
            )
        return {**self.ha, "clusters": clusters}


class _Snapshot:
    """:func:`status_snapshot`'s figures, read one finite sample at a time."""

    def __init__(self) -> None:
        self.version, self.accelerated, self.workers = "", False, 1
        self.received = dict.fromkeys(("received_samples_total", "received_requests_total"), 0.0)
        self.ratios: list[float] = []  # the workers' relabel cache hit ratios
        self.destinations: dict[str, _Destination] = {}  # in the order first seen
        self.names: dict[str, dict[str, list[float]]] = {}  # destination -> metric -> shares
        self.reporters: dict[str, set[str]] = {}  # destination -> workers reporting its names

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        if name == "rwrouter_build_info":
            self.version = labels.get("version", "")
            self.accelerated = labels.get("accelerated") == "true"
        elif name == "rwrouter_workers":
            self.workers = int(value)
        elif name in _RECEIVED:
            self.received[name.removeprefix("rwrouter_")] += value
        elif name == "rwrouter_relabel_cache_hit_ratio":
            self.ratios.append(value)
        elif "destination" in labels:
            self._add_destination(name, labels, value)

    def _add_destination(self, name: str, labels: Mapping[str, str], value: float) -> None:
        destination = labels["destination"]
        if name in _BY_METRIC:
            key, how = _BY_METRIC[name]
            values = self._destination(destination).values
            old = values[key]
            values[key] = value if old is None else _COMBINE[how](old, value)
        elif name == "rwrouter_metric_name_share":
            per_metric = self.names.setdefault(destination, {})
            per_metric.setdefault(labels.get("metric", ""), []).append(value)
            self.reporters.setdefault(destination, set()).add(labels.get("worker", ""))
        elif name == "rwrouter_series_limit_over_series":
            over = self._destination(destination).over
            metric = labels.get("metric", "")
            over[metric] = over.get(metric, 0.0) + value
        elif name.startswith("rwrouter_ha_"):
            self._add_ha(self._destination(destination), name, labels, value)
        elif name in _BY_REASON:
            reasons = self._destination(destination).by_reason[_BY_REASON[name]]
            reason = labels.get("reason", "")
            reasons[reason] = reasons.get(reason, 0.0) + value

    @staticmethod
    def _add_ha(d: _Destination, name: str, labels: Mapping[str, str], value: float) -> None:
        cluster = labels.get("cluster", "")
        if name == "rwrouter_ha_failover_timeout_seconds":
            d.ha = {
                "cluster_label": labels.get("cluster_label", ""),
                "replica_label": labels.get("replica_label", ""),
                "failover_timeout": value,
            }
        elif name == "rwrouter_ha_elected_replica_timestamp_seconds":
            latest = (value, labels.get("replica", ""))  # workers read one table: the latest
            d.leaders[cluster] = max(d.leaders.get(cluster, latest), latest)
        elif name == "rwrouter_ha_leader_changes_total":
            d.elections[cluster] = d.elections.get(cluster, 0.0) + value

    def _destination(self, name: str) -> _Destination:
        return self.destinations.setdefault(name, _Destination())

    def result(self) -> dict[str, object]:
        """The figures (the shape :func:`status_snapshot` documents)."""
        for destination, per_metric in self.names.items():
            count = len(self.reporters[destination])  # a worker that reports others: 0 here
            means = {m: sum(v) / count for m, v in per_metric.items()}
            top = sorted(means.items(), key=lambda item: -item[1])[:10]
            self._destination(destination).top_names = top
        ratio = sum(self.ratios) / len(self.ratios) if self.ratios else None
        return {
            "version": self.version,
            "accelerated": self.accelerated,
            "workers": self.workers,
            **self.received,
            "relabel_cache_hit_ratio": ratio,
            "destinations": {name: d.as_dict() for name, d in self.destinations.items()},
        }
