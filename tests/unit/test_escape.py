"""Escaping schemes (rwrouter.routing.escape): prometheus/common v0.72.1 ``model.EscapeName``
and ``EscapeMetricFamily`` cases (their ``metric_test.go`` tables, as facts), then rwrouter's
label-name rule (``:`` escaped), label collisions and metadata family names."""

from __future__ import annotations

import pytest

from rwrouter.routing.escape import (
    ALLOW_UTF8,
    DOTS,
    SCHEMES,
    UNDERSCORES,
    VALUES,
    escape_label_name,
    escape_labels,
    escape_metadata,
    escape_metric_name,
    escape_name,
    is_legacy_label_name,
    is_legacy_metric_name,
    needs_escaping,
)
from rwrouter.wire import metadata_family, types_pb2

# prometheus/common model/metric_test.go TestEscapeName: (name, input, underscores, dots, values)
ESCAPE_NAME = [
    ("empty string", "", "", "", ""),
    (
        "legacy valid name",
        "no:escaping_required",
        "no:escaping_required",
        "no:escaping__required",
        "no:escaping_required",
    ),
    (
        "name with dots",
        "mysystem.prod.west.cpu.load",
        "mysystem_prod_west_cpu_load",
        "mysystem_dot_prod_dot_west_dot_cpu_dot_load",
        "U__mysystem_2e_prod_2e_west_2e_cpu_2e_load",
    ),
    (
        "name with dots and underscore",
        "mysystem.prod.west.cpu.load_total",
        "mysystem_prod_west_cpu_load_total",
        "mysystem_dot_prod_dot_west_dot_cpu_dot_load__total",
        "U__mysystem_2e_prod_2e_west_2e_cpu_2e_load__total",
    ),
    (
        "name with dots and colon",
        "http.status:sum",
        "http_status:sum",
        "http_dot_status:sum",
        "U__http_2e_status:sum",
    ),
    (
        "name with spaces and emoji",
        "label with 😱",
        "label_with__",
        "label__with____",
        "U__label_20_with_20__1f631_",
    ),
    ("name with unicode characters > 0x100", "花火", "__", "____", "U___82b1__706b_"),
    (
        "name with spaces and edge-case value",
        "label with \u0100",
        "label_with__",
        "label__with____",
        "U__label_20_with_20__100_",
    ),
]


@pytest.mark.parametrize(
    ("name", "underscores", "dots", "values"),
    [c[1:] for c in ESCAPE_NAME],
    ids=[c[0] for c in ESCAPE_NAME],
)
def test_escape_name_is_prometheus_common(
    name: str, underscores: str, dots: str, values: str
) -> None:
    assert escape_name(name, ALLOW_UTF8) == name
    assert escape_name(name, UNDERSCORES) == underscores
    assert escape_name(name, DOTS) == dots
    assert escape_name(name, VALUES) == values


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown escaping scheme 'utf8'"):
        escape_name("a.b", "utf8")


# prometheus/common model/metric_test.go TestEscapeMetricFamily, as label sets (the family name
# is the __name__ value): (name, scheme, labels, escaped)
ESCAPE_FAMILY = [
    (
        "simple, no escaping needed",
        VALUES,
        (("__name__", "my_metric"), ("some_label", "labelvalue")),
        (("__name__", "my_metric"), ("some_label", "labelvalue")),
    ),
    (
        "label name escaping needed",
        VALUES,
        (("__name__", "my_metric"), ("some.label", "labelvalue")),
        (("U__some_2e_label", "labelvalue"), ("__name__", "my_metric")),
    ),
    (
        "counter, escaping needed",
        VALUES,
        (("__name__", "my.metric"), ("some?label", "label??value")),
        (("U__some_3f_label", "label??value"), ("__name__", "U__my_2e_metric")),
    ),
    (
        "gauge, escaping needed",
        DOTS,
        (("__name__", "unicode.and.dots.花火"), ("some_label", "label??value")),
        (("__name__", "unicode_dot_and_dot_dots_dot_____"), ("some_label", "label??value")),
    ),
]


