"""``rwrouter relabel`` (the relabel debugger): the --series parser, routing.explain (the router's
own decisions), and the command end to end on the shipped configurations."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rwrouter.cli import main
from rwrouter.cli.relabel import SeriesError, format_labels, parse_series
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing import Router
from rwrouter.routing.explain import DROPPED, INVALID_OUTCOME, NOT_SENT, SENT, explain
from rwrouter.routing.outcome import Route

ROOT = Path(__file__).resolve().parents[2]
MAIN_CONFIG = str(ROOT / "config" / "rwrouter.yaml")
EXAMPLES = ROOT / "config" / "examples"
GPU = '{__name__="DCGM_FI_DEV_GPU_UTIL",gpu="0"}'

# --series ---------------------------------------------------------------------------------------
PARSE_CASES = [
    ("braces", '{__name__="m",gpu="0"}', {"__name__": "m", "gpu": "0"}),
    (
        "braces_spaces_trailing_comma",
        ' { gpu = "0" , __name__="m", } ',
        {"__name__": "m", "gpu": "0"},
    ),
    (
        "promql",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"}',
        {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n1"},
    ),
    ("promql_empty_braces", "up{}", {"__name__": "up"}),
    ("bare_name", "node_load1", {"__name__": "node_load1"}),
    ("bare_name_colons", "job:rate5m:sum", {"__name__": "job:rate5m:sum"}),
    ("no_name", '{gpu="0"}', {"gpu": "0"}),
    ("escapes_text_format", r'm{a="q\"b\\s\nn"}', {"__name__": "m", "a": 'q"b\\s\nn'}),
    ("escapes_go", r'm{a="\t\x41\101\u00e9\U0001F600"}', {"__name__": "m", "a": "\tAAé😀"}),
    ("single_quotes", r"m{a='it\'s \"x\"'}", {"__name__": "m", "a": 'it\'s "x"'}),
    ("backquotes_raw", r"m{a=`\n\"`}", {"__name__": "m", "a": r"\n\""}),
    ("utf8_value", 'm{a="Grüße ✓"}', {"__name__": "m", "a": "Grüße ✓"}),
    ("quoted_name_and_label", '{"my.metric", "a.b"="1"}', {"__name__": "my.metric", "a.b": "1"}),
    ("empty_value_is_absent", 'm{a="",b="1"}', {"__name__": "m", "b": "1"}),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse_series(text: str, expected: dict[str, str]) -> None:
    assert parse_series(text) == tuple(sorted(expected.items()))


ERROR_CASES = [
    ("empty", "", "expected a metric name or { at the end"),
    ("empty_braces", "{}", "no labels"),
    ("only_empty_values", '{a=""}', "no labels"),
    ("unterminated_braces", 'm{a="1"', "expected , or } at the end"),
    ("unterminated_string", 'm{a="1}', 'unterminated "string" at position 5'),
    ("newline_in_string", 'm{a="1\n"}', "unterminated"),
    ("unquoted_value", "m{a=1}", "expected a quoted value for a at position 5"),
    ("selector_not_equal", 'm{a!="1"}', "only = is allowed"),
    ("selector_regex", 'm{a=~"1"}', "only = is allowed"),
    ("missing_equals", 'm{a "1"}', "expected = after a"),
    ("bad_label_name", 'm{1a="1"}', "expected a label name at position 3"),
    ("duplicate_label", 'm{a="1",a="2"}', "label a given twice"),
    ("name_twice", 'm{__name__="n"}', "label __name__ given twice"),
    ("empty_label_name", '{""="1", __name__="m"}', "empty label name"),
    ("bad_escape", r'm{a="\q"}', r"invalid escape \q"),
    ("short_hex_escape", r'm{a="\x4"}', r"invalid escape \x"),
    ("non_ascii_byte_escape", r'm{a="\xff"}', r"byte over 0x7f"),
    ("trailing_garbage", 'm{a="1"} 12', "unexpected '1' at position 10"),
    ("space_in_name", "node load", "unexpected 'l'"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_parse_series_errors(text: str, message: str) -> None:
    with pytest.raises(SeriesError) as info:
        parse_series(text)
    assert message in str(info.value)


FORMAT_CASES = [
    ("promql", {"__name__": "m", "a": "1"}, 'm{a="1"}'),
    ("bare", {"__name__": "m"}, "m"),
    ("no_name", {"a": "1"}, '{a="1"}'),
    ("escaped", {"__name__": "m", "a": 'q"\\\n'}, 'm{a="q\\"\\\\\\n"}'),
    ("odd_name", {"__name__": "my.metric", "a.b": "1"}, '{__name__="my.metric", "a.b"="1"}'),
]


@pytest.mark.parametrize(
    ("labels", "text"), [c[1:] for c in FORMAT_CASES], ids=[c[0] for c in FORMAT_CASES]
)
def test_format_labels_round_trips(labels: dict[str, str], text: str) -> None:
    assert format_labels(tuple(sorted(labels.items()))) == text
    assert parse_series(text) == tuple(sorted(labels.items()))


# routing.explain --------------------------------------------------------------------------------
def _routes(spec: list[tuple[str, list[dict[str, Any]], bool]]) -> list[Route]:
    return [Route(n, parse_relabel_configs(rules, n), fallback=fb) for n, rules, fb in spec]


KEEP_DCGM = [{"source_labels": ["__name__"], "regex": "DCGM_.*", "action": "keep"}]
DROP_NAME = [{"regex": "__name__", "action": "labeldrop"}]
EXPLAIN_CASES = [
    (
        "primary_keeps_fallback_not_sent",
        [],
        [("ws", KEEP_DCGM, False), ("fb", [], True)],
        {"__name__": "DCGM_X"},
        [("ws", SENT, None), ("fb", NOT_SENT, None)],
    ),
    (
        "primary_drops_fallback_sends",
        [],
        [("ws", KEEP_DCGM, False), ("fb", [], True)],
        {"__name__": "node_load1"},
        [("ws", DROPPED, ("destination", 0)), ("fb", SENT, None)],
    ),
    (
        "invalid_counts_as_not_kept",
        [],
        [("ws", DROP_NAME, False), ("fb", [], True)],
        {"__name__": "m", "a": "1"},
        [("ws", INVALID_OUTCOME, None), ("fb", SENT, None)],
    ),
    (
        "no_labels_left",
        [],
        [("ws", [{"action": "labeldrop"}], False)],
        {"__name__": "m"},
        [("ws", DROPPED, None)],
    ),
    (
        "global_drop_everywhere",
        [
            {"source_labels": ["a"], "target_label": "b"},
            {"action": "drop", "source_labels": ["a"], "regex": "x"},
        ],
        [("ws", [], False), ("fb", [], True)],
        {"__name__": "m", "a": "x"},
        [("ws", DROPPED, ("global", 1)), ("fb", DROPPED, ("global", 1))],
    ),
    (
        "input_without_name_invalid",
        [],
        [("ws", [], False), ("fb", [], True)],
        {"a": "1"},
        [("ws", INVALID_OUTCOME, None), ("fb", INVALID_OUTCOME, None)],
    ),
    (
        "copy_to_both",
        [],
        [("a", [], False), ("b", KEEP_DCGM, False)],
        {"__name__": "DCGM_X"},
        [("a", SENT, None), ("b", SENT, None)],
    ),
]


@pytest.mark.parametrize(
    ("global_rules", "routes", "labels", "expected"),
    [c[1:] for c in EXPLAIN_CASES],
    ids=[c[0] for c in EXPLAIN_CASES],
)
def test_explain_outcomes_are_the_routers(
    global_rules: list[dict[str, Any]],
    routes: list[tuple[str, list[dict[str, Any]], bool]],
    labels: dict[str, str],
    expected: list[tuple[str, str, tuple[str, int] | None]],
) -> None:
    rules, built = parse_relabel_configs(global_rules, "g"), _routes(routes)
    result = explain(tuple(labels.items()), rules, built)
    assert [(d.name, d.outcome, d.dropped_by) for d in result.decisions] == expected
    # The sent label sets are what the router encodes (decode(route_labels) == labels).
    outcomes = Router(global_rules=rules, routes=built).route_labels(tuple(sorted(labels.items())))
    for d, res in zip(result.decisions, outcomes, strict=True):
        assert (d.outcome == SENT) == isinstance(res, bytes)
        assert (d.outcome == NOT_SENT) == (res is None)
        assert d.reason == (res if isinstance(res, str) else None)


# the command ------------------------------------------------------------------------------------
def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["relabel", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], config: str, *series: str) -> list[Any]:
    args = [a for s in series for a in ("--series", s)]
    code, out, _ = _run(capsys, "--config", config, "--json", *args)
    assert code == 0
    result: list[Any] = json.loads(out)["series"]
    return result


def _outcomes(entry: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["name"], d["outcome"]) for d in entry["destinations"]]


SHIPPED_CASES = [
    (
        "main_gpu_to_workspace",
        MAIN_CONFIG,
        GPU,
        [("workspace", "sent"), ("self-hosted", "not sent")],
    ),
    (
        "main_gpu_promql_form",
        MAIN_CONFIG,
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"}',
        [("workspace", "sent"), ("self-hosted", "not sent")],
    ),
    (
        "main_node_exporter_to_fallback",
        MAIN_CONFIG,
        'node_cpu_seconds_total{cpu="0"}',
        [("workspace", "dropped"), ("self-hosted", "sent")],
    ),
    ("main_bare_name", MAIN_CONFIG, "up", [("workspace", "dropped"), ("self-hosted", "sent")]),
    (
        "copy_to_both",
        str(EXAMPLES / "copy-to-both.yaml"),
        "up",
        [("workspace", "sent"), ("self-hosted", "sent")],
    ),
    (
        "teams_a",
        str(EXAMPLES / "two-workspaces-by-team.yaml"),
        'up{team="a"}',
        [("team-a", "sent"), ("team-b", "dropped"), ("self-hosted", "not sent")],
    ),
    (
        "teams_none",
        str(EXAMPLES / "two-workspaces-by-team.yaml"),
        "up",
        [("team-a", "dropped"), ("team-b", "dropped"), ("self-hosted", "sent")],
    ),
    ("sidecar", str(EXAMPLES / "sidecar-irsa.yaml"), "up", [("workspace", "sent")]),
]


@pytest.mark.parametrize(
    ("config", "series", "expected"),
    [c[1:] for c in SHIPPED_CASES],
    ids=[c[0] for c in SHIPPED_CASES],
)
def test_shipped_configs(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    config: str,
    series: str,
    expected: list[tuple[str, str]],
) -> None:
    for name in ("AWS_REGION", "AMP_WORKSPACE_ID", "TEAM_A_WORKSPACE_ID", "TEAM_B_WORKSPACE_ID"):
        monkeypatch.delenv(name, raising=False)  # not needed to trace
    [entry] = _json(capsys, config, series)
    assert _outcomes(entry) == expected


def test_text_output_gpu_and_node_exporter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys,
        "--config",
        MAIN_CONFIG,
        "--series",
        GPU,
        "--series",
        'node_cpu_seconds_total{cpu="0"}',
    )
    assert code == 0
    gpu, node = out.split("\n\n")
    assert gpu.splitlines()[0] == 'series DCGM_FI_DEV_GPU_UTIL{gpu="0"}'
    assert '  destination workspace: sent DCGM_FI_DEV_GPU_UTIL{gpu="0"}' in gpu
    assert "    [0] action=keep source_labels=[__name__] regex='DCGM_FI_DEV_GPU_UTIL|" in gpu
    assert "        => kept" in gpu
    assert "  destination self-hosted (fallback): not sent: kept by workspace" in gpu
    assert (
        "  destination workspace: dropped by rule [0] (not sent, counted as reason relabel)" in node
    )
    assert "        => dropped here" in node
    assert '  destination self-hosted (fallback): sent node_cpu_seconds_total{cpu="0"}' in node


def test_drop_high_cardinality_example_shows_global_and_labeldrop_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    series = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",__tmp_a="x"}'
    code, out, _ = _run(
        capsys, "--config", str(EXAMPLES / "drop-high-cardinality-labels.yaml"), "--series", series
    )
    assert code == 0
    assert out.splitlines()[1:5] == [
        "  global relabel_configs:",
        "    [0] action=labeldrop regex='__tmp_.*'",
        '        => -__tmp_a="x"',
        '    result: DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1", gpu="0"}',
    ]
    assert '        => -UUID="GPU-1"' in out
    assert '  destination workspace: sent DCGM_FI_DEV_GPU_UTIL{gpu="0"}' in out
    assert '  destination self-hosted: sent DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1", gpu="0"}' in out


STEPS_CONFIG = """
remote_write:
  - name: shaped
    url: http://localhost:1/api/v1/write
    write_relabel_configs:
      - {action: drop, source_labels: [__name__], regex: "debug_.*"}
      - {action: replace, source_labels: [gpu], regex: "(.*)", target_label: device,
         replacement: "gpu$1"}
      - {action: labelmap, regex: "k8s_(.+)", replacement: "$1"}
      - {action: hashmod, source_labels: [device], modulus: 4, target_label: shard}
      - {action: labeldrop, regex: "k8s_.*|gpu"}
      - {action: lowercase, source_labels: [Hostname], target_label: Hostname}
  - name: nameless
    url: http://localhost:2/api/v1/write
    write_relabel_configs:
      - {action: labeldrop, regex: __name__}
  - name: rest
    url: http://${REST_HOST}:${REST_PORT}/api/v1/write
    fallback: true
