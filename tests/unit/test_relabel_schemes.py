"""The name validation schemes of relabel rules (``global.metric_name_validation_scheme``).

Source: Prometheus ``model/relabel/relabel.go`` ``Config.Validate`` and ``relabel`` (the replace
action checks its expanded target with ``cfg.NameValidationScheme``), prometheus/common
``ValidationScheme.IsValidLabelName``. Every validation rule that depends on the scheme, under
both schemes; then the engine on UTF-8 names.
"""

from __future__ import annotations

from typing import Any

import pytest

from rwrouter.errors import ConfigError
from rwrouter.relabel import parse_relabel_configs, process
from rwrouter.relabel.names import (
    is_legacy_label_name,
    is_utf8_label_name,
    is_valid_with_references,
    name_check,
)

P = "remote_write[0].write_relabel_configs"
OK = None
#: (path suffix after ``[0]``, reason): what a scheme refuses.
Refusal = tuple[str, str] | None


def _target(action: str, name: str) -> tuple[str, str]:
    return ".target_label", f"{name} is invalid 'target_label' for {action} action"


# (id, rule, under utf8, under legacy)
SCHEME_CASES: list[tuple[str, dict[str, Any], Refusal, Refusal]] = [
    # replace, target without $: a label name under the scheme
    ("replace_target_legacy_name", {"target_label": "job"}, OK, OK),
    ("replace_target_dot", {"target_label": "gpu.uuid"}, OK, _target("replace", '"gpu.uuid"')),
    ("replace_target_dash", {"target_label": "a-b"}, OK, _target("replace", '"a-b"')),
    ("replace_target_leading_digit", {"target_label": "1a"}, OK, _target("replace", '"1a"')),
    ("replace_target_non_ascii", {"target_label": "é"}, OK, _target("replace", '"é"')),
    ("replace_target_space", {"target_label": "a b"}, OK, _target("replace", '"a b"')),
    ("replace_target_colon", {"target_label": "a:b"}, OK, _target("replace", '"a:b"')),
    # replace, target with $: any UTF-8 under utf8, relabelTargetLegacy under legacy
    ("replace_templated_legacy", {"target_label": "${1}_x"}, OK, OK),
    (
        "replace_templated_suffix_dash",
        {"target_label": "${1}-x"},
        OK,
        _target("replace", '"${1}-x"'),
    ),
    (
        "replace_templated_leading_digit",
        {"target_label": "0${3}"},
        OK,
        _target("replace", '"0${3}"'),
    ),
    (
        "replace_templated_leading_dash",
        {"target_label": "-${3}"},
        OK,
        _target("replace", '"-${3}"'),
    ),
    ("replace_templated_dot", {"target_label": "k8s.$1"}, OK, _target("replace", '"k8s.$1"')),
    ("replace_lone_dollar", {"target_label": "$"}, OK, _target("replace", '"$"')),
    ("replace_unclosed_brace", {"target_label": "foo${"}, OK, _target("replace", '"foo${"')),
    # lowercase / uppercase / keepequal / dropequal: a label name under the scheme ($ is literal)
    (
        "lowercase_target_leading_digit",
        {"action": "lowercase", "target_label": "1a"},
        OK,
        _target("lowercase", '"1a"'),
    ),
    (
        "lowercase_target_reference_is_a_name",
        {"action": "lowercase", "target_label": "${3}"},
        OK,
        _target("lowercase", '"${3}"'),
    ),
    (
        "uppercase_target_dot",
        {"action": "uppercase", "target_label": "gpu.uuid"},
        OK,
        _target("uppercase", '"gpu.uuid"'),
    ),
    (
        "keepequal_target_dot",
        {"action": "keepequal", "target_label": "a.b"},
        OK,
        _target("keepequal", '"a.b"'),
    ),
    (
        "dropequal_target_dash",
        {"action": "dropequal", "target_label": "x-y"},
        OK,
        _target("dropequal", '"x-y"'),
    ),
    ("lowercase_legacy_target", {"action": "lowercase", "target_label": "low"}, OK, OK),
    # order: the target check comes before the replacement check
    (
        "uppercase_order_target_then_replacement",
        {"action": "uppercase", "target_label": "a.b", "replacement": "x"},
        (".replacement", "'replacement' can not be set for uppercase action"),
        _target("uppercase", '"a.b"'),
    ),
    # labelmap replacement: any UTF-8 under utf8, relabelTargetLegacy under legacy
    (
        "labelmap_legacy_replacement",
        {"action": "labelmap", "regex": "__meta_(.+)", "replacement": "${1}"},
        OK,
        OK,
    ),
    (
        "labelmap_strimzi",
        {
            "action": "labelmap",
            "regex": "__meta_kubernetes_pod_label_(strimzi_io_.+)",
            "replacement": "$1",
        },
        OK,
        OK,
    ),
    (
        "labelmap_dot_replacement",
        {"action": "labelmap", "regex": "__meta_kubernetes_(.+)", "replacement": "k8s.$1"},
        OK,
        (".replacement", "\"k8s.$1\" is invalid 'replacement' for labelmap action"),
    ),
    (
        "labelmap_dash_replacement",
        {"action": "labelmap", "replacement": "a-$1"},
        OK,
        (".replacement", "\"a-$1\" is invalid 'replacement' for labelmap action"),
    ),
    (
        "labelmap_empty_replacement",
        {"action": "labelmap", "replacement": ""},
        (".replacement", "\"\" is invalid 'replacement' for labelmap action"),
        (".replacement", "\"\" is invalid 'replacement' for labelmap action"),
    ),
    # hashmod: a label name under the scheme
    (
        "hashmod_target_reference",
        {"action": "hashmod", "modulus": 2, "target_label": "$1"},
        OK,
        _target("hashmod", '"$1"'),
    ),
    (
        "hashmod_target_dot",
        {"action": "hashmod", "modulus": 2, "target_label": "shard.id"},
        OK,
        _target("hashmod", '"shard.id"'),
    ),
    # source_labels: any non-empty UTF-8 name under both
    (
        "source_labels_utf8",
        {"source_labels": ["service.name", "k8s.pod", "a-b", "0"], "target_label": "svc"},
        OK,
        OK,
    ),
    (
        "source_labels_empty_name",
        {"source_labels": [""], "target_label": "svc"},
        (".source_labels[0]", '"" is not a valid label name'),
        (".source_labels[0]", '"" is not a valid label name'),
    ),
    # a target is required whatever the scheme
    (
        "replace_empty_target",
        {"target_label": ""},
        (".target_label", "relabel configuration for replace action requires 'target_label' value"),
        (".target_label", "relabel configuration for replace action requires 'target_label' value"),
    ),
]


