"""Prometheus's own relabel tests, as tables: the cases of ``model/relabel/relabel_test.go``.

Source: Prometheus v3.16.0 (Go module ``github.com/prometheus/prometheus@v0.316.0``; issue 12
names v3.14.0's file, this is the newer one we have). Facts, not code: each Go case is a named
row here — input labels, rules as the YAML mappings a config file would hold, and the expected
labels or ``DROPPED``.

- ``TestRelabel``: :data:`RELABEL_CASES`. The Go test fills unset fields with the defaults
  (action replace, separator ``;``, the default regex, replacement ``$1``) and validates under
  UTF-8: here an omitted key takes the same default and the rows run under ``utf8``.
- ``TestRelabelValidate``: :data:`VALIDATE_CASES` (each row's own scheme).
- ``TestTargetLabelLegacyValidity``: :data:`LEGACY_TARGET_CASES` (Prometheus's
  ``relabelTargetLegacy``).
- ``TestConfig_UnmarshalThenMarshal`` and ``TestRegexp_ShouldMarshalAndUnmarshalZeroValue``:
  :data:`UNMARSHAL_CASES`, the unmarshal half (what the YAML loads as; rwrouter never writes
  rules back as YAML, so the marshal half has no counterpart).
- ``TestRegexp_JSONUnmarshalThenMarshal``: not ported (rwrouter reads no JSON rules).
- ``BenchmarkRelabel``'s three rule sets (no expected output in Go): :data:`BENCHMARK_SETS` load
  under both schemes; ``tests/conformance`` runs them against a real Prometheus.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from rwrouter.errors import ConfigError
from rwrouter.relabel import DEFAULT_REGEX, parse_relabel_configs, process
from rwrouter.relabel.names import is_valid_with_references

DROPPED = None
ABC = {"a": "foo", "b": "bar", "c": "baz"}
NEWLINE = {"a": "line1\nline2", "b": "bar", "c": "baz"}
PORTS = {"__tmp_port": "1234", "__port1": "1234", "__port2": "5678"}
SOME = "some-([^-]+)-([^,]+)"

# (id, input labels, rules, expected labels or DROPPED) — TestRelabel, in the Go file's order.
RELABEL_CASES: list[tuple[str, dict[str, str], list[dict[str, Any]], dict[str, str] | None]] = [
    (
        "replace_group_twice",
        ABC,
        [
            {
                "source_labels": ["a"],
                "regex": "f(.*)",
                "target_label": "d",
                "separator": ";",
                "replacement": "ch${1}-ch${1}",
                "action": "replace",
            }
        ],
        {**ABC, "d": "choo-choo"},
    ),
    (
        "replace_chain_multi_source",
        ABC,
        [
            {
                "source_labels": ["a", "b"],
                "regex": "f(.*);(.*)r",
                "target_label": "a",
                "separator": ";",
                "replacement": "b${1}${2}m",
                "action": "replace",
            },
            {
                "source_labels": ["c", "a"],
                "regex": "(b).*b(.*)ba(.*)",
                "target_label": "d",
                "separator": ";",
                "replacement": "$1$2$2$3",
                "action": "replace",
            },
        ],
        {"a": "boobam", "b": "bar", "c": "baz", "d": "boooom"},
    ),
    (
        "drop_stops_before_replace",
        {"a": "foo"},
        [
            {"source_labels": ["a"], "regex": ".*o.*", "action": "drop"},
            {
                "source_labels": ["a"],
                "regex": "f(.*)",
                "target_label": "d",
                "separator": ";",
                "replacement": "ch$1-ch$1",
                "action": "replace",
            },
        ],
        DROPPED,
    ),
    (
        "drop_match",
        {"a": "foo", "b": "bar"},
        [{"source_labels": ["a"], "regex": ".*o.*", "action": "drop"}],
        DROPPED,
    ),
    (
        "replace_group_in_the_middle",
        {"a": "abc"},
        [
            {
                "source_labels": ["a"],
                "regex": ".*(b).*",
                "target_label": "d",
                "separator": ";",
                "replacement": "$1",
                "action": "replace",
            }
        ],
        {"a": "abc", "d": "b"},
    ),
    (
        "drop_no_match",
        {"a": "foo"},
        [{"source_labels": ["a"], "regex": "no-match", "action": "drop"}],
        {"a": "foo"},
    ),
    (
        "drop_alternation_stays_anchored",
        {"a": "foo"},
        [{"source_labels": ["a"], "regex": "f|o", "action": "drop"}],
        {"a": "foo"},
    ),
    (
        "keep_no_match",
        {"a": "foo"},
        [{"source_labels": ["a"], "regex": "no-match", "action": "keep"}],
        DROPPED,
    ),
    (
        "keep_match",
        {"a": "foo"},
        [{"source_labels": ["a"], "regex": "f.*", "action": "keep"}],
        {"a": "foo"},
    ),
    (
        "replace_no_match_no_replacement",
        {"a": "boo"},
        [
            {
                "source_labels": ["a"],
                "regex": "f",
                "target_label": "b",
                "replacement": "bar",
                "action": "replace",
            }
        ],
        {"a": "boo"},
    ),
    (
        "replace_blank_replacement_deletes",
        {"a": "foo", "f": "baz"},
        [
            {
                "source_labels": ["a"],
                "regex": "(f).*",
                "target_label": "$1",
                "replacement": "$2",
                "action": "replace",
            }
        ],
        {"a": "foo"},
    ),
    (
        "hashmod",
        ABC,
        [
            {
                "source_labels": ["c"],
                "target_label": "d",
                "separator": ";",
                "action": "hashmod",
                "modulus": 1000,
            }
        ],
        {**ABC, "d": "976"},
    ),
    (
        "hashmod_newline_value",
        {"a": "foo\nbar"},
        [
            {
                "source_labels": ["a"],
                "target_label": "b",
                "separator": ";",
                "action": "hashmod",
                "modulus": 1000,
            }
        ],
        {"a": "foo\nbar", "b": "734"},
    ),
    (
        "labelmap_prefix",
        {"a": "foo", "b1": "bar", "b2": "baz"},
        [{"regex": "(b.*)", "replacement": "bar_${1}", "action": "labelmap"}],
        {"a": "foo", "b1": "bar", "b2": "baz", "bar_b1": "bar", "bar_b2": "baz"},
    ),
    (
        "labelmap_strip_meta",
        {"a": "foo", "__meta_my_bar": "aaa", "__meta_my_baz": "bbb", "__meta_other": "ccc"},
        [{"regex": "__meta_(my.*)", "replacement": "${1}", "action": "labelmap"}],
        {
            "a": "foo",
            "__meta_my_bar": "aaa",
            "__meta_my_baz": "bbb",
            "__meta_other": "ccc",
            "my_bar": "aaa",
            "my_baz": "bbb",
        },
    ),
    (
        "replace_expanded_target_valid",
        {"a": "some-name-value"},
        [
            {
                "source_labels": ["a"],
                "regex": SOME,
                "action": "replace",
                "replacement": "${2}",
                "target_label": "${1}",
            }
        ],
        {"a": "some-name-value", "name": "value"},
    ),
    (
        "replace_empty_replacement",
        {"a": "some-name-value"},
        [
            {
                "source_labels": ["a"],
                "regex": SOME,
                "action": "replace",
                "replacement": "${3}",
                "target_label": "${1}",
            }
        ],
        {"a": "some-name-value"},
    ),
    (
        "replace_invalid_expanded_targets",
        {"a": "some-name-0"},
        [
            {
                "source_labels": ["a"],
                "regex": SOME,
                "action": "replace",
                "replacement": "${1}",
                "target_label": "${3}",
            },
            {
                "source_labels": ["a"],
                "regex": SOME,
                "action": "replace",
                "replacement": "${1}",
                "target_label": "${3}",
            },
            {
                "source_labels": ["a"],
                "regex": "some-([^-]+)(-[^,]+)",
                "action": "replace",
                "replacement": "${1}",
                "target_label": "${3}",
            },
        ],
        {"a": "some-name-0"},
    ),
    (
        "real_life_sd_tags",
        {"__meta_sd_tags": "path:/secret,job:some-job,label:foo=bar"},
        [
            {
                "source_labels": ["__meta_sd_tags"],
                "regex": "(?:.+,|^)path:(/[^,]+).*",
                "action": "replace",
                "replacement": "${1}",
                "target_label": "__metrics_path__",
            },
            {
                "source_labels": ["__meta_sd_tags"],
                "regex": "(?:.+,|^)job:([^,]+).*",
                "action": "replace",
                "replacement": "${1}",
                "target_label": "job",
            },
            {
                "source_labels": ["__meta_sd_tags"],
                "regex": "(?:.+,|^)label:([^=]+)=([^,]+).*",
                "action": "replace",
                "replacement": "${2}",
                "target_label": "${1}",
            },
        ],
        {
            "__meta_sd_tags": "path:/secret,job:some-job,label:foo=bar",
            "__metrics_path__": "/secret",
            "job": "some-job",
            "foo": "bar",
        },
    ),
    (
        "issue_12283_drop_then_set_then_keep",
        {
            "__meta_kubernetes_pod_container_port_name": "foo",
            "__meta_kubernetes_pod_annotation_XXX_metrics_port": "9091",
        },
        [
            {"regex": "^__meta_kubernetes_pod_container_port_name$", "action": "labeldrop"},
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_XXX_metrics_port"],
                "regex": "(.+)",
                "action": "replace",
                "replacement": "metrics",
                "target_label": "__meta_kubernetes_pod_container_port_name",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": "^metrics$",
                "action": "keep",
            },
        ],
        {
            "__meta_kubernetes_pod_annotation_XXX_metrics_port": "9091",
            "__meta_kubernetes_pod_container_port_name": "metrics",
        },
    ),
    (
        "labelkeep",
        {"a": "foo", "b1": "bar", "b2": "baz"},
        [{"regex": "(b.*)", "action": "labelkeep"}],
        {"b1": "bar", "b2": "baz"},
    ),
    (
        "labeldrop",
        {"a": "foo", "b1": "bar", "b2": "baz"},
        [{"regex": "(b.*)", "action": "labeldrop"}],
        {"a": "foo"},
    ),
    (
        "uppercase_and_lowercase",
        {"foo": "bAr123Foo"},
        [
            {"source_labels": ["foo"], "action": "uppercase", "target_label": "foo_uppercase"},
            {"source_labels": ["foo"], "action": "lowercase", "target_label": "foo_lowercase"},
        ],
        {"foo": "bAr123Foo", "foo_lowercase": "bar123foo", "foo_uppercase": "BAR123FOO"},
    ),
    (
        "keepequal_equal",
        PORTS,
        [{"source_labels": ["__tmp_port"], "action": "keepequal", "target_label": "__port1"}],
        PORTS,
    ),
    (
        "dropequal_equal",
        PORTS,
        [{"source_labels": ["__tmp_port"], "action": "dropequal", "target_label": "__port1"}],
        DROPPED,
    ),
    (
        "dropequal_differs",
        PORTS,
        [{"source_labels": ["__tmp_port"], "action": "dropequal", "target_label": "__port2"}],
        PORTS,
    ),
    (
        "keepequal_differs",
        PORTS,
        [{"source_labels": ["__tmp_port"], "action": "keepequal", "target_label": "__port2"}],
        DROPPED,
    ),
    (
        "dot_matches_newline",
        NEWLINE,
        [
            {
                "source_labels": ["a"],
                "regex": "line1.*line2",
                "target_label": "d",
                "separator": ";",
                "replacement": "match${1}",
                "action": "replace",
            }
        ],
        {**NEWLINE, "d": "match"},
    ),
    (
        "utf8_source_label",
        {"utf-8.label": "line1\nline2", "b": "bar", "c": "baz"},
        [
            {
                "source_labels": ["utf-8.label"],
                "regex": "line1.*line2",
                "target_label": "d",
                "separator": ";",
                "replacement": "match${1}",
                "action": "replace",
            }
        ],
        {"utf-8.label": "line1\nline2", "b": "bar", "c": "baz", "d": "match"},
    ),
    (
        "utf8_target_label",
        NEWLINE,
        [
            {
                "source_labels": ["a"],
                "regex": "line1.*line2",
                "target_label": "utf-8.label",
                "separator": ";",
                "replacement": "match${1}",
                "action": "replace",
            }
        ],
        {**NEWLINE, "utf-8.label": "match"},
    ),
    (
        "utf8_target_label_with_reference",
        NEWLINE,
        [
            {
                "source_labels": ["a"],
                "regex": "line1.*line2",
                "target_label": "utf-8.label${1}",
                "separator": ";",
                "replacement": "match${1}",
                "action": "replace",
            }
        ],
        {**NEWLINE, "utf-8.label": "match"},
    ),
    (
        "reference_styles_named_groups",
        NEWLINE,
        [
            {
                "source_labels": ["a"],
                "regex": "(line1).*(?<second>line2)",
                "target_label": "label1_${1}",
                "separator": ";",
                "replacement": "val_${second}",
                "action": "replace",
            },
            {
                "source_labels": ["a"],
                "regex": "(line1).*(?<second>line2)",
                "target_label": "label2_$1",
                "separator": ";",
                "replacement": "val_$second",
                "action": "replace",
            },
        ],
        {**NEWLINE, "label1_line1": "val_line2", "label2_line1": "val_line2"},
    ),
    (
        "type_label_from_name",
        {"__name__": "http_requests_total"},
        [
            {
                "source_labels": ["__name__"],
                "regex": ".*_total$",
                "target_label": "__type__",
                "replacement": "counter",
                "action": "replace",
            }
        ],
        {"__name__": "http_requests_total", "__type__": "counter"},
    ),
    (
        "unit_label_from_name",
        {"__name__": "disk_usage_bytes"},
        [
            {
                "source_labels": ["__name__"],
                "regex": ".*_bytes$",
                "target_label": "__unit__",
                "replacement": "bytes",
                "action": "replace",
            }
        ],
        {"__name__": "disk_usage_bytes", "__unit__": "bytes"},
    ),
]


@pytest.mark.parametrize(
    ("labels", "rules", "expected"),
    [c[1:] for c in RELABEL_CASES],
    ids=[c[0] for c in RELABEL_CASES],
)
def test_relabel(
    labels: dict[str, str], rules: list[dict[str, Any]], expected: dict[str, str] | None
) -> None:
    result = process(labels, parse_relabel_configs(rules, "relabel", scheme="utf8"))
    assert result == (DROPPED if expected is None else tuple(sorted(expected.items())))


# (id, scheme, rule, expected error text or None) — TestRelabelValidate (Go: ErrorContains).
VALIDATE_CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("empty_action", "utf8", {"action": None}, "relabel action cannot be empty"),
    ("replace_needs_target", "utf8", {"action": "replace"}, "requires 'target_label' value"),
    ("lowercase_needs_target", "utf8", {"action": "lowercase"}, "requires 'target_label' value"),
    (
        "lowercase_reference_target_utf8",
        "utf8",
        {"action": "lowercase", "replacement": "$1", "target_label": "${3}"},
        None,
    ),
    (
        "lowercase_reference_target_legacy",
        "legacy",
        {"action": "lowercase", "replacement": "$1", "target_label": "${3}"},
        "\"${3}\" is invalid 'target_label' for lowercase action",
    ),
    (
        "replace_reference_target_utf8",
        "utf8",
        {
            "source_labels": ["a"],
            "regex": SOME,
            "action": "replace",
            "replacement": "${1}",
            "target_label": "${3}",
        },
        None,
    ),
    (
        "replace_leading_digit_target_utf8",
        "utf8",
        {
            "source_labels": ["a"],
            "regex": SOME,
            "action": "replace",
            "replacement": "${1}",
            "target_label": "0${3}",
        },
        None,
    ),
    (
        "replace_leading_dash_target_utf8",
        "utf8",
        {
            "source_labels": ["a"],
            "regex": SOME,
            "action": "replace",
            "replacement": "${1}",
            "target_label": "-${3}",
        },
        None,
    ),
    (
        "labelmap_strimzi_legacy",
        "legacy",
        {
            "regex": "__meta_kubernetes_pod_label_(strimzi_io_.+)",
            "action": "labelmap",
            "replacement": "$1",
        },
        None,
    ),
    (
        "labelmap_meta_legacy",
        "legacy",
        {"regex": "__meta_(.+)", "action": "labelmap", "replacement": "${1}"},
        None,
    ),
]


@pytest.mark.parametrize(
    ("scheme", "rule", "error"), [c[1:] for c in VALIDATE_CASES], ids=[c[0] for c in VALIDATE_CASES]
)
def test_relabel_validate(scheme: str, rule: dict[str, Any], error: str | None) -> None:
    if error is None:
        assert len(parse_relabel_configs([rule], "r", scheme=scheme)) == 1
        return
    with pytest.raises(ConfigError) as info:
        parse_relabel_configs([rule], "r", scheme=scheme)
    assert error in info.value.reason


# (string, valid) — TestTargetLabelLegacyValidity: Prometheus's relabelTargetLegacy.
LEGACY_TARGET_CASES = [
    ("-label", False),
    ("label", True),
    ("label${1}", True),
    ("${1}label", True),
    ("${1}", True),
    ("${1}label", True),
    ("${", False),
    ("$", False),
    ("${}", False),
    ("foo${", False),
    ("$1", True),
    ("asd$2asd", True),
    ("-foo${1}bar-", False),
    ("bar.foo${1}bar", False),
    ("_${1}_", True),
    ("foo${bar}foo", True),
]


@pytest.mark.parametrize(
    ("text", "valid"),
    LEGACY_TARGET_CASES,
    ids=[f"{i}:{t}" for i, (t, _) in enumerate(LEGACY_TARGET_CASES)],
)
def test_target_label_legacy_validity(text: str, valid: bool) -> None:
    assert is_valid_with_references(text, "legacy") is valid
    # The same answer as a replace target under legacy (a name without $ is checked as a
    # legacy label name, which agrees on these rows).
    try:
        parse_relabel_configs([{"target_label": text}], "r", scheme="legacy")
    except ConfigError:
        assert not valid
    else:
        assert valid


# (id, YAML of one rule, expected fields; "regex_is_default": the default regex object)
UNMARSHAL_CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "values_provided",
        """\
