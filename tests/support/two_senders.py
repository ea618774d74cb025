"""The model of tests/e2e/test_prometheus3.py: what a Prometheus 3 (``p3``) and a Prometheus
2.42 (``p2``) scrape from two demo GPU nodes with their sidecars, what is pushed into their
receivers, and how each store must hold it.

- :func:`scraped`: every series a sender scrapes, labels as it writes them (scrape labels and
  its ``sender`` external label added) -> its family's metadata (type, help, unit), from
  :mod:`rwrouter.demo.fleet`, :mod:`tests.support.sidecar` and Prometheus's report series.
- :func:`escape`: a label set as an ``underscores`` destination gets it (an independent
  transcription of prometheus/common ``EscapeName`` for the simple names used here: every
  character outside the legacy set becomes ``_``).
- :func:`typed`: a label set as a Prometheus 3 with ``--enable-feature=type-and-unit-labels``
  stores it when its RW 2.0 metadata is ``meta`` (``__type__`` unless unknown, ``__unit__``
  unless empty: Prometheus ``schema/labels.go``).
- :func:`pushed_series`: native histograms pushed into a sender (integer and float gauge
  histograms, critical and not).
- :func:`router_config`, :func:`sender_config`, :data:`SENDER_FLAGS`: how the processes run.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import re2  # type: ignore[import-untyped]

from rwrouter.demo.configs import ALLOWLIST
from rwrouter.demo.exporter import ExporterFleet
from rwrouter.protocol import RW2_MESSAGE
from rwrouter.wire import remote_pb2, types_pb2
from tests.support.series import encode
from tests.support.sidecar import SIDECAR, sidecar_series

LabelSet = tuple[tuple[str, str], ...]
Meta = tuple[str, str, str]  # OpenMetrics type, help, unit

REGION, WORKSPACE, ACCESS_KEY, SECRET = "us-east-1", "ws-e2e", "AKIDE2EPROM3", "e2e-secret"

JOB = "gpu-node"
SENDERS = ("p3", "p2")  # scraping node 0 and node 1
UTF8 = {"p3": True, "p2": False}  # the sidecar's form each node exposes
PUSH_LABEL = {"p3": "service.name", "p2": "service_name"}
#: Prometheus's report series and their metadata (scrape/scrape.go, ``scrapeHealthMetric``...).
REPORT: dict[str, Meta] = {
    "up": (
        "gauge",
        "Health of the scrape target. 1 means the target is healthy, 0 if the scrape failed.",
        "targets",
    ),
    "scrape_duration_seconds": ("gauge", "Duration of the last scrape in seconds.", "seconds"),
    "scrape_samples_scraped": ("gauge", "Number of samples last scraped.", "samples"),
    "scrape_samples_post_metric_relabeling": (
        "gauge",
        "Number of samples remaining after metric relabeling was applied.",
        "samples",
    ),
    "scrape_series_added": ("gauge", "Number of series in the last scrape.", "series"),
}
TYPE_CODES = {"counter": types_pb2.MetricMetadata.COUNTER, "gauge": types_pb2.MetricMetadata.GAUGE}
#: What the workspace keeps: the demo's DCGM allowlist, the sidecar's critical families (both
#: forms) and the pushed ``push.critical.*`` / ``push_critical_*`` series.
CRITICAL = "|".join(
    [
        ALLOWLIST,
        *(re.escape(name) for f in SIDECAR if f.critical for name in (f.utf8, f.legacy) if name),
        r"push[._]critical[._].*",
    ]
)
_CRITICAL = re2.compile(CRITICAL)


def key(labels: dict[str, str]) -> LabelSet:
    return tuple(sorted(labels.items()))


def name_of(labels: LabelSet) -> str:
    return dict(labels)["__name__"]


def is_critical(labels: LabelSet) -> bool:
    """Whether the workspace's keep rule keeps the series (names as received)."""
    return bool(_CRITICAL.fullmatch(name_of(labels)))


def escape_metric(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_:]", "_", name)


def escape(labels: LabelSet) -> LabelSet:
    return key(
        {
            n if n == "__name__" else re.sub(r"[^a-zA-Z0-9_]", "_", n): escape_metric(v)
            if n == "__name__"
            else v
            for n, v in labels
        }
    )


def typed(labels: LabelSet, meta: Meta) -> LabelSet:
    kind, _, unit = meta
    return key({**dict(labels), "__type__": kind, **({"__unit__": unit} if unit else {})})


def bits(value: float) -> int:
    """The 8 bytes of a float64 as an unsigned integer."""
    return int(struct.unpack("<Q", struct.pack("<d", value))[0])