@pytest.mark.parametrize("scheme", ["utf8", "legacy"])
@pytest.mark.parametrize(
    ("rule", "utf8", "legacy"), [c[1:] for c in SCHEME_CASES], ids=[c[0] for c in SCHEME_CASES]
)
def test_validation_under_scheme(
    rule: dict[str, Any], utf8: Refusal, legacy: Refusal, scheme: str
) -> None:
    expected = utf8 if scheme == "utf8" else legacy
    if expected is None:
        (parsed,) = parse_relabel_configs([rule], P, scheme=scheme)
        assert parsed.name_validation_scheme == scheme
        return
    with pytest.raises(ConfigError) as info:
        parse_relabel_configs([rule], P, scheme=scheme)
    suffix, reason = expected
    assert info.value.path == f"{P}[0]{suffix}"
    if scheme == "legacy" and " is invalid '" in reason:  # Prometheus's text, then the scheme
        assert info.value.reason.startswith(
            f"{reason} (global.metric_name_validation_scheme is legacy"
        )
    else:
        assert info.value.reason == reason


# prometheus/common IsValidLabelName and Prometheus's relabelTargetLegacy (TestTargetLabelLegacy
# Validity's rows are in tests/unit/test_relabel_prometheus_cases.py).
NAME_CASES = [
    # (id, name, utf8 valid, legacy valid)
    ("legacy", "job", True, True),
    ("underscore_start", "_a1", True, True),
    ("double_underscore", "__name__", True, True),
    ("empty", "", False, False),
    ("dot", "service.name", True, False),
    ("digit_start", "0a", True, False),
    ("colon", "a:b", True, False),
    ("non_ascii_letter", "ä", True, False),
    ("emoji", "\U0001f600", True, False),
    ("newline", "a\nb", True, False),
    ("lone_surrogate", "a\ud800", False, False),
]


@pytest.mark.parametrize(
    ("name", "utf8", "legacy"), [c[1:] for c in NAME_CASES], ids=[c[0] for c in NAME_CASES]
)
def test_label_name_validity(name: str, utf8: bool, legacy: bool) -> None:
    assert is_utf8_label_name(name) is utf8
    assert is_legacy_label_name(name) is legacy
    assert name_check("utf8")(name) is utf8
    assert name_check("legacy")(name) is legacy
    assert is_valid_with_references(name, "utf8") is utf8