@pytest.mark.parametrize(
    ("scheme", "labels", "escaped"),
    [c[1:] for c in ESCAPE_FAMILY],
    ids=[c[0] for c in ESCAPE_FAMILY],
)
def test_escape_labels_is_escape_metric_family(
    scheme: str, labels: tuple[tuple[str, str], ...], escaped: tuple[tuple[str, str], ...]
) -> None:
    assert escape_labels(labels, scheme).labels == escaped


# rwrouter's own: (name, scheme, label name, escaped label name)
LABEL_NAMES = [
    ("colon_underscores", UNDERSCORES, "a:b", "a_b"),  # EscapeName would keep "a:b"
    ("colon_dots", DOTS, "a:b", "a__b"),
    ("colon_values", VALUES, "a:b", "U__a_3a_b"),
    ("digit_first_underscores", UNDERSCORES, "0abc", "_abc"),
    ("digit_first_dots", DOTS, "0abc", "__abc"),
    ("digit_first_values", VALUES, "0abc", "U___30_abc"),
    ("dot_underscores", UNDERSCORES, "service.name", "service_name"),
    ("dot_dots", DOTS, "service.name", "service_dot_name"),
    ("dot_values", VALUES, "service.name", "U__service_2e_name"),
    ("legacy_kept_under_dots", DOTS, "k8s_pod_name", "k8s_pod_name"),
    ("legacy_kept_under_values", VALUES, "k8s_pod_name", "k8s_pod_name"),
    ("undecodable_byte_values", VALUES, "a\udcffb", "U__a_fffd_b"),  # surrogateescape
    ("allow_utf8", ALLOW_UTF8, "service.name", "service.name"),
]


@pytest.mark.parametrize(
    ("scheme", "name", "escaped"), [c[1:] for c in LABEL_NAMES], ids=[c[0] for c in LABEL_NAMES]
)
def test_label_names_by_the_label_name_rule(scheme: str, name: str, escaped: str) -> None:
    assert escape_label_name(name, scheme) == escaped
    if scheme != ALLOW_UTF8:
        assert is_legacy_label_name(escaped)


METRIC_NAMES = [
    ("colon_kept", "job:rate5m", "job:rate5m"),
    ("dots", "http.server.duration", "http_server_duration"),
    ("dots_and_colon", "http.status:sum", "http_status:sum"),
    ("digit_first", "1bad", "_bad"),
    ("dash", "gpu-util", "gpu_util"),
]


@pytest.mark.parametrize(
    ("name", "escaped"), [c[1:] for c in METRIC_NAMES], ids=[c[0] for c in METRIC_NAMES]
)
def test_metric_names_keep_colons(name: str, escaped: str) -> None:
    assert escape_metric_name(name, UNDERSCORES) == escaped
    assert is_legacy_metric_name(escaped)


LEGACY = [
    # (name, text, legacy metric name, legacy label name)
    ("plain", "up", True, True),
    ("underscore_first", "_x9", True, True),
    ("colon", "a:b", True, False),
    ("colon_first", ":a", True, False),
    ("digit_first", "9a", False, False),
    ("dot", "a.b", False, False),
    ("non_ascii_letter", "é", False, False),
    ("non_ascii_digit", "a٣", False, False),  # isidentifier alone would take it
    ("empty", "", False, False),
    ("space", "a b", False, False),
]


@pytest.mark.parametrize(
    ("text", "metric", "label"), [c[1:] for c in LEGACY], ids=[c[0] for c in LEGACY]
)
def test_legacy_rules(text: str, metric: bool, label: bool) -> None:
    assert is_legacy_metric_name(text) is metric
    assert is_legacy_label_name(text) is label


NEEDS = [
    ("legacy", (("__name__", "up"), ("job", "a.b")), False),  # values never matter
    ("metric_name", (("__name__", "a.b"),), True),
    ("metric_name_colon", (("__name__", "a:b"),), False),
    ("label_colon", (("__name__", "up"), ("a:b", "x")), True),
    ("label_utf8", (("__name__", "up"), ("größe", "x")), True),
]


@pytest.mark.parametrize(("labels", "needed"), [c[1:] for c in NEEDS], ids=[c[0] for c in NEEDS])
def test_needs_escaping(labels: tuple[tuple[str, str], ...], needed: bool) -> None:
    assert needs_escaping(labels) is needed
    for scheme in SCHEMES[1:]:
        assert escape_labels(labels, scheme).changed is needed


