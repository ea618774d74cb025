"""UTF-8 names in ``rwrouter relabel --series`` and in what it prints, and ``check-config``
with UTF-8 rules, under both name validation schemes.

Sources: Prometheus 3's text format parser (``model/textparse/promparse.go``: a quoted string
in the braces followed by ``,`` or ``}`` is the metric name), PromQL (``label_set_item``),
``labels.Labels.String`` (names outside the legacy set quoted with Go's ``strconv.Quote``).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rwrouter.cli import main
from rwrouter.relabel.series import SeriesError, format_labels, parse_series

PARSE_CASES = [
    ("quoted_label_name", '{"service.name"="api"}', {"service.name": "api"}),
    (
        "quoted_metric_first",
        '{"http.server.duration", job="a"}',
        {"__name__": "http.server.duration", "job": "a"},
    ),
    (
        "quoted_metric_later",
        '{job="a", "http.server.duration"}',
        {"__name__": "http.server.duration", "job": "a"},
    ),
    ("quoted_metric_alone", '{"my.metric"}', {"__name__": "my.metric"}),
    (
        "legacy_metric_utf8_label",
        'm{"k8s.pod.name"="p", gpu="0"}',
        {"__name__": "m", "k8s.pod.name": "p", "gpu": "0"},
    ),
    ("quoted_legacy_name", 'm{"job"="a"}', {"__name__": "m", "job": "a"}),
    ("single_quoted_name", '{\'a.b\'="1", __name__="m"}', {"__name__": "m", "a.b": "1"}),
    ("backquoted_name", '{`a\\b`="1"}', {"a\\b": "1"}),
    ("escapes_in_name", r'{"a\"b\u00e9\n"="1"}', {'a"bé\n': "1"}),
    (
        "odd_names",
        '{"label with space"="s", "ünï"="u", "🙂"="e", "0digit"="d"}',
        {"label with space": "s", "ünï": "u", "🙂": "e", "0digit": "d"},
    ),
    ("quoted_name_value_name", '{"__name__"="x.y"}', {"__name__": "x.y"}),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse_utf8_series(text: str, expected: dict[str, str]) -> None:
    assert parse_series(text) == tuple(sorted(expected.items()))


ERROR_CASES = [
    (
        "quoted_metric_before_braces",
        '"my.metric"{a="1"}',
        'a quoted metric name goes inside the braces, {"my.metric", label="value"}: at position 1',
    ),
    ("quoted_metric_bare", '"my.metric"', "a quoted metric name goes inside the braces"),
    ("two_metric_names", '{"a.b", "c.d"}', "label __name__ given twice"),
    ("metric_outside_and_inside", 'm{"x.y"}', "label __name__ given twice"),
    (
        "unquoted_utf8_name",
        '{service.name="x"}',
        "expected = after service at position 9 "
        "(a name with '.' in it is quoted, as Prometheus 3 writes it",
    ),
    (
        "unquoted_utf8_metric",
        'gpu.utilization{a="b"}',
        "unexpected '.' at position 4 (a name with '.' in it is quoted",
    ),
    ("trailing_word_no_hint", 'm{a="b"} x', "unexpected 'x' at position 10"),
    ("empty_quoted_name", '{""="1"}', "empty label name"),
    ("surrogate_escape", r'{"\ud800"="1"}', r"escape \ud800 is not a Unicode character"),
    ("beyond_unicode", r'm{a="\U00110000"}', r"escape \U00110000 is not a Unicode character"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_parse_utf8_series_errors(text: str, message: str) -> None:
    with pytest.raises(SeriesError) as info:
        parse_series(text)
    assert message in str(info.value)
    if "quoted" not in message:
        assert "quoted" not in str(info.value)  # no hint where a quote would not help


FORMAT_CASES = [
    ("utf8_label", {"__name__": "m", "service.name": "x"}, 'm{"service.name"="x"}'),
    (
        "utf8_metric",
        {"__name__": "http.server.duration", "job": "a"},
        '{__name__="http.server.duration", job="a"}',
    ),
    ("colon_metric_is_legacy", {"__name__": "job:rate5m:sum"}, "job:rate5m:sum"),
    ("colon_label_quoted", {"__name__": "m", "a:b": "1"}, 'm{"a:b"="1"}'),
    ("quote_in_name", {"__name__": "m", 'a"b': "1"}, 'm{"a\\"b"="1"}'),
    ("newline_in_name", {"new\nline": "n"}, '{"new\\nline"="n"}'),
    ("leading_digit", {"0digit": "d"}, '{"0digit"="d"}'),
    ("tab_and_control", {"__name__": "m", "a": "x\ty\x01\x7f"}, 'm{a="x\\ty\\x01\\x7f"}'),
    ("go_letter_escapes", {"__name__": "m", "a": "\a\b\f\v"}, 'm{a="\\a\\b\\f\\v"}'),
    (
        "non_printable_unicode",
        {"__name__": "m", "a": "\u00a0\u2028\U000e0001"},
        'm{a="\\u00a0\\u2028\\U000e0001"}',
    ),
    ("printable_unicode_as_is", {"__name__": "m", "ü.é": "Grüße 🙂"}, 'm{"ü.é"="Grüße 🙂"}'),
]


@pytest.mark.parametrize(
    ("labels", "text"), [c[1:] for c in FORMAT_CASES], ids=[c[0] for c in FORMAT_CASES]
)
def test_format_as_prometheus_3_and_back(labels: dict[str, str], text: str) -> None:
    assert format_labels(tuple(sorted(labels.items()))) == text
    assert parse_series(text) == tuple(sorted(labels.items()))


CONFIG = """
global:
  metric_name_validation_scheme: {scheme}
