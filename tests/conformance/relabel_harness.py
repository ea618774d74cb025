"""Running the relabel oracles: a real Prometheus and a real rwrouter, fed the same series.

Each series is written with one sample whose value is its index in the series list, so what a
sender delivered can be traced back to the series it came from: an :data:`Outcomes` maps each
rule set to {series index: the label set delivered}; an index that is absent was not sent.

- :func:`prometheus_outcomes`: one ``remote_write`` queue per rule set, its rules as
  ``write_relabel_configs``, each to its own path ``/<prefix>/<rule set>`` on the capture
  server; the series are written to Prometheus's remote-write receiver (RW 1.0, names as they
  are) and we wait until Prometheus's own counters say each queue handled them all.
  Before the series, a probe sample an hour old (which no queue sends) makes sure every
  queue's WAL watcher is reading (:func:`_wait_watchers_reading`).
- :func:`rwrouter_outcomes`: a ``python -m rwrouter run`` with one destination per rule set.
- :func:`engine_outcomes`: ``rwrouter.relabel.process`` alone.

Both configurations set ``global.metric_name_validation_scheme`` to the run's scheme (Prometheus
2.42 has no such key: ``scheme=None`` leaves it out).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import yaml

from rwrouter.doubles.router import RouterProcess
from rwrouter.relabel import parse_relabel_configs, process
from tests.conformance.relabel_tables import RuleSets
from tests.support.capture import CaptureServer
from tests.support.prometheus import PrometheusProcess, free_port
from tests.support.series import HEADERS, LabelSet, Series, build_body, label_set

Outcomes = dict[str, dict[int, LabelSet]]
QUEUE = {"batch_send_deadline": "100ms", "max_shards": 1, "min_backoff": "10ms"}


def prometheus_config(
    capture: CaptureServer, rule_sets: RuleSets, *, prefix: str, scheme: str | None
) -> str:
    """The YAML of a Prometheus with one remote_write queue per rule set."""
    remotes = [
        {
            "name": name,
            "url": capture.url(f"/{prefix}/{name}"),
            "write_relabel_configs": rules,
            "queue_config": QUEUE,
            "metadata_config": {"send": False},
        }
        for name, rules in rule_sets.items()
    ]
    global_: dict[str, str] = {"scrape_interval": "1h"}
    if scheme is not None:
        global_["metric_name_validation_scheme"] = scheme
    config = {"global": global_, "remote_write": remotes}
    return yaml.safe_dump(config, allow_unicode=True, sort_keys=False)


def _body(series: Sequence[dict[str, str]], timestamp_ms: int) -> bytes:
    return build_body(
        Series(label_set(labels), [(timestamp_ms, float(index))])
        for index, labels in enumerate(series)
    )


def delivered(capture: CaptureServer, path: str) -> dict[int, LabelSet]:
    """{sample value (the series index): label set} of what arrived at ``path``."""
    out: dict[int, LabelSet] = {}
    for received in capture.requests(path):
        if received.request is None or received.status >= 300:
            continue
        for ts in received.request.timeseries:
            labels = tuple((label.name, label.value) for label in ts.labels)
            for sample in ts.samples:
                out[int(sample.value)] = labels
    return out


def prometheus_outcomes(
    binary: str | None,
    capture: CaptureServer,
    rule_sets: RuleSets,
    series: Sequence[dict[str, str]],
    *,
    prefix: str,
    scheme: str | None,
    timeout: float = 60.0,
) -> Outcomes:
    """Start a Prometheus (``binary``; ``None``: Debian's), write ``series``, wait until every
    queue handled every sample, stop it; what each queue sent."""
    config = prometheus_config(capture, rule_sets, prefix=prefix, scheme=scheme)
    with PrometheusProcess.start(config, binary=binary) as prom:
        deadline = time.monotonic() + timeout
        _wait_watchers_reading(prom, rule_sets, deadline)
        timestamp_ms = int(time.time() * 1000) + 1000  # after each queue's WAL-watcher start
        status, answer = prom.write(_body(series, timestamp_ms))
        assert status == 204, answer
        nudge_at = time.monotonic() + 1.0
        while not _prometheus_done(prom, capture, rule_sets, len(series), prefix):
            if time.monotonic() > deadline:
                raise TimeoutError(f"queues did not finish:\n{prom.log_text()[-3000:]}")
            if time.monotonic() > nudge_at:  # a watcher missed the notification: another
                _write_probe(prom)
                nudge_at = time.monotonic() + 1.0
            time.sleep(0.05)
    return {name: delivered(capture, f"/{prefix}/{name}") for name in rule_sets}


#: The series of :func:`_wait_watchers_reading`'s samples: an hour old, so no queue sends them
#: (a WAL watcher sends only samples newer than its own start, ``startTimestamp`` in
#: ``tsdb/wlog/watcher.go``), and no rule set's outcome can hold them.
PROBE = {"__name__": "conformance_wal_probe"}
PROBE_AGE_MS = 3_600_000


def _wait_watchers_reading(prom: PrometheusProcess, rule_sets: RuleSets, deadline: float) -> None:
    """Return once every queue's WAL watcher has read a samples record: it is past its start
    and waits for the WAL's write notifications. Prometheus 3's watcher drops a notification
    it is not waiting for (``notifications_skipped``) and reads again only after its 15 s
    ``readTimeout``: written too early, the series would wait that long in some queues. Each
    round writes a probe (:func:`_write_probe`) and polls the watchers'
    ``prometheus_wal_watcher_records_read_total{type="samples"}`` for half a second. (A
    watcher busy reading can miss a later notification too: :func:`prometheus_outcomes`
    writes a probe again every second the queues are not done.)"""
    read = set[str | None]()
    while True:
        _write_probe(prom)
        settle = time.monotonic() + 0.5
        while time.monotonic() < min(settle, deadline):
            read = {
                sample.labels.get("consumer")
                for sample in prom.metrics()
                if sample.name == "prometheus_wal_watcher_records_read_total"
                and sample.labels.get("type") == "samples"
                and sample.value > 0
            }
            if read >= set(rule_sets):
                return
            time.sleep(0.05)
        if time.monotonic() > deadline:
            raise TimeoutError(f"WAL watchers not reading: {sorted(set(rule_sets) - read)}")


def _write_probe(prom: PrometheusProcess) -> None:
    """Write one sample of :data:`PROBE`, :data:`PROBE_AGE_MS` old: a WAL write that notifies
    every watcher and that no queue sends."""
    sample = (int(time.time() * 1000) - PROBE_AGE_MS, -1.0)  # index -1 if ever delivered
    status, answer = prom.write(build_body([Series(label_set(PROBE), [sample])]))
    assert status == 204, answer


def _prometheus_done(
    prom: PrometheusProcess, capture: CaptureServer, rule_sets: RuleSets, fed: int, prefix: str
) -> bool:
    totals: dict[tuple[str, str], float] = {}
    for sample in prom.metrics():
        remote = sample.labels.get("remote_name")
        if remote in rule_sets:
            key = (remote, sample.name)
            totals[key] = totals.get(key, 0.0) + sample.value
    for name in rule_sets:
        sent = totals.get((name, "prometheus_remote_storage_samples_total"), 0.0)
        dropped = totals.get((name, "prometheus_remote_storage_samples_dropped_total"), 0.0)
        failed = totals.get((name, "prometheus_remote_storage_samples_failed_total"), 0.0)
        assert failed == 0, f"{name}: Prometheus failed to send samples"
        if sent + dropped < fed or capture.sample_count(f"/{prefix}/{name}") < sent:
            return False
    return True


def rwrouter_outcomes(
    capture: CaptureServer,
    rule_sets: RuleSets,
    series: Sequence[dict[str, str]],
    workdir: Path,
    *,
    prefix: str,
    scheme: str,
    timeout: float = 30.0,
) -> tuple[Outcomes, dict[str, float]]:
    """What a real rwrouter process sends per rule set, fed ``series`` over HTTP, and the
    samples each destination counted as ``invalid`` (a label set without ``__name__`` or with
    an empty label name: rwrouter does not send it, Prometheus does)."""
    destinations = [
        {
            "name": name,
            "url": capture.url(f"/{prefix}/{name}"),
            "write_relabel_configs": rules,
            "queue_config": {"batch_send_deadline": "20ms"},
            "metadata_config": {"send": False},
        }
        for name, rules in rule_sets.items()
    ]
    port = free_port()
    config = {
        "global": {"metric_name_validation_scheme": scheme},
        "server": {"listen_address": f"127.0.0.1:{port}"},
        "remote_write": destinations,
    }
    config_path = workdir / "rwrouter.yaml"
    config_path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
    router = RouterProcess(config_path=config_path, port=port, log_path=workdir / "router.log")
    try:
        router.wait_ready(timeout_s=20)
        request = urllib.request.Request(
            f"{router.url}/api/v1/write", data=_body(series, 1_000), headers=HEADERS
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 204
        deadline = time.monotonic() + timeout
        while not _router_done(router, capture, rule_sets, len(series), prefix):
            assert time.monotonic() < deadline, "rwrouter did not deliver everything in time"
            time.sleep(0.05)
        invalid = dict.fromkeys(rule_sets, 0.0)
        for sample in router.metrics():  # one scrape: ~0.1 s each with ~70 destinations
            if sample.name == "rwrouter_samples_dropped_total" and (
                sample.labels.get("reason") == "invalid"
            ):
                name = sample.labels.get("destination", "")
                if name in invalid:
                    invalid[name] += sample.value
    finally:
        router.stop()
    return {name: delivered(capture, f"/{prefix}/{name}") for name in rule_sets}, invalid


def _router_done(
    router: RouterProcess, capture: CaptureServer, rule_sets: RuleSets, fed: int, prefix: str
) -> bool:
    totals: dict[tuple[str, str], float] = {}
    for sample in router.metrics():
        if sample.name in ("rwrouter_sent_samples_total", "rwrouter_samples_dropped_total"):
            key = (sample.labels["destination"], sample.name)
            totals[key] = totals.get(key, 0.0) + sample.value
    for name in rule_sets:
        sent = totals.get((name, "rwrouter_sent_samples_total"), 0.0)
        dropped = totals.get((name, "rwrouter_samples_dropped_total"), 0.0)
        if sent + dropped < fed or capture.sample_count(f"/{prefix}/{name}") < sent:
            return False
    return True


def engine_outcomes(
    rule_sets: RuleSets, series: Sequence[dict[str, str]], *, scheme: str
) -> dict[str, dict[int, LabelSet | None]]:
    """``process`` per rule set and series index (``None``: dropped by a rule)."""
    out: dict[str, dict[int, LabelSet | None]] = {}
    for name, raw in rule_sets.items():
        rules = parse_relabel_configs(raw, f"remote_write[{name}]", scheme=scheme)
        out[name] = {index: process(labels, rules) for index, labels in enumerate(series)}
    return out


def sendable(labels: LabelSet) -> bool:
    """Whether rwrouter sends ``labels``: a metric name and no empty label name (receivers
    refuse the others, and with them the whole batch)."""
    names = [name for name, _ in labels]
    return "__name__" in names and "" not in names