source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port]
separator: ;
regex: \\\\d+
target_label: __meta_kubernetes_pod_container_port_number
replacement: $1
action: replace
""",
        {
            "source_labels": ("__meta_kubernetes_pod_annotation_prometheus_io_port",),
            "separator": ";",
            "regex": "\\\\d+",
            "regex_is_default": False,
            "target_label": "__meta_kubernetes_pod_container_port_number",
            "replacement": "$1",
            "action": "replace",
        },
    ),
    (
        "no_regex_provided",
        """\
source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port]
separator: ;
target_label: __meta_kubernetes_pod_container_port_number
replacement: $1
action: keepequal
""",
        {"separator": ";", "regex": "(.*)", "regex_is_default": True, "action": "keepequal"},
    ),
    (
        "default_regex_provided",
        """\
source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port]
separator: ;
regex: (.*)
target_label: __meta_kubernetes_pod_container_port_number
replacement: $1
action: replace
""",
        {"regex": "(.*)", "regex_is_default": False, "action": "replace"},
    ),
    (
        "explicit_empty_separator_and_replacement",
        """\
source_labels: [namespace, k8s_app]
separator: ""
regex: ""
target_label: target_cluster
replacement: ""
action: replace
""",
        {
            "source_labels": ("namespace", "k8s_app"),
            "separator": "",
            "regex": "",
            "regex_is_default": False,
            "replacement": "",
            "target_label": "target_cluster",
        },
    ),
    (
        "null_regex_is_the_empty_regex",
        "action: keep\nregex: null\n",
        {"regex": "", "regex_is_default": False, "action": "keep"},
    ),
]


@pytest.mark.parametrize(
    ("text", "fields"), [c[1:] for c in UNMARSHAL_CASES], ids=[c[0] for c in UNMARSHAL_CASES]
)
def test_config_unmarshal(text: str, fields: dict[str, Any]) -> None:
    (rule,) = parse_relabel_configs([yaml.safe_load(text)], "r")
    got = {
        "source_labels": rule.source_labels,
        "separator": rule.separator,
        "regex": rule.regex.text,
        "regex_is_default": rule.regex is DEFAULT_REGEX,
        "target_label": rule.target_label,
        "replacement": rule.replacement,
        "action": rule.action.value,
    }
    assert {key: got[key] for key in fields} == fields


BENCHMARK_SETS = {
    # prometheus/config/testdata/conf.good.yml's example
    "example": """
