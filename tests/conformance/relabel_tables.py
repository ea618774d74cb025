"""The series and rule sets of the relabel conformance tests (data only).

Groups, by what the oracles say about them (``test_relabel_conformance.py`` runs them):

- :data:`COMMON_SERIES` / :data:`COMMON_RULE_SETS`: legacy names, no newline in a value — the
  same answers from Prometheus 2.42 and 3.x (and under either name validation scheme, but for
  ``replace_templated_target_invalid``, whose expanded target ``h:1`` is a name only under utf8).
- :data:`VERSION_DIFF_SERIES` (one has a newline value) and :data:`VERSION_DIFF_RULE_SETS`:
  where 2.42 differs from 3.x (2.42 compiled ``^(?:...)$``, so ``.`` stopped at a newline, and
  deleted the *unexpanded* target of a replace whose replacement expanded to "").
- :data:`LABELMAP_ORDER_SERIES` / :data:`LABELMAP_ORDER_RULE_SETS`: two names mapped to one by
  a labelmap; 3.14+ walks ``labels.Builder.Range`` order (untouched labels by name, then the
  labels earlier rules set, in the order set), 2.42 walked by name.
- :data:`UTF8_SERIES`: UTF-8 label and metric names (Prometheus 3 only: 2.42's receiver refuses
  them); :data:`SCHEME_RULE_SETS` are valid under both schemes and read or make UTF-8 names;
  :data:`UTF8_RULE_SETS` are valid only under ``utf8`` (2.42 and ``legacy`` refuse them).
- :data:`BENCHMARK_RULE_SETS` / :data:`BENCHMARK_SERIES`: Prometheus's ``BenchmarkRelabel``
  rule sets and label sets (``model/relabel/relabel_test.go``), ``__name__`` added (a
  remote-write receiver refuses series without one).
"""

from __future__ import annotations

from typing import Any

RuleSets = dict[str, list[dict[str, Any]]]

COMMON_SERIES: list[dict[str, str]] = [
    {
        "__name__": "gpu_util",
        "GPU": "0",
        "instance": "h:1",
        "job": "dcgm",
        "tags": ",env:stage,app:web,",
    },
    {"__name__": "GPU_UTIL", "instance": "h:2", "job": "dcgm"},
    {"__name__": "X_GPU_UTIL_Y", "instance": "h:3", "job": "node"},
    {"__name__": "m", "pod_name": "d", "test": "c"},
    {"__name__": "m", "pod": "p1", "pod_name": "d"},
    {"__name__": "up", "instance": "h:1", "job": "a", "pod": "p"},
    {"__name__": "node_cpu", "cpu": "0", "mode": "idle", "instance": "h:10", "job": "node"},
    {
        "__name__": "unicode_m",
        "city": "İstanbul",
        "word": "straße",
        "greek": "ΟΔΟΣ",
        "emoji": "🙂x",
        "cyr": "привет",
        "iota": "ᾳ",
    },
    {"__name__": "commas", "v": "a,b;c", "w": "x;y"},
    {
        "__name__": "tmpm",
        "__tmp_shard": "3",
        "__meta_kubernetes_pod_name": "pod-a",
        "__meta_kubernetes_namespace": "ns",
    },
    {"__name__": "eq", "a": "same", "b": "same", "c": "other"},
    {"__name__": "neq", "a": "one", "b": "two"},
    {"__name__": "m2", "app": "Web-Front", "env": "PROD"},
    {"__name__": "dollar", "v": "$1 and $$", "t": "a_b"},
    {"__name__": "space", "v": "  lead and trail ", "k": "x"},
]