"""


@pytest.fixture
def steps_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("REST_HOST", "REST_PORT"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "steps.yaml"
    path.write_text(textwrap.dedent(STEPS_CONFIG))
    return str(path)


def test_steps_replace_labelmap_hashmod_labeldrop(
    capsys: pytest.CaptureFixture[str], steps_config: str
) -> None:
    series = 'm{gpu="3",k8s_pod="p1",Hostname="NODE"}'
    [entry] = _json(capsys, steps_config, series)
    shaped, nameless, rest = entry["destinations"]
    changes = [(s["index"], s["action"], s["changes"]) for s in shaped["steps"]]
    nothing: dict[str, Any] = {"added": {}, "removed": {}, "changed": {}}
    assert changes[:3] == [
        (0, "drop", nothing),
        (1, "replace", {**nothing, "added": {"device": "gpu3"}}),
        (2, "labelmap", {**nothing, "added": {"pod": "p1"}}),
    ]
    assert changes[3][1] == "hashmod" and list(changes[3][2]["added"]) == ["shard"]
    assert changes[4] == (4, "labeldrop", {**nothing, "removed": {"gpu": "3", "k8s_pod": "p1"}})
    assert changes[5] == (5, "lowercase", {**nothing, "changed": {"Hostname": ["NODE", "node"]}})
    shard = changes[3][2]["added"]["shard"]
    assert shaped["outcome"] == "sent"
    assert shaped["labels"] == {
        "Hostname": "node",
        "__name__": "m",
        "device": "gpu3",
        "pod": "p1",
        "shard": shard,
    }
    assert shaped["labels"] == shaped["steps"][-1]["labels"]
    # nameless: the router refuses a label set without __name__ (counted "invalid").
    assert nameless["outcome"] == "invalid" and nameless["reason"] == "invalid"
    assert nameless["detail"] == "invalid: no __name__ label after relabeling"
    assert rest["outcome"] == "not sent" and rest["detail"] == "kept by shaped"
    _, _, err = _run(capsys, "--config", steps_config, "--series", "up")
    assert "unset environment variables taken as '0': REST_HOST, REST_PORT" in err


def test_drop_rule_json_shape(capsys: pytest.CaptureFixture[str], steps_config: str) -> None:
    [entry] = _json(capsys, steps_config, 'debug_x{a="1"}')
    assert entry["input"] == 'debug_x{a="1"}'
    assert entry["labels"] == {"__name__": "debug_x", "a": "1"}
    assert entry["global"] == {"steps": [], "labels": {"__name__": "debug_x", "a": "1"}}
    shaped, nameless, rest = entry["destinations"]
    assert shaped == {
        "name": "shaped",
        "fallback": False,
        "shadow": False,
        "outcome": "dropped",
        "labels": None,
        "dropped_by": {"scope": "destination", "index": 0},
        "reason": "relabel",
        "detail": "dropped by rule [0]",
        "escaping": "allow-utf-8",
        "escaped": None,
        "steps": [
            {
                "index": 0,
                "action": "drop",
                "rule": "action=drop source_labels=[__name__] regex='debug_.*'",
                "kept": False,
                "labels": None,
                "changes": {"added": {}, "removed": {}, "changed": {}},
            }
        ],
    }
    assert nameless["outcome"] == "invalid"
    assert (rest["fallback"], rest["outcome"], rest["labels"]) == (True, "sent", entry["labels"])


def test_text_invalid_outcome(capsys: pytest.CaptureFixture[str], steps_config: str) -> None:
    code, out, _ = _run(capsys, "--config", steps_config, "--series", 'debug_x{a="1"}')
    assert code == 0
    assert (
        '  destination nameless: invalid: no __name__ label after relabeling: {a="1"} '
        "(not sent, counted as reason invalid)"
    ) in out
    assert (
        '  destination rest (fallback): sent debug_x{a="1"}\n    (no write_relabel_configs)' in out
    )
    code, out, _ = _run(capsys, "--config", steps_config, "--series", "debug_x")
    assert (
        "  destination nameless: no labels left after relabeling (not sent, counted as "
        "reason relabel)" in out
    )


EXIT_2_CASES = [
    ("bad_series", [MAIN_CONFIG, 'm{a!="1"}'], "rwrouter: invalid --series 'm{a!=\"1\"}': "),
    ("missing_config", ["/nonexistent.yaml", "up"], "rwrouter: configuration error: "),
    ("bad_config", ["@bad", "up"], "rwrouter: configuration error: remote_write"),
]


@pytest.mark.parametrize(
    ("args", "message"), [c[1:] for c in EXIT_2_CASES], ids=[c[0] for c in EXIT_2_CASES]
)
def test_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    config, series = args
    if config == "@bad":
        config = str(tmp_path / "bad.yaml")
        Path(config).write_text("remote_write: []\n")
    code, out, err = _run(capsys, "--config", config, "--series", series)
    assert code == 2
    assert out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["relabel", "--config", MAIN_CONFIG])  # --series is required
    assert info.value.code == 2


SHADOW_CONFIG = """
remote_write:
  - name: ws
    url: http://ws:1/w
    write_relabel_configs: [{source_labels: [__name__], regex: DCGM_FI_DEV_GPU_UTIL, action: keep}]
  - name: all-dcgm
    shadow: true
    write_relabel_configs: [{source_labels: [__name__], regex: "DCGM_.*", action: keep}]
  - {name: self, url: "http://self:1/w", fallback: true}