- source_labels: [job, __meta_dns_name]
  regex: "(.*)some-[regex]"
  target_label: job
  replacement: foo-${1}
- source_labels: [abc]
  target_label: cde
- replacement: static
  target_label: abc
- regex:
  replacement: static
  target_label: abc
""",
    "static_label_pair": """
- replacement: wwwwww
  target_label: wwwwww
- replacement: yyyyyyyyyyyy
  target_label: xxxxxxxxx
- replacement: xxxxxxxxx
  target_label: yyyyyyyyyyyy
- source_labels: ["something"]
  target_label: with_source_labels
  replacement: value
- replacement: dropped
  target_label: ${0}
- replacement: ${0}
  target_label: dropped
""",
}


@pytest.mark.parametrize("scheme", ["utf8", "legacy"])
@pytest.mark.parametrize("name", list(BENCHMARK_SETS))
def test_benchmark_rule_sets_load(name: str, scheme: str) -> None:
    rules = parse_relabel_configs(yaml.safe_load(BENCHMARK_SETS[name]), name, scheme=scheme)
    assert len(rules) in (4, 6)


def test_benchmark_static_label_pair() -> None:
    """``${0}`` of an empty value is "": the target ``${0}`` is not a name (no change), the
    replacement ``${0}`` deletes ``dropped`` (absent anyway); the rest are fixed pairs."""
    rules = parse_relabel_configs(yaml.safe_load(BENCHMARK_SETS["static_label_pair"]), "s")
    labels = {**{f"abcdefg0{i}": f"hijklmn{i}" for i in range(1, 9)}, "job": "foo"}
    expected = {
        **labels,
        "wwwwww": "wwwwww",
        "xxxxxxxxx": "yyyyyyyyyyyy",
        "yyyyyyyyyyyy": "xxxxxxxxx",
        "with_source_labels": "value",
    }
    assert process(labels, rules) == tuple(sorted(expected.items()))
