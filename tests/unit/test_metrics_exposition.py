"""The ``/metrics`` exposition as an interface: every family's name, type, help text and label
names, with every metric touched once, equal to ``tests/testdata/metrics/families.txt``.

Dashboards, alerts (``deploy/``) and the status page read these names; a change here is a
change for every operator, so it shows in that file's diff. Families are compared sorted by
name (the registry's order is not part of the interface). After a deliberate change, write the
file again with ``RWROUTER_WRITE_FAMILIES=1 pytest tests/unit/test_metrics_exposition.py``.
Also: which series ``Metrics.forget_destination`` removes (a reload that drops a destination).
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from rwrouter.metrics import Metrics
from rwrouter.protocol import RW2_MESSAGE

FAMILIES = Path(__file__).resolve().parents[1] / "testdata" / "metrics" / "families.txt"


def _touch_wrappers(group: object, seen: set[int]) -> None:
    """Give every Counter/Gauge/Histogram reachable from ``group`` (its attributes, and the
    attributes of the metric groups it holds) one child per label set, and a value."""
    if id(group) in seen:
        return
    seen.add(id(group))
    for value in vars(group).values():
        if isinstance(value, MetricWrapperBase):
            names = value._labelnames  # prometheus-client keeps no public accessor
            child = value.labels(*("x" for _ in names)) if names else value
            if isinstance(child, Counter):
                child.inc()
            elif isinstance(child, Gauge):
                child.set(1)
            elif isinstance(child, Histogram):
                child.observe(0.1)
        elif type(value).__module__.startswith("rwrouter.metrics"):
            _touch_wrappers(value, seen)


def _touched() -> Metrics:
    metrics = Metrics()
    metrics.process.watch_write_connections(lambda: 1.0)
    _touch_wrappers(metrics, set())
    metrics.process.credentials_expiry.sources["x"] = lambda: 1.0
    metrics.audit.name_shares.source = lambda: {"x": [("up", 0.5)]}
    metrics.audit.totals.source = lambda: ({"x": (1, 1)}, 10)
    return metrics


def _families(text: str) -> str:
    """One block per family, sorted by name: its ``# HELP`` and ``# TYPE`` lines as exposed,
    then ``# LABELS`` with the sorted label names its samples carry."""
    heads: list[str] = []  # per family, in exposition order: its HELP and TYPE lines
    for line in text.splitlines():
        if line.startswith("# HELP "):
            heads.append(line + "\n")
        elif line.startswith("# TYPE "):
            heads[-1] += line + "\n"
    families = list(text_string_to_metric_families(text))
    assert len(families) == len(heads)
    blocks = []
    for family, head in zip(families, heads, strict=True):
        assert family.samples, f"{family.name}: not touched"
        labels = sorted({name for sample in family.samples for name in sample.labels})
        blocks.append(head + f"# LABELS {family.name} {' '.join(labels) or '-'}\n")
    return "".join(sorted(blocks))


def test_exposition_families_unchanged() -> None:
    got = _families(_touched().exposition()[0].decode())
    if os.environ.get("RWROUTER_WRITE_FAMILIES") == "1":
        FAMILIES.parent.mkdir(parents=True, exist_ok=True)
        FAMILIES.write_text(got, encoding="utf-8")
    assert got == FAMILIES.read_text(encoding="utf-8")


# What a reload that removes a destination takes away: its gauges (and its credential
# expiry), not its counters, whose totals a rate() over the reload still needs.
FORGOTTEN = (
    "rwrouter_credentials_expiry_timestamp_seconds",
    "rwrouter_destination_failed",
    "rwrouter_destination_protocol",
    "rwrouter_pacing_burst_samples",
    "rwrouter_pacing_max_samples_per_second",
    "rwrouter_pacing_rate",
    "rwrouter_queue_blocks",
    "rwrouter_queue_bytes",
    "rwrouter_queue_capacity_bytes",
    "rwrouter_queue_capacity_samples",
    "rwrouter_queue_disk_bytes",
    "rwrouter_queue_disk_capacity_bytes",
    "rwrouter_queue_oldest_unsent_age_seconds",
    "rwrouter_queue_samples",
    "rwrouter_queue_unsent_samples",
    "rwrouter_rejected_store_bytes",
    "rwrouter_rejected_store_entries",
    "rwrouter_shards",
)


def _series_of(metrics: Metrics, name: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """The series of destination ``name``: (family, sorted labels)."""
    return {
        (family.name, tuple(sorted(sample.labels.items())))
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.labels.get("destination") == name
    }


def test_forget_destination_removes_its_gauges_only() -> None:
    metrics = _touched()
    metrics.send.destination_protocol.labels("x", RW2_MESSAGE).set(1)
    before = _series_of(metrics, "x")
    metrics.forget_destination("x")
    after = _series_of(metrics, "x")
    assert after <= before
    assert sorted({family for family, _ in before - after}) == list(FORGOTTEN)
    assert ("rwrouter_sent_samples", (("destination", "x"),)) in after