"""


def test_a_shadow_destination_is_counted_and_never_keeps_for_the_fallback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "shadow.yaml"
    path.write_text(SHADOW_CONFIG)
    code, out, _ = _run(capsys, "--config", str(path), "--series", 'DCGM_FI_DEV_FB_USED{gpu="0"}')
    assert code == 0
    assert (
        "  destination all-dcgm (shadow): counted by the audit as "
        'DCGM_FI_DEV_FB_USED{gpu="0"} (never sent)'
    ) in out
    assert '  destination self (fallback): sent DCGM_FI_DEV_FB_USED{gpu="0"}' in out
    code, out, _ = _run(capsys, "--config", str(path), "--series", 'node_load1{cpu="0"}')
    assert "  destination all-dcgm (shadow): dropped by rule [0] (not counted by the audit)" in out
    [entry] = _json(capsys, str(path), "DCGM_FI_DEV_FB_USED")
    shadow = {d["name"]: (d["shadow"], d["outcome"]) for d in entry["destinations"]}
    assert shadow == {"ws": (False, DROPPED), "all-dcgm": (True, SENT), "self": (False, SENT)}


TENANT_CONFIG = """
remote_write:
  - name: team-a
    url: http://a:1/w
    write_relabel_configs: [{source_labels: [__tenant__], regex: team-a, action: keep}]
  - name: rest
    url: http://rest:1/w
    fallback: true
    write_relabel_configs: [{source_labels: [__tenant__], target_label: tenant}]
