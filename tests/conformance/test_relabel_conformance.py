"""Relabel conformance: a real Prometheus (Debian 2.42) is the oracle for ``rwrouter.relabel``.

One Prometheus runs for the module with one ``remote_write`` block per rule set below, each
pointing at its own path on a capture server. The series table is written to Prometheus's
remote-write receiver; every queue relabels the series with its ``write_relabel_configs`` and
sends what is left. We wait until Prometheus's own counters say each queue handled every fed
sample and the capture server holds all sent samples. The same series are posted to a real
rwrouter process (``python -m rwrouter run``) with one destination per rule set, and we compare,
per rule set, the label sets Prometheus sent with what rwrouter sent (``rwrouter_outputs``).
The one intended difference: rwrouter does not send a label set left without ``__name__`` (or
with an empty label name) and counts it as ``invalid``; the engine alone matches Prometheus
exactly, nameless results included.

Version differences: rwrouter follows *current* Prometheus (``^(?s:...)$`` dot-all regexes;
``replace`` deletes the *expanded* target when the replacement expands to ""). Prometheus 2.42
compiled ``^(?:...)$`` and deleted the unexpanded ``target_label``. Those cases are kept out of
the equality table (no newline values there) and documented by the ``test_prometheus_2_42_*``
tests, which run after a config reload on their own series.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from rwrouter.relabel import Action, parse_relabel_configs, process
from rwrouter.testing.router import RouterProcess
from tests.support.capture import CaptureServer
from tests.support.prometheus import PrometheusProcess, free_port
from tests.support.series import HEADERS, LabelSet, Series, build_body, label_set

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(60)]

RuleSets = dict[str, list[dict[str, Any]]]

SERIES: list[dict[str, str]] = [
    {"__name__": "gpu_util", "GPU": "0", "instance": "h:1", "job": "dcgm",
     "tags": ",env:stage,app:web,"},
    {"__name__": "GPU_UTIL", "instance": "h:2", "job": "dcgm"},
    {"__name__": "X_GPU_UTIL_Y", "instance": "h:3", "job": "node"},
    {"__name__": "m", "pod_name": "d", "test": "c"},
    {"__name__": "m", "pod": "p1", "pod_name": "d"},
    {"__name__": "up", "instance": "h:1", "job": "a", "pod": "p"},
    {"__name__": "node_cpu", "cpu": "0", "mode": "idle", "instance": "h:10", "job": "node"},
    {"__name__": "unicode_m", "city": "İstanbul", "word": "straße", "greek": "ΟΔΟΣ",
     "emoji": "🙂x", "cyr": "привет", "iota": "ᾳ"},
    {"__name__": "commas", "v": "a,b;c", "w": "x;y"},
    {"__name__": "tmpm", "__tmp_shard": "3", "__meta_kubernetes_pod_name": "pod-a",
     "__meta_kubernetes_namespace": "ns"},
    {"__name__": "eq", "a": "same", "b": "same", "c": "other"},
    {"__name__": "neq", "a": "one", "b": "two"},
    {"__name__": "m2", "app": "Web-Front", "env": "PROD"},
    {"__name__": "dollar", "v": "$1 and $$", "t": "a_b"},
    {"__name__": "space", "v": "  lead and trail ", "k": "x"},
]

RULE_SETS: RuleSets = {
    "replace_default_copy": [{"source_labels": ["job"], "target_label": "job_copy"}],
    "replace_constant": [{"target_label": "env", "replacement": "prod"}],
    "replace_groups": [
        {"source_labels": ["instance"], "regex": "(.*):(\\d+)", "target_label": "host"},
        {"source_labels": ["instance"], "regex": "(.*):(\\d+)", "target_label": "port",
         "replacement": "${2}"},
    ],
    "replace_missing_source_deletes": [{"source_labels": ["pod"], "target_label": "pod_name"}],
    "replace_substring_regex_anchored": [
        {"source_labels": ["tags"], "regex": ",app:(.*),", "target_label": "app"}
    ],
    "replace_prefixed_regex": [
        {"source_labels": ["tags"], "regex": ".*,app:(.*),", "target_label": "app2"}
    ],
    "replace_multi_source_separator": [
        {"source_labels": ["__name__", "instance"], "separator": "@", "target_label": "id"}
    ],
    "replace_empty_separator_missing": [
        {"source_labels": ["job", "nothere", "instance"], "separator": "", "target_label": "ji"}
    ],
    "replace_template_edges": [
        {"source_labels": ["job"], "regex": "(d)(.*)", "target_label": "t",
         "replacement": "$1_x|${1}_x|$$1|${2}|$10|${|$"}
    ],
    "replace_templated_target": [
        {"source_labels": ["job"], "regex": "(.+)", "target_label": "job_${1}",
         "replacement": "yes"}
    ],
    "replace_templated_target_invalid": [
        {"source_labels": ["instance"], "regex": "(.*)", "target_label": "${1}",
         "replacement": "x"}
    ],
    "replace_unicode_value": [
        {"source_labels": ["city"], "regex": "(.)(.*)", "target_label": "first"},
        {"source_labels": ["greek"], "regex": "(.*)(.)", "target_label": "last",
         "replacement": "$2"},
    ],
    "replace_sets_name": [
        {"source_labels": ["__name__"], "regex": "GPU_UTIL", "target_label": "__name__",
         "replacement": "gpu_util_renamed"}
    ],
    "replace_empty_replacement_deletes": [
        {"source_labels": ["job"], "target_label": "instance", "replacement": ""}
    ],
    "replace_dollar_in_value": [
        {"source_labels": ["v"], "target_label": "v2", "replacement": "<$1>"}
    ],
    "replace_separator_in_values": [
        {"source_labels": ["v", "w"], "regex": "(.*);(.*);(.*)", "target_label": "split",
         "replacement": "$3|$2|$1"}
    ],
    "replace_lazy_trim": [
        {"source_labels": ["v"], "regex": "\\s*(.*?)\\s*", "target_label": "trimmed"}
    ],
    "keep_name_exact": [{"action": "keep", "source_labels": ["__name__"], "regex": "GPU_UTIL"}],
    "keep_alternation_anchored": [
        {"action": "keep", "source_labels": ["__name__"], "regex": "m|up"}
    ],
    "keep_case_insensitive": [
        {"action": "keep", "source_labels": ["__name__"], "regex": "(?i)gpu_util"}
    ],
    "keep_lazy_group": [{"action": "keep", "source_labels": ["instance"], "regex": "(.*?):1"}],
    "keep_nothing": [{"action": "keep", "source_labels": ["nothere"], "regex": "x"}],
    "drop_name_regex": [
        {"action": "drop", "source_labels": ["__name__"], "regex": ".*gpu.*|.*GPU.*"}
    ],
    "drop_missing_label": [{"action": "drop", "source_labels": ["pod"], "regex": ""}],
    "keepequal": [{"action": "keepequal", "source_labels": ["a"], "target_label": "b"}],
    "dropequal": [{"action": "dropequal", "source_labels": ["a"], "target_label": "b"}],
    "hashmod": [
        {"action": "hashmod", "source_labels": ["instance"], "modulus": 7,
         "target_label": "shard"},
        {"action": "hashmod", "source_labels": ["nothere"], "modulus": 1000,
         "target_label": "empty_hash"},
    ],
    "hashmod_shard_select": [
        {"action": "hashmod", "source_labels": ["__name__", "instance"], "modulus": 2,
         "target_label": "__tmp_hash"},
        {"action": "keep", "source_labels": ["__tmp_hash"], "regex": "0"},
        {"action": "labeldrop", "regex": "__tmp_hash"},
    ],
    "labelmap_meta": [
        {"action": "labelmap", "regex": "__meta_kubernetes_(.+)", "replacement": "k8s_$1"}
    ],
    "labelmap_groups_swap": [
        {"action": "labelmap", "regex": "(i)(n.*)", "replacement": "${2}_$1"}
    ],
    "labeldrop_double_underscore": [{"action": "labeldrop", "regex": "__.*"}],
    "labeldrop_everything": [{"action": "labeldrop"}],
    "labelkeep_job_instance": [{"action": "labelkeep", "regex": "job|instance"}],
    "labeldrop_mixed_case_action": [{"action": "LabelDrop", "regex": "job|pod.*"}],
    "tmp_labels_not_removed": [{"source_labels": ["job"], "target_label": "__tmp_job"}],
    "lowercase_unicode": [
        {"action": "lowercase", "source_labels": ["city", "word", "greek", "__name__"],
         "target_label": "lower"}
    ],
    "uppercase_unicode": [
        {"action": "uppercase", "source_labels": ["word", "cyr", "emoji", "iota"],
         "target_label": "upper"}
    ],
    "lowercase_uppercase_in_place": [
        {"action": "lowercase", "source_labels": ["app"], "target_label": "app"},
        {"action": "uppercase", "source_labels": ["__name__"], "target_label": "__name__"},
    ],
    "chain_tmp_then_drop": [
        {"source_labels": ["job"], "target_label": "__tmp_j"},
        {"source_labels": ["__tmp_j"], "regex": "d(.*)", "target_label": "dj"},
        {"action": "labeldrop", "regex": "__tmp.*"},
        {"action": "drop", "source_labels": ["dj"], "regex": ""},
    ],
}

#: Rule sets whose results differ between Prometheus 2.42 and current Prometheus semantics.
VERSION_DIFF_SERIES: list[dict[str, str]] = [
    {"__name__": "vd_newline", "v": "line1\nline2"},
    {"__name__": "vd_target", "sel": "a_b", "a_b": "present"},
]
VERSION_DIFF_RULE_SETS: RuleSets = {
    "vd_dot_matches_newline": [{"action": "keep", "source_labels": ["v"], "regex": "line1.line2"}],
    "vd_copy_newline_value": [{"source_labels": ["v"], "target_label": "copy"}],
    "vd_empty_replacement_expanded_target": [
        {"source_labels": ["sel"], "regex": "(.+)", "target_label": "${1}", "replacement": ""}
    ],
}

QUEUE = {"batch_send_deadline": "100ms", "max_shards": 1, "min_backoff": "10ms"}


def rwrouter_outputs(
    capture: CaptureServer, rule_sets: RuleSets, series: list[dict[str, str]], workdir: Path
) -> tuple[dict[str, set[LabelSet]], dict[str, float]]:
    """What a real rwrouter process sends per rule set, fed the same series over HTTP.

    One destination per rule set (its rules as ``write_relabel_configs``) pointing at
    ``/rw/<rule set>`` on the capture server. Returns the label sets received per rule set and
    the samples each destination counted as ``invalid`` (label sets without ``__name__`` or
    with an empty label name, which rwrouter does not send and Prometheus does).
    """
    destinations = [
        {"name": name, "url": capture.url(f"/rw/{name}"), "write_relabel_configs": rules,
         "queue_config": {"batch_send_deadline": "20ms"}, "metadata_config": {"send": False}}
        for name, rules in rule_sets.items()
    ]  # fmt: skip
    port = free_port()
    config = {"server": {"listen_address": f"127.0.0.1:{port}"}, "remote_write": destinations}
    config_path = workdir / "rwrouter.yaml"
    config_path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
    router = RouterProcess(config_path=config_path, port=port, log_path=workdir / "router.log")
    try:
        router.wait_ready(timeout_s=20)
        body = build_body(Series(label_set(labels), [(1_000, float(i))])
                          for i, labels in enumerate(series))  # fmt: skip
        request = urllib.request.Request(f"{router.url}/api/v1/write", data=body, headers=HEADERS)
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 204
        deadline = time.monotonic() + 20
        while not _router_done(router, capture, rule_sets, len(series)):
            assert time.monotonic() < deadline, "rwrouter did not deliver everything in time"
            time.sleep(0.05)
        invalid = {
            name: router.metric_value("rwrouter_samples_dropped_total", destination=name,
                                      reason="invalid")
            for name in rule_sets
        }  # fmt: skip
    finally:
        router.stop()
    return {name: set(capture.label_sets(f"/rw/{name}")) for name in rule_sets}, invalid


def _router_done(
    router: RouterProcess, capture: CaptureServer, rule_sets: RuleSets, fed: int
) -> bool:
    totals: dict[tuple[str, str], float] = {}
    for sample in router.metrics():
        if sample.name in ("rwrouter_sent_samples_total", "rwrouter_samples_dropped_total"):
            key = (sample.labels["destination"], sample.name)
            totals[key] = totals.get(key, 0.0) + sample.value
    for name in rule_sets:
        sent = totals.get((name, "rwrouter_sent_samples_total"), 0.0)
        dropped = totals.get((name, "rwrouter_samples_dropped_total"), 0.0)
        if sent + dropped < fed or capture.sample_count(f"/rw/{name}") < sent:
            return False
    return True


def _sendable(label_sets: set[LabelSet]) -> set[LabelSet]:
    """What rwrouter sends of what Prometheus sends: label sets with a metric name and no
    empty label name (receivers reject the others, and with them the whole batch)."""
    return {ls for ls in label_sets if "__name__" in dict(ls) and "" not in dict(ls)}


def _config(capture: CaptureServer, rule_sets: RuleSets) -> str:
    remotes = [
        {"name": name, "url": capture.url(f"/{name}"), "write_relabel_configs": rules,
         "queue_config": QUEUE, "metadata_config": {"send": False}}
        for name, rules in rule_sets.items()
    ]
    config = {"global": {"scrape_interval": "1h"}, "remote_write": remotes}
    return yaml.safe_dump(config, allow_unicode=True, sort_keys=False)


def _feed_and_collect(
    prom: PrometheusProcess, capture: CaptureServer, rule_sets: RuleSets,
    series: list[dict[str, str]], *, timeout: float = 30.0,
) -> dict[str, set[LabelSet]]:
    """Write ``series`` (one sample each, ts a bit after now) and wait until every queue of
    ``rule_sets`` handled them all (sent + dropped == fed) and the capture holds what was sent.
    """
    timestamp_ms = int(time.time() * 1000) + 1000  # after every queue's WAL-watcher start time
    body = build_body(Series(label_set(labels), [(timestamp_ms, float(i))])
                      for i, labels in enumerate(series))
    status, answer = prom.write(body)
    assert status == 204, answer
    deadline = time.monotonic() + timeout
    while not _all_done(prom, capture, rule_sets, len(series)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"remote write queues did not finish:\n{prom.log_text()[-3000:]}")
        time.sleep(0.05)
    return {name: set(capture.label_sets(f"/{name}")) for name in rule_sets}


def _all_done(
    prom: PrometheusProcess, capture: CaptureServer, rule_sets: RuleSets, fed: int
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
        if sent + dropped < fed or capture.sample_count(f"/{name}") < sent:
            return False
    return True


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


@pytest.fixture(scope="module")
def prometheus(capture: CaptureServer) -> Iterator[PrometheusProcess]:
    with PrometheusProcess.start(_config(capture, RULE_SETS)) as prom:
        yield prom


@pytest.fixture(scope="module")
def prometheus_outputs(
    prometheus: PrometheusProcess, capture: CaptureServer
) -> dict[str, set[LabelSet]]:
    return _feed_and_collect(prometheus, capture, RULE_SETS, SERIES)


@pytest.fixture(scope="module")
def router_results(
    capture: CaptureServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, set[LabelSet]], dict[str, float]]:
    return rwrouter_outputs(capture, RULE_SETS, SERIES, tmp_path_factory.mktemp("router"))


@pytest.fixture(scope="module")
def router_version_diff(
    capture: CaptureServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, set[LabelSet]]:
    workdir = tmp_path_factory.mktemp("router-vd")
    return rwrouter_outputs(capture, VERSION_DIFF_RULE_SETS, VERSION_DIFF_SERIES, workdir)[0]


@pytest.fixture(scope="module")
def version_diff_outputs(
    prometheus: PrometheusProcess,
    capture: CaptureServer,
    prometheus_outputs: Mapping[str, set[LabelSet]],  # the main comparison runs first
) -> dict[str, set[LabelSet]]:
    prometheus.reload(_config(capture, VERSION_DIFF_RULE_SETS))
    return _feed_and_collect(prometheus, capture, VERSION_DIFF_RULE_SETS, VERSION_DIFF_SERIES)


def test_table_is_broad() -> None:
    used = {Action(rule.get("action", "replace").lower()) for rules in RULE_SETS.values()
            for rule in rules}
    assert used == set(Action)
    assert len(RULE_SETS) >= 30
    assert not any("\n" in value for labels in SERIES for value in labels.values())
    assert len({label_set(labels) for labels in SERIES}) == len(SERIES)


@pytest.mark.parametrize("rule_set", list(RULE_SETS))
def test_rwrouter_matches_prometheus(
    rule_set: str,
    prometheus_outputs: Mapping[str, set[LabelSet]],
    router_results: tuple[dict[str, set[LabelSet]], dict[str, float]],
) -> None:
    from_prometheus = prometheus_outputs[rule_set]
    expected = _sendable(from_prometheus)
    actual, invalid = router_results[0][rule_set], router_results[1][rule_set]
    assert actual == expected, (
        f"only rwrouter: {sorted(actual - expected)}\nonly Prometheus: {sorted(expected - actual)}"
    )
    # What rwrouter refuses to send is exactly what it counts as invalid (one sample each).
    assert invalid == len(from_prometheus - expected)


def test_some_rule_sets_leave_series_rwrouter_refuses_to_send(
    router_results: tuple[dict[str, set[LabelSet]], dict[str, float]],
) -> None:
    # Guards the invalid-series comparison above against being vacuous.
    assert sum(1 for count in router_results[1].values() if count) >= 1


def test_engine_matches_prometheus_including_nameless_results(
    prometheus_outputs: Mapping[str, set[LabelSet]],
) -> None:
    """The engine alone, before the router's invalid-series filter, equals Prometheus exactly."""
    for name, raw in RULE_SETS.items():
        rules = parse_relabel_configs(raw, f"remote_write[{name}].write_relabel_configs")
        results = {process(labels, rules) for labels in SERIES}
        assert {r for r in results if r} == prometheus_outputs[name], name