COMMON_RULE_SETS: RuleSets = {
    "replace_default_copy": [{"source_labels": ["job"], "target_label": "job_copy"}],
    "replace_constant": [{"target_label": "env", "replacement": "prod"}],
    "replace_groups": [
        {"source_labels": ["instance"], "regex": "(.*):(\\d+)", "target_label": "host"},
        {
            "source_labels": ["instance"],
            "regex": "(.*):(\\d+)",
            "target_label": "port",
            "replacement": "${2}",
        },
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
        {
            "source_labels": ["job"],
            "regex": "(d)(.*)",
            "target_label": "t",
            "replacement": "$1_x|${1}_x|$$1|${2}|$10|${|$",
        }
    ],
    "replace_templated_target": [
        {
            "source_labels": ["job"],
            "regex": "(.+)",
            "target_label": "job_${1}",
            "replacement": "yes",
        }
    ],
    "replace_templated_target_invalid": [
        {"source_labels": ["instance"], "regex": "(.*)", "target_label": "${1}", "replacement": "x"}
    ],
    "replace_unicode_value": [
        {"source_labels": ["city"], "regex": "(.)(.*)", "target_label": "first"},
        {
            "source_labels": ["greek"],
            "regex": "(.*)(.)",
            "target_label": "last",
            "replacement": "$2",
        },
    ],
    "replace_sets_name": [
        {
            "source_labels": ["__name__"],
            "regex": "GPU_UTIL",
            "target_label": "__name__",
            "replacement": "gpu_util_renamed",
        }
    ],
    "replace_empty_replacement_deletes": [
        {"source_labels": ["job"], "target_label": "instance", "replacement": ""}
    ],
    "replace_dollar_in_value": [
        {"source_labels": ["v"], "target_label": "v2", "replacement": "<$1>"}
    ],
    "replace_separator_in_values": [
        {
            "source_labels": ["v", "w"],
            "regex": "(.*);(.*);(.*)",
            "target_label": "split",
            "replacement": "$3|$2|$1",
        }
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
        {"action": "hashmod", "source_labels": ["instance"], "modulus": 7, "target_label": "shard"},
        {
            "action": "hashmod",
            "source_labels": ["nothere"],
            "modulus": 1000,
            "target_label": "empty_hash",
        },
    ],
    "hashmod_shard_select": [
        {
            "action": "hashmod",
            "source_labels": ["__name__", "instance"],
            "modulus": 2,
            "target_label": "__tmp_hash",
        },
        {"action": "keep", "source_labels": ["__tmp_hash"], "regex": "0"},
        {"action": "labeldrop", "regex": "__tmp_hash"},
    ],
    "labelmap_meta": [
        {"action": "labelmap", "regex": "__meta_kubernetes_(.+)", "replacement": "k8s_$1"}
    ],
    "labelmap_groups_swap": [{"action": "labelmap", "regex": "(i)(n.*)", "replacement": "${2}_$1"}],
    "labeldrop_double_underscore": [{"action": "labeldrop", "regex": "__.*"}],
    "labeldrop_everything": [{"action": "labeldrop"}],
    "labelkeep_job_instance": [{"action": "labelkeep", "regex": "job|instance"}],
    "labeldrop_mixed_case_action": [{"action": "LabelDrop", "regex": "job|pod.*"}],
    "tmp_labels_not_removed": [{"source_labels": ["job"], "target_label": "__tmp_job"}],
    "lowercase_unicode": [
        {
            "action": "lowercase",
            "source_labels": ["city", "word", "greek", "__name__"],
            "target_label": "lower",
        }
    ],
    "uppercase_unicode": [
        {
            "action": "uppercase",
            "source_labels": ["word", "cyr", "emoji", "iota"],
            "target_label": "upper",
        }
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

TO_X = {"action": "labelmap", "regex": "(.)_x", "replacement": "x"}
LABELMAP_ORDER_SERIES: list[dict[str, str]] = [
    {"__name__": "lm_two", "a_x": "1", "b_x": "2"},
    {"__name__": "lm_one", "b_x": "base"},
]
LABELMAP_ORDER_RULE_SETS: RuleSets = {
    "lm_set_walked_after_base": [{"target_label": "a_x", "replacement": "set"}, TO_X],
    "lm_same_value_set_moves_last": [{"target_label": "a_x", "replacement": "1"}, TO_X],
    "lm_set_order_not_name_order": [
        {"target_label": "z_x", "replacement": "z"},
        {"target_label": "a_x", "replacement": "a"},
        TO_X,
    ],
    "lm_set_again_keeps_position": [
        {"target_label": "z_x", "replacement": "1"},
        {"target_label": "a_x", "replacement": "2"},
        {"target_label": "z_x", "replacement": "3"},
        TO_X,
    ],
    "lm_deleted_then_set_goes_last": [
        {"target_label": "z_x", "replacement": "1"},
        {"target_label": "a_x", "replacement": "2"},
        {"action": "labeldrop", "regex": "z_x"},
        {"target_label": "z_x", "replacement": "3"},
        TO_X,
    ],
    "lm_case_and_hash_count_as_set": [
        {"action": "uppercase", "source_labels": ["__name__"], "target_label": "a_x"},
        {"action": "hashmod", "source_labels": ["b_x"], "modulus": 1, "target_label": "b_x"},
        TO_X,
    ],
    "lm_labelmap_chain": [
        {"target_label": "z_y", "replacement": "z"},
        {"action": "labelmap", "regex": "(.)_y", "replacement": "${1}_x"},
        TO_X,
    ],
}

UTF8_SERIES: list[dict[str, str]] = [
    {
        "__name__": "http.server.duration",
        "service.name": "api",
        "http.method": "GET",
        "job": "otel",
    },
    {
        "__name__": "DCGM_FI_DEV_GPU_UTIL",
        "UUID": "GPU-1234",
        "gpu": "0",
        "k8s.pod.name": "train-0",
        "k8s.namespace.name": "ml",
        "__meta_kubernetes_node": "n1",
    },
    {"__name__": "sel_m", "sel": "a.b", "a.b": "present", "job": "x.y"},
    {
        "__name__": "odd_names",
        "label with space": "s",
        "ünïcödé": "u",
        "emoji🙂": "e",
        "0digit": "d",
        "a-b": "c",
        'q"uote': "q",
        "back\\slash": "b",
        "new\nline": "n",
    },
    {"__name__": "k8s.mapped_total", "k8s.a_x": "1", "b_x": "2", "a.b_total": "t"},
]

#: Valid under both schemes; they read UTF-8 names or may make them (labelmap is not checked
#: when it runs; a replace's expanded target is, under the rule's scheme).
SCHEME_RULE_SETS: RuleSets = {
    "utf8_source_label": [{"source_labels": ["service.name"], "target_label": "svc"}],
    "utf8_source_labels_joined": [
        {
            "source_labels": ["k8s.namespace.name", "k8s.pod.name"],
            "separator": "/",
            "target_label": "pod_path",
        }
    ],
    "utf8_expanded_target": [
        {"source_labels": ["sel"], "regex": "(.+)", "target_label": "${1}", "replacement": "yes"}
    ],
    "utf8_expanded_target_delete": [
        {"source_labels": ["sel"], "regex": "(.+)", "target_label": "${1}", "replacement": ""}
    ],
    "utf8_expanded_target_from_value": [
        {"source_labels": ["job"], "regex": "(.*)", "target_label": "${1}", "replacement": "j"}
    ],
    "utf8_labelmap_from_dotted": [
        {"action": "labelmap", "regex": "k8s\\.(.+)", "replacement": "k8s_${1}"}
    ],
    "utf8_labelmap_keeps_dotted_part": [
        {"action": "labelmap", "regex": "(.*)_total", "replacement": "$1"}
    ],
    "utf8_labeldrop_dotted": [{"action": "labeldrop", "regex": "service\\..*|http\\..*"}],
    "utf8_labelkeep": [{"action": "labelkeep", "regex": "__name__|.*\\..*"}],
    "utf8_keep_metric_name": [
        {"action": "keep", "source_labels": ["__name__"], "regex": "http\\..*|k8s\\..*"}
    ],
    "utf8_hashmod_dotted_source": [
        {
            "action": "hashmod",
            "source_labels": ["k8s.pod.name"],
            "modulus": 16,
            "target_label": "shard",
        }
    ],
    "utf8_rename_metric": [
        {
            "source_labels": ["__name__"],
            "regex": "http\\.server\\.(.*)",
            "target_label": "__name__",
            "replacement": "http_server_${1}",
        }
    ],
}

#: Valid only under utf8 (targets and labelmap replacements outside the legacy character set).
UTF8_RULE_SETS: RuleSets = {
    "utf8only_target_gpu_uuid": [{"source_labels": ["UUID"], "target_label": "gpu.uuid"}],
    "utf8only_labelmap_k8s_dot": [
        {"action": "labelmap", "regex": "__meta_kubernetes_(.+)", "replacement": "k8s.$1"}
    ],
    "utf8only_templated_target": [
        {"source_labels": ["__name__"], "regex": "(.*)", "target_label": "${1}.copy"}
    ],
    "utf8only_lowercase": [
        {"action": "lowercase", "source_labels": ["http.method"], "target_label": "http.verb"}
    ],
    "utf8only_uppercase_reference_is_literal": [
        {"action": "uppercase", "source_labels": ["service.name"], "target_label": "${1}"}
    ],
    "utf8only_hashmod": [
        {
            "action": "hashmod",
            "source_labels": ["__name__"],
            "modulus": 3,
            "target_label": "shard.id",
        }
    ],
    "utf8only_keepequal": [
        {"action": "keepequal", "source_labels": ["sel"], "target_label": "a.b"}
    ],
    "utf8only_dropequal": [
        {"action": "dropequal", "source_labels": ["job"], "target_label": "label with space"}
    ],
    "utf8only_target_odd": [{"source_labels": ["job"], "target_label": "0 odd-name.é"}],
    "utf8only_labelmap_everything_suffixed": [
        {"action": "labelmap", "regex": "(.+)", "replacement": "${1}.orig"}
    ],
}

BENCHMARK_SERIES: list[dict[str, str]] = [
    {
        "__name__": "bench_example",
        "__meta_dns_name": "example-some-x.com",
        "abc": "def",
        "job": "foo",
    },
    {
        "__name__": "bench_static",
        **{f"abcdefg0{i}": f"hijklmn{i}" for i in range(1, 9)},
        "job": "foo",
    },
    {
        "__name__": "bench_kubernetes",
        "__address__": "10.132.183.40:80",
        "__meta_kubernetes_namespace": "loki-boltdb-shipper",
        "__meta_kubernetes_pod_annotation_promtail_loki_boltdb_shipper_hash": "50523b9759094a144adcec2eae0aa4ad",  # noqa: E501
        "__meta_kubernetes_pod_annotationpresent_promtail_loki_boltdb_shipper_hash": "true",
        "__meta_kubernetes_pod_container_init": "false",
        "__meta_kubernetes_pod_container_name": "promtail",
        "__meta_kubernetes_pod_container_port_name": "http-metrics",
        "__meta_kubernetes_pod_container_port_number": "80",
        "__meta_kubernetes_pod_container_port_protocol": "TCP",
        "__meta_kubernetes_pod_controller_kind": "DaemonSet",
        "__meta_kubernetes_pod_controller_name": "promtail-loki-boltdb-shipper",
        "__meta_kubernetes_pod_host_ip": "10.128.0.178",
        "__meta_kubernetes_pod_ip": "10.132.183.40",
        "__meta_kubernetes_pod_label_controller_revision_hash": "555b77cd7d",
        "__meta_kubernetes_pod_label_name": "promtail-loki-boltdb-shipper",
        "__meta_kubernetes_pod_label_pod_template_generation": "45",
        "__meta_kubernetes_pod_labelpresent_controller_revision_hash": "true",
        "__meta_kubernetes_pod_labelpresent_name": "true",
        "__meta_kubernetes_pod_labelpresent_pod_template_generation": "true",
        "__meta_kubernetes_pod_name": "promtail-loki-boltdb-shipper-jgtr7",
        "__meta_kubernetes_pod_node_name": "gke-dev-us-central-0-main-n2s8-2-14d53341-9hkr",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_uid": "4c586419-7f6c-448d-aeec-ca4fa5b05e60",
        "__metrics_path__": "/metrics",
        "__scheme__": "http",
        "__scrape_interval__": "15s",
        "__scrape_timeout__": "10s",
        "job": "kubernetes-pods",
    },
]

BENCHMARK_RULE_SETS: RuleSets = {
    "bench_example": [
        {
            "source_labels": ["job", "__meta_dns_name"],
            "regex": "(.*)some-[regex]",
            "target_label": "job",
            "replacement": "foo-${1}",
        },
        {"source_labels": ["abc"], "target_label": "cde"},
        {"replacement": "static", "target_label": "abc"},
        {"regex": None, "replacement": "static", "target_label": "abc"},
    ],
    "bench_static_label_pair": [
        {"replacement": "wwwwww", "target_label": "wwwwww"},
        {"replacement": "yyyyyyyyyyyy", "target_label": "xxxxxxxxx"},
        {"replacement": "xxxxxxxxx", "target_label": "yyyyyyyyyyyy"},
        {
            "source_labels": ["something"],
            "target_label": "with_source_labels",
            "replacement": "value",
        },
        {"replacement": "dropped", "target_label": "${0}"},
        {"replacement": "${0}", "target_label": "dropped"},
    ],
    "bench_kubernetes": [
        {
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": ".*-metrics",
            "action": "keep",
        },
        {"source_labels": ["__meta_kubernetes_pod_label_name"], "action": "drop", "regex": ""},
        {
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "regex": "Succeeded|Failed",
            "action": "drop",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
            "regex": "false",
            "action": "drop",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scheme"],
            "target_label": "__scheme__",
            "regex": "(https?)",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
            "target_label": "__metrics_path__",
            "regex": "(.+)",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
            "target_label": "__address__",
            "regex": "(.+?)(\\:\\d+)?;(\\d+)",
            "replacement": "$1:$3",
            "action": "replace",
        },
        {
            "regex": "__meta_kubernetes_pod_annotation_prometheus_io_param_(.+)",
            "replacement": "__param_$1",
            "action": "labelmap",
        },
        {"regex": "__meta_kubernetes_pod_label_prometheus_io_label_(.+)", "action": "labelmap"},
        {
            "regex": "__meta_kubernetes_pod_annotation_prometheus_io_label_(.+)",
            "action": "labelmap",
        },
        {
            "source_labels": ["__meta_kubernetes_namespace", "__meta_kubernetes_pod_label_name"],
            "separator": "/",
            "target_label": "job",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": ["__meta_kubernetes_namespace"],
            "target_label": "namespace",
            "action": "replace",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_name"],
            "target_label": "pod",
            "action": "replace",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_container_name"],
            "target_label": "container",
            "action": "replace",
        },
        {
            "source_labels": [
                "__meta_kubernetes_pod_name",
                "__meta_kubernetes_pod_container_name",
                "__meta_kubernetes_pod_container_port_name",
            ],
            "separator": ":",
            "target_label": "instance",
            "action": "replace",
        },
        {"target_label": "cluster", "replacement": "dev-us-central-0"},
        {
            "source_labels": ["__meta_kubernetes_namespace"],
            "regex": "hosted-grafana",
            "action": "drop",
        },
        {
            "source_labels": ["__address__"],
            "target_label": "__tmp_hash",
            "modulus": 3,
            "action": "hashmod",
        },
        {"source_labels": ["__tmp_hash"], "regex": "^0$", "action": "keep"},
        {"regex": "__tmp_hash", "action": "labeldrop"},
    ],
}