"""
# id, --tenant (None: absent), series, outcome at team-a, labels at rest (None: not sent)
TENANT_CASES = [
    ("its_tenant_kept", "team-a", 'm{gpu="0"}', SENT, None),
    (
        "another_tenant_to_the_fallback",
        "team-b",
        "m",
        DROPPED,
        {"__name__": "m", "tenant": "team-b"},
    ),
    ("no_tenant", None, "m", DROPPED, {"__name__": "m"}),
    (
        "own_label_replaced",
        "team-b",
        'm{__tenant__="team-a"}',
        DROPPED,
        {"__name__": "m", "tenant": "team-b"},
    ),
    (
        "own_label_removed_without_tenant",
        None,
        'm{__tenant__="team-a"}',
        DROPPED,
        {"__name__": "m"},
    ),
]


@pytest.mark.parametrize(
    ("tenant", "series", "at_a", "at_rest"),
    [c[1:] for c in TENANT_CASES],
    ids=[c[0] for c in TENANT_CASES],
)
def test_tenant_routes_as_rwrouter_run(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tenant: str | None,
    series: str,
    at_a: str,
    at_rest: dict[str, str] | None,
) -> None:
    config = tmp_path / "tenants.yaml"
    config.write_text(TENANT_CONFIG)
    extra = [] if tenant is None else ["--tenant", tenant]
    code, out, _ = _run(capsys, "--config", str(config), "--series", series, "--json", *extra)
    assert code == 0
    [entry] = json.loads(out)["series"]
    a, rest = entry["destinations"]
    assert a["outcome"] == at_a
    if at_a == SENT:
        assert "__tenant__" not in a["labels"]  # removed after the rules: never sent
    assert (rest["labels"] if rest["outcome"] == SENT else None) == at_rest
    assert entry["labels"].get("__tenant__") == tenant  # what the rules saw


def test_tenant_errors_and_notes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "tenants.yaml"
    config.write_text(TENANT_CONFIG)
    code, out, err = _run(capsys, "--config", str(config), "--series", "m", "--tenant", "a|b")
    assert (code, out) == (2, "")
    assert (
        err
        == "rwrouter: invalid --tenant: the tenant ID may hold only letters, digits and !-_.*'()\n"
    )
    code, _, err = _run(capsys, "--config", MAIN_CONFIG, "--series", "up", "--tenant", "team-a")
    assert code == 0
    assert "no rule mentions __tenant__: the tenant changes nothing" in err