def test_prometheus_really_sent(prometheus_outputs: Mapping[str, set[LabelSet]]) -> None:
    # Guards against a vacuous comparison (e.g. nothing captured at all).
    assert len(prometheus_outputs["replace_default_copy"]) == len(SERIES)
    assert sum(1 for sent in prometheus_outputs.values() if sent) >= 30


def test_prometheus_2_42_dot_does_not_match_newline(
    version_diff_outputs: Mapping[str, set[LabelSet]],
    router_version_diff: Mapping[str, set[LabelSet]],
) -> None:
    """2.42 compiles ``^(?:...)$``: ``.`` stops at a newline. Current Prometheus and rwrouter
    compile ``^(?s:...)$``, so ``line1.line2`` keeps the series and ``(.*)`` copies the value."""
    newline = label_set(VERSION_DIFF_SERIES[0])
    ours = router_version_diff

    assert version_diff_outputs["vd_dot_matches_newline"] == set()  # 2.42 drops it
    assert ours["vd_dot_matches_newline"] == {newline}

    assert newline in version_diff_outputs["vd_copy_newline_value"]  # 2.42: unchanged, no copy
    assert (*newline, ("copy", "line1\nline2")) not in version_diff_outputs["vd_copy_newline_value"]
    assert label_set({**dict(newline), "copy": "line1\nline2"}) in ours["vd_copy_newline_value"]


def test_prometheus_2_42_deletes_unexpanded_target_on_empty_replacement(
    version_diff_outputs: Mapping[str, set[LabelSet]],
    router_version_diff: Mapping[str, set[LabelSet]],
) -> None:
    """replace with target ``${1}`` and a replacement that expands to "": 2.42 deletes the label
    literally named ``${1}`` (none), current Prometheus and rwrouter delete the expanded one."""
    series = VERSION_DIFF_SERIES[1]
    sent = version_diff_outputs["vd_empty_replacement_expanded_target"]
    assert label_set(series) in sent  # 2.42 keeps a_b="present"
    ours = router_version_diff
    assert label_set({"__name__": "vd_target", "sel": "a_b"}) in ours[
        "vd_empty_replacement_expanded_target"
    ]