# (id, scheme, rules, input, expected output; None = dropped)
ENGINE_CASES: list[tuple[str, str, list[dict[str, Any]], dict[str, str], dict[str, str] | None]]
ENGINE_CASES = [
    (
        "source_label_dotted",
        "utf8",
        [{"source_labels": ["service.name"], "target_label": "svc"}],
        {"__name__": "m", "service.name": "api"},
        {"__name__": "m", "service.name": "api", "svc": "api"},
    ),
    (
        "source_label_dotted_under_legacy",
        "legacy",
        [{"source_labels": ["service.name"], "target_label": "svc"}],
        {"__name__": "m", "service.name": "api"},
        {"__name__": "m", "service.name": "api", "svc": "api"},
    ),
    (
        "keep_on_dotted_source",
        "legacy",
        [{"action": "keep", "source_labels": ["service.name"], "regex": "api"}],
        {"__name__": "m", "service.name": "web"},
        None,
    ),
    (
        "target_dotted",
        "utf8",
        [{"source_labels": ["UUID"], "target_label": "gpu.uuid"}],
        {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1"},
        {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1", "gpu.uuid": "GPU-1"},
    ),
    (
        "labelmap_dotted_replacement",
        "utf8",
        [{"action": "labelmap", "regex": "__meta_kubernetes_(.+)", "replacement": "k8s.$1"}],
        {"__name__": "m", "__meta_kubernetes_pod_name": "p", "__meta_kubernetes_namespace": "n"},
        {
            "__name__": "m",
            "__meta_kubernetes_pod_name": "p",
            "__meta_kubernetes_namespace": "n",
            "k8s.pod_name": "p",
            "k8s.namespace": "n",
        },
    ),
    (
        "labelmap_from_dotted_names",
        "utf8",
        [{"action": "labelmap", "regex": "k8s\\.(.+)", "replacement": "k8s_${1}"}],
        {"__name__": "m", "k8s.pod.name": "p"},
        {"__name__": "m", "k8s.pod.name": "p", "k8s_pod.name": "p"},
    ),
    (
        "labelmap_legacy_rule_may_make_utf8_name",
        "legacy",  # no run-time check (as Prometheus)
        [{"action": "labelmap", "regex": "(.+)_total", "replacement": "$1"}],
        {"__name__": "m", "a.b_total": "1"},
        {"__name__": "m", "a.b_total": "1", "a.b": "1"},
    ),
    (
        "expanded_target_dotted_utf8",
        "utf8",
        [{"source_labels": ["sel"], "regex": "(.+)", "target_label": "${1}", "replacement": "yes"}],
        {"__name__": "m", "sel": "a.b"},
        {"__name__": "m", "sel": "a.b", "a.b": "yes"},
    ),
    (
        "expanded_target_dotted_legacy_no_change",
        "legacy",
        [{"source_labels": ["sel"], "regex": "(.+)", "target_label": "${1}", "replacement": "yes"}],
        {"__name__": "m", "sel": "a.b"},
        {"__name__": "m", "sel": "a.b"},
    ),
    (
        "expanded_target_legacy_valid",
        "legacy",
        [{"source_labels": ["sel"], "regex": "(.+)", "target_label": "${1}", "replacement": "yes"}],
        {"__name__": "m", "sel": "a_b"},
        {"__name__": "m", "sel": "a_b", "a_b": "yes"},
    ),
    (
        "expanded_target_leading_digit_utf8",
        "utf8",
        [{"source_labels": ["c"], "regex": "(.*)", "target_label": "${1}", "replacement": "v"}],
        {"__name__": "m", "c": "1x"},
        {"__name__": "m", "c": "1x", "1x": "v"},
    ),
    (
        "expanded_target_leading_digit_legacy_no_change",
        "legacy",
        [{"source_labels": ["c"], "regex": "(.*)", "target_label": "${1}", "replacement": "v"}],
        {"__name__": "m", "c": "1x"},
        {"__name__": "m", "c": "1x"},
    ),
    (
        "expanded_target_empty_no_change",
        "utf8",
        [{"source_labels": ["zz"], "regex": "(.*)", "target_label": "${1}", "replacement": "v"}],
        {"__name__": "m"},
        {"__name__": "m"},
    ),
    (
        "expanded_target_deletes_dotted",
        "utf8",
        [{"source_labels": ["sel"], "regex": "(.+)", "target_label": "${1}", "replacement": "$2"}],
        {"__name__": "m", "sel": "a.b", "a.b": "x"},
        {"__name__": "m", "sel": "a.b"},
    ),
    (
        "lowercase_reference_is_literal_name",
        "utf8",
        [{"action": "lowercase", "source_labels": ["a"], "target_label": "${1}"}],
        {"__name__": "m", "a": "X"},
        {"__name__": "m", "a": "X", "${1}": "x"},
    ),
    (
        "hashmod_dotted_target",
        "utf8",
        [{"action": "hashmod", "source_labels": ["c"], "modulus": 1000, "target_label": "shard.n"}],
        {"__name__": "m", "c": "baz"},
        {"__name__": "m", "c": "baz", "shard.n": "976"},
    ),
    (
        "labeldrop_dotted",
        "legacy",
        [{"action": "labeldrop", "regex": "service\\..*"}],
        {"__name__": "m", "service.name": "a", "service.version": "1", "job": "j"},
        {"__name__": "m", "job": "j"},
    ),
    (
        "name_utf8_metric",
        "utf8",
        [
            {
                "source_labels": ["__name__"],
                "regex": "http\\.(.*)",
                "target_label": "__name__",
                "replacement": "http_$1",
            }
        ],
        {"__name__": "http.server.duration"},
        {"__name__": "http_server.duration"},
    ),
]


@pytest.mark.parametrize(
    ("scheme", "rules", "labels", "expected"),
    [c[1:] for c in ENGINE_CASES],
    ids=[c[0] for c in ENGINE_CASES],
)
def test_engine_under_scheme(
    scheme: str,
    rules: list[dict[str, Any]],
    labels: dict[str, str],
    expected: dict[str, str] | None,
) -> None:
    result = process(labels, parse_relabel_configs(rules, P, scheme=scheme))
    assert result == (None if expected is None else tuple(sorted(expected.items())))