def bits_to_float(raw: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", raw))[0])


def scraped(fleet: ExporterFleet, sender: str) -> dict[LabelSet, Meta]:
    """Every series ``sender`` scrapes from its node (``fleet.nodes[SENDERS.index(sender)]``),
    as it writes them -> its family's metadata."""
    node = fleet.nodes[SENDERS.index(sender)]
    extra = {"job": JOB, "instance": node.target, "sender": sender}
    out: dict[LabelSet, Meta] = {}
    for name, kind, doc, samples in node.model.families(0.0):  # DCGM, node, kubelet: no units
        for labels, _ in samples:
            out[key({**labels, **extra, "__name__": name})] = (kind, doc, "")
    for family, sample, labels, _ in sidecar_series(node.model, 0.0, utf8=UTF8[sender]):
        out[key({**labels, **extra, "__name__": sample})] = (family.kind, family.help, family.unit)
    for name, meta in REPORT.items():
        out[key({**extra, "__name__": name})] = meta
    return out


@dataclass(frozen=True)
class Pushed:
    """A series pushed into a sender's receiver: ``labels`` (without ``sender``) and its native
    ``histograms`` as sent."""

    labels: LabelSet
    histograms: tuple[types_pb2.Histogram, ...]

    def as_written(self, sender: str) -> LabelSet:
        """The labels ``sender`` writes (its external label added)."""
        return key({**dict(self.labels), "sender": sender})


def pushed_series(sender: str, start_ms: int) -> list[Pushed]:
    """Per sender: an integer histogram (``latency``) and a float gauge histogram (``load``),
    each critical and not, named with dots (p3) or underscores (p2); two points each, from
    ``start_ms``. Sums and bounds are such that float arithmetic anywhere would show
    (0.1 + 0.2; schema 1: bounds of 2 ** 0.5)."""
    out = []
    for critical in (True, False):
        for metric in ("latency", "load"):
            parts = ("push", "critical", metric) if critical else ("push", metric)
            name = ("." if UTF8[sender] else "_").join(parts)
            labels = key({"__name__": name, PUSH_LABEL[sender]: "pusher"})
            maker = _integer_histograms if metric == "latency" else _float_histograms
            out.append(Pushed(labels, maker(start_ms)))
    return out


def _integer_histograms(start_ms: int) -> tuple[types_pb2.Histogram, ...]:
    """Schema 0, counts as deltas, a zero bucket, buckets on both sides."""
    points = []
    for i, (count, total, positive, negative) in enumerate(
        ((7, 0.1 + 0.2, [2, 1], [1]), (9, 0.7, [3, 0], [2]))
    ):
        h = types_pb2.Histogram(
            count_int=count,
            sum=total,
            schema=0,
            zero_threshold=0.001,
            zero_count_int=1,
            timestamp=start_ms + 500 * i,
        )
        h.positive_spans.add(offset=0, length=2)
        h.positive_deltas.extend(positive)
        h.negative_spans.add(offset=1, length=1)
        h.negative_deltas.extend(negative)
        points.append(h)
    return tuple(points)


def _float_histograms(start_ms: int) -> tuple[types_pb2.Histogram, ...]:
    """Schema 1, absolute float counts, a gauge histogram (reset hint GAUGE)."""
    points = []
    for i, (count, total) in enumerate(((3.5, -1.25), (1.5, 0.1 + 0.7))):
        h = types_pb2.Histogram(
            count_float=count,
            sum=total,
            schema=1,
            zero_count_float=0.5,
            reset_hint=types_pb2.Histogram.GAUGE,
            timestamp=start_ms + 500 * i,
        )
        h.positive_spans.add(offset=-1, length=2)
        h.positive_counts.extend([count - 0.5 - 1.0, 1.0])
        points.append(h)
    return tuple(points)


def push_body(series: list[Pushed]) -> bytes:
    """The RW 1.0 body (snappy) writing ``series`` into a Prometheus's receiver."""
    request = remote_pb2.WriteRequest()
    for item in series:
        ts = request.timeseries.add()
        for name, value in item.labels:
            ts.labels.add(name=name, value=value)
        ts.histograms.extend(item.histograms)
    return encode(request)


# -- the configurations ------------------------------------------------------------------------
def router_config(*, port: int, queues: Path, workspace_url: str, store_url: str) -> str:
    """rwrouter's: the critical series to the workspace (``sigv4``: RW 1.0, names escaped with
    underscores by default), every other one to the store (RW 2.0, names as they are)."""
    deadline = "queue_config: {batch_send_deadline: 500ms, max_backoff: 1s}"
    return f"""
global: {{metric_name_validation_scheme: utf8}}
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: 5s}}
storage: {{path: {queues}}}
remote_write:
  - name: workspace        # sigv4: RW 1.0, metric_name_escaping_scheme underscores
    url: {workspace_url}
    sigv4: {{region: {REGION}, access_key: {ACCESS_KEY}, secret_key: {SECRET}}}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: '{CRITICAL}', action: keep}}
    {deadline}
  - name: store            # allow-utf-8
    url: {store_url}/api/v1/write
    protobuf_message: {RW2_MESSAGE}
    fallback: true
    {deadline}
"""


def sender_config(*, sender: str, target: str, router_url: str) -> str:
    """A sender's: scrapes ``target`` every second, writes everything to rwrouter, native
    histograms included: p3 in RW 2.0, p2 in RW 1.0 with metadata requests every second."""
    message = (
        f"protobuf_message: {RW2_MESSAGE}"
        if UTF8[sender]  # RW 2.0: in the series
        else "metadata_config: {send_interval: 1s}"
    )
    return f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s, external_labels: {{sender: {sender}}}}}
scrape_configs:
  - job_name: {JOB}
    static_configs: [{{targets: ["{target}"]}}]
remote_write:
  - name: rwrouter
    url: {router_url}/api/v1/write
    {message}
    send_native_histograms: true
    queue_config: {{batch_send_deadline: 500ms, min_backoff: 50ms, max_backoff: 1s}}
"""


#: p3: RW 2.0 metadata, and targets applied after 1 s (2.42: 5 s, so its first scrape waits);
#: p2: a TSDB that takes native histograms (on its receiver too).
SENDER_FLAGS = {
    "p3": ("--enable-feature=metadata-wal-records", "--scrape.discovery-reload-interval=1s"),
    "p2": ("--enable-feature=native-histograms",),
}