# (name, scheme, labels, escaped labels, dropped (name, kept name))
LABEL_COLLISIONS = [
    (
        "dot_and_underscore",
        UNDERSCORES,
        (("__name__", "up"), ("a.b", "dot"), ("a_b", "underscore")),
        (("__name__", "up"), ("a_b", "dot")),
        (("a_b", "a.b"),),
    ),
    (
        "three_ways_first_by_byte_order",
        UNDERSCORES,
        (("__name__", "up"), ("a-b", "dash"), ("a.b", "dot"), ("a_b", "underscore")),
        (("__name__", "up"), ("a_b", "dash")),
        (("a.b", "a-b"), ("a_b", "a-b")),
    ),
    (
        "metric_name_label_always_kept",
        UNDERSCORES,
        (("__name._", "x"), ("__name__", "up")),
        (("__name__", "up"),),
        (("__name._", "__name__"),),
    ),
    (
        "colon_and_underscore",
        UNDERSCORES,
        (("__name__", "up"), ("a:b", "colon"), ("a_b", "underscore")),
        (("__name__", "up"), ("a_b", "colon")),
        (("a_b", "a:b"),),
    ),
    (
        "no_collision_under_dots",
        DOTS,
        (("__name__", "up"), ("a.b", "dot"), ("a_b", "underscore")),
        (("__name__", "up"), ("a_b", "underscore"), ("a_dot_b", "dot")),
        (),
    ),
    (
        "dots_collision",
        DOTS,
        (("__name__", "up"), ("a.b", "dot"), ("a_dot_b", "legacy")),
        (("__name__", "up"), ("a_dot_b", "dot")),
        (("a_dot_b", "a.b"),),
    ),
]


@pytest.mark.parametrize(
    ("scheme", "labels", "escaped", "dropped"),
    [c[1:] for c in LABEL_COLLISIONS],
    ids=[c[0] for c in LABEL_COLLISIONS],
)
def test_label_collisions_keep_the_first_original_name(
    scheme: str,
    labels: tuple[tuple[str, str], ...],
    escaped: tuple[tuple[str, str], ...],
    dropped: tuple[tuple[str, str], ...],
) -> None:
    result = escape_labels(labels, scheme)
    assert result.labels == escaped
    assert result.dropped == dropped
    assert escape_labels(tuple(reversed(labels)), scheme) == result  # order of input


def test_escaped_says_what_changed() -> None:
    result = escape_labels(
        (("__name__", "http.server.duration"), ("service.name", "a"), ("job", "x")), UNDERSCORES
    )
    assert result.metric_name == ("http.server.duration", "http_server_duration")
    assert result.renamed == (("service.name", "service_name"),)
    assert result.labels == (
        ("__name__", "http_server_duration"),
        ("job", "x"),
        ("service_name", "a"),
    )


def _metadata(family: str) -> bytes:
    entry = types_pb2.MetricMetadata(
        type=types_pb2.MetricMetadata.COUNTER,
        metric_family_name=family,
        help="Help.",
        unit="seconds",
    )
    return bytes(entry.SerializeToString())


METADATA = [
    ("escaped", "http.server.duration", UNDERSCORES, "http_server_duration"),
    ("values", "http.server.duration", VALUES, "U__http_2e_server_2e_duration"),
    ("legacy_unchanged", "http_server_duration", DOTS, "http_server_duration"),
    ("allow_utf8", "http.server.duration", ALLOW_UTF8, "http.server.duration"),
]


@pytest.mark.parametrize(
    ("family", "scheme", "escaped"), [c[1:] for c in METADATA], ids=[c[0] for c in METADATA]
)
def test_metadata_family_is_escaped_like_the_metric_name(
    family: str, scheme: str, escaped: str
) -> None:
    payload = _metadata(family)
    out = escape_metadata(payload, family, scheme)
    assert metadata_family(out) == escaped
    if escaped == family:
        assert out is payload
    parsed = types_pb2.MetricMetadata.FromString(out)
    assert (parsed.type, parsed.help, parsed.unit) == (1, "Help.", "seconds")
    assert out == _metadata(escaped)  # the other fields byte for byte, in place