remote_write:
  - name: otel
    url: http://localhost:1/api/v1/write
    write_relabel_configs:
      - {{source_labels: [service.name], target_label: svc}}
      - {{source_labels: [sel], regex: "(.+)", target_label: "${{1}}", replacement: "yes"}}
{utf8_rules}"""
UTF8_RULES = """\
      - {source_labels: [UUID], target_label: gpu.uuid}
      - {action: labelmap, regex: "__meta_kubernetes_(.+)", replacement: "k8s.$1"}
"""
SERIES = (
    '{"http.server.duration", "service.name"="api", sel="a.b", UUID="GPU-1", '
    '__meta_kubernetes_pod="p"}'
)


def _config(tmp_path: Path, scheme: str, *, utf8_rules: bool) -> str:
    path = tmp_path / f"{scheme}.yaml"
    text = CONFIG.format(scheme=scheme, utf8_rules=UTF8_RULES if utf8_rules else "")
    path.write_text(textwrap.dedent(text))
    return str(path)


def _relabel(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["relabel", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_relabel_utf8_text_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _relabel(
        capsys, "--config", _config(tmp_path, "utf8", utf8_rules=True), "--series", SERIES
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (  # in name order, as labels.Labels.String
        'series {UUID="GPU-1", __meta_kubernetes_pod="p", __name__="http.server.duration", '
        'sel="a.b", "service.name"="api"}'
    )
    assert '        => +svc="api"' in out
    assert '        => +"a.b"="yes"' in out
    assert '        => +"gpu.uuid"="GPU-1"' in out
    assert '        => +"k8s.pod"="p"' in out
    assert (
        '  destination otel: sent {UUID="GPU-1", __meta_kubernetes_pod="p", '
        '__name__="http.server.duration", "a.b"="yes", "gpu.uuid"="GPU-1", "k8s.pod"="p", '
        'sel="a.b", "service.name"="api", svc="api"}'
    ) in out


@pytest.mark.parametrize(
    ("scheme", "added"),
    [
        ("utf8", {"svc": "api", "a.b": "yes"}),
        ("legacy", {"svc": "api"}),  # ${1} -> "a.b" is not a legacy name: no change
    ],
)
def test_relabel_utf8_series_under_each_scheme(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scheme: str, added: dict[str, str]
) -> None:
    code, out, _ = _relabel(
        capsys,
        "--config",
        _config(tmp_path, scheme, utf8_rules=False),
        "--series",
        SERIES,
        "--json",
    )
    assert code == 0
    [entry] = json.loads(out)["series"]
    [otel] = entry["destinations"]
    assert otel["outcome"] == "sent"
    assert otel["labels"] == {**entry["labels"], **added}


CHECK_CASES: list[tuple[str, str, bool, Any]] = [
    ("utf8_accepts_utf8_rules", "utf8", True, 0),
    ("legacy_accepts_utf8_sources", "legacy", False, 0),
    (
        "legacy_refuses_utf8_target",
        "legacy",
        True,
        'remote_write[0].write_relabel_configs[2].target_label: "gpu.uuid" is invalid '
        "'target_label' for replace action",
    ),
]


@pytest.mark.parametrize(
    ("scheme", "utf8_rules", "expected"),
    [c[1:] for c in CHECK_CASES],
    ids=[c[0] for c in CHECK_CASES],
)
def test_check_config_utf8_names(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    scheme: str,
    utf8_rules: bool,
    expected: Any,
) -> None:
    code = main(["check-config", _config(tmp_path, scheme, utf8_rules=utf8_rules)])
    out, err = capsys.readouterr()
    if expected == 0:
        assert code == 0
        assert f"global: metric_name_validation_scheme={scheme}" in out
        assert 'source_labels=["service.name"]' in out
    else:
        assert code == 2
        assert expected in err
