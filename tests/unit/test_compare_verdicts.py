"""``rwrouter compare``: answers read strictly (every malformed one an AnswerError with a
one-line reason, never another exception), and the verdicts that are not parity: no data,
series in the workspace the rules do not send there, self-hosted series the rules merge."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from rwrouter.cli.compare import expected_in_workspace
from rwrouter.compare.parity import (
    AnswerError,
    Collision,
    Expected,
    Labels,
    close,
    compare,
    parse_matrix,
)
from rwrouter.compare.report import (
    EXIT_DIFFERENCES,
    EXIT_NOT_COMPARED,
    EXIT_PARITY,
    Outcome,
    QueryReport,
    exit_code,
    format_report,
    side_stats,
    summary_line,
)
from rwrouter.compare.report_json import to_json
from rwrouter.config import parse_config


def matrix_text(result: str) -> str:
    """An answer with ``result`` as JSON text (as a store sends it: ``Infinity``, ``NaN``
    and huge numbers are what Python's json module then makes of them)."""
    return '{"status":"success","data":{"resultType":"matrix","result":[' + result + "]}}"


def one(values: str = '[[1, "1"]]', metric: str = '{"__name__": "up"}') -> str:
    return matrix_text('{"metric": ' + metric + ', "values": ' + values + "}")


def hist(buckets: str, count: str = '"1"') -> str:
    histogram = '{"count": ' + count + ', "sum": "1", "buckets": ' + buckets + "}"
    return matrix_text('{"metric": {}, "histograms": [[1, ' + histogram + "]]}")


# --------------------------------------------------------------------------------------------
# parse_matrix refuses what Prometheus never writes


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param(one('[[Infinity, "1"]]'), "a timestamp of values is not finite", id="inf_ts"),
        pytest.param(one('[[NaN, "1"]]'), "a timestamp of values is not finite", id="nan_ts"),
        pytest.param(one('[[1e308, "1"]]'), "a timestamp of values is out of range", id="1e308_ts"),
        pytest.param(
            one('[[true, "1"]]'), "a timestamp of values is not a number: True", id="bool_ts"
        ),
        pytest.param(
            one('[["1", "1"]]'), "a timestamp of values is not a number: '1'", id="text_ts"
        ),
        pytest.param(one("[[1, 1]]"), "a sample value is not a string: 1", id="number_value"),
        pytest.param(one("[[1, null]]"), "a sample value is not a string: None", id="null_value"),
        pytest.param(
            one('[[1, "' + "9" * 5000 + '"]]'), "a sample value is not a number", id="long"
        ),
        pytest.param(one('[[1, "1e999"]]'), "too large for a float64: '1e999'", id="overflow"),
        pytest.param(one('[[1, "inf"]]'), "a sample value is not a number: 'inf'", id="python_inf"),
        pytest.param(
            one('[[1, "1_000"]]'), "a sample value is not a number: '1_000'", id="digits_"
        ),
        pytest.param(one('[[1, " 1"]]'), "a sample value is not a number:", id="blank"),
        pytest.param(
            one('[[1, "1"], [1, "5"]]'), "two points of one series at the same", id="dup_ts"
        ),
        pytest.param(one('{"a": 1}'), "values is not a list", id="values_object"),
        pytest.param(one("[[1]]"), "a point of values is not [<unix seconds>", id="short_point"),
        pytest.param(one(metric='{"": "x"}'), "a series has an empty label name", id="empty_name"),
        pytest.param(
            one(metric='{"job": 1}'), "label 'job' has a value that is not a string", id="int"
        ),
        pytest.param(one(metric="null"), "a result entry has no metric object", id="no_metric"),
        pytest.param(
            matrix_text('{"metric": {"a": "1"}}, {"metric": {"a": "1"}}'),
            "two series with the same labels",
            id="same_labels_twice",
        ),
        pytest.param(matrix_text("1, 2"), "a result entry is not an object", id="entry_number"),
        pytest.param(
            hist('[[null, "0", "1", "1"]]'), "boundary rule is not 0-3: None", id="rule_null"
        ),
        pytest.param(
            hist('[["x", "0", "1", "1"]]'), "boundary rule is not 0-3: 'x'", id="rule_text"
        ),
        pytest.param(
            hist('[[[1], "0", "1", "1"]]'), "boundary rule is not 0-3: [1]", id="rule_list"
        ),
        pytest.param(hist('[[4, "0", "1", "1"]]'), "boundary rule is not 0-3: 4", id="rule_4"),
        pytest.param(
            hist('[[true, "0", "1", "1"]]'), "boundary rule is not 0-3: True", id="rule_b"
        ),
        pytest.param(hist('[[0, "a", "1", "1"]]'), "a bucket boundary is not a number", id="bound"),
        pytest.param(
            hist('[[0, "NaN", "1", "1"]]'), "a histogram bucket boundary is NaN", id="nan"
        ),
        pytest.param(hist('[[0, "0", "1"]]'), "is not [rule, left, right, count]", id="3_fields"),
        pytest.param(hist("[]", count="null"), "a histogram count is not a string", id="no_count"),
        pytest.param(
            matrix_text(
                '{"metric": {}, "values": [[1, "1"]], "histograms": [[1, {"count": "1", '
                '"sum": "1"}]]}'
            ),
            "two points of one series at the same timestamp 1",
            id="float_and_histogram_at_one_timestamp",
        ),
        pytest.param(
            '{"status": "error", "errorType": {"x": 1}, "error": ["a"]}',
            "{'x': 1}: ['a']",
            id="error_of_other_types",
        ),
    ],
)
def test_parse_matrix_refuses_a_malformed_answer(text: str, reason: str) -> None:
    with pytest.raises(AnswerError) as refused:
        parse_matrix(json.loads(text))
    message = str(refused.value)
    assert reason in message and "\n" not in message and len(message) < 300


def test_parse_matrix_reads_the_values_prometheus_writes() -> None:
    text = one('[[1435781430.781, "NaN"], [2, "+Inf"], [3, "-Inf"], [4, "1e+21"], [5, "-.5"]]')
    (points,) = parse_matrix(json.loads(text)).values()
    nan, *rest = points.values()
    assert list(points) == [1435781430781, 2000, 3000, 4000, 5000]
    assert isinstance(nan, float) and math.isnan(nan)
    assert rest == [math.inf, -math.inf, 1e21, -0.5]


def test_histogram_bounds_compare_as_numbers() -> None:
    (a,) = parse_matrix(json.loads(hist('[[0, "0.1", "1e0", "1"]]'))).values()
    (b,) = parse_matrix(json.loads(hist('[[0, "0.10", "1", "1.0"]]'))).values()
    assert close(a[1000], b[1000], tolerance=0.0)


# --------------------------------------------------------------------------------------------
# verdicts

UP_A: Labels = (("__name__", "up"), ("job", "a"))
UP_B: Labels = (("__name__", "up"), ("job", "b"))
UP: Labels = (("__name__", "up"),)
GPU: Labels = (("__name__", "gpu_util"), ("pod", "p1"))
POINTS = {1000: 1.0}
Answer = Mapping[Labels, Mapping[int, float]]

CONFIG = """
remote_write:
  - name: workspace
    url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write
    sigv4: {region: us-east-1}
    write_relabel_configs:
      - {source_labels: [__name__], regex: "up|gpu[.]util", action: keep}
      - {regex: job, action: labeldrop}
  - name: self-hosted
    url: http://prometheus:9090/api/v1/write
"""


def rules() -> Expected:
    """The workspace keeps ``up`` (without its ``job`` label) and ``gpu.util`` (escaped to
    ``gpu_util``); nothing else."""
    return expected_in_workspace(parse_config(CONFIG, env={}), "workspace")


@pytest.mark.parametrize(
    ("self_hosted", "workspace", "found"),
    [
        pytest.param({}, {}, {"no_data": True, "equal": True}, id="both_empty"),
        pytest.param(
            {(("__name__", "node_load1"),): POINTS},
            {},
            {"no_data": True, "not_migrated": 1},
            id="only_series_not_migrated",
        ),
        pytest.param({UP_A: POINTS}, {UP: POINTS}, {"no_data": False, "equal": True}, id="eq"),
        pytest.param(
            {UP_A: POINTS, UP_B: {1000: 2.0}},
            {UP: POINTS},
            {"collisions": (Collision(UP, (UP_A, UP_B)),), "equal": False, "compared": 0},
            id="labeldrop_merges_two_series",
        ),
        pytest.param(
            {(("__name__", "node_load1"),): POINTS},
            {(("__name__", "node_load1"),): POINTS},
            {"unexpected": 1, "missing_sh": 0, "not_migrated": 1, "equal": False},
            id="in_both_but_not_routed_there",
        ),
        pytest.param(
            {},
            {(("__name__", "node_load1"),): POINTS},
            {"unexpected": 1, "missing_sh": 0, "equal": False},
            id="only_in_workspace_not_routed_there",
        ),
        pytest.param(
            {UP_A: POINTS},
            {UP: POINTS, UP_A: POINTS},
            {"unexpected": 1, "missing_sh": 0, "compared": 1},
            id="in_workspace_under_labels_the_rules_do_not_give",
        ),
        pytest.param(
            {(("__name__", "gpu.util"), ("pod", "p0")): POINTS},
            {(("__name__", "gpu_util"), ("pod", "p0")): POINTS, GPU: POINTS},
            {"unexpected": 0, "missing_sh": 1, "compared": 1},
            id="escaped_family_missing_in_self_hosted",
        ),
        pytest.param(
            {}, {(("__name__", "up"),): POINTS}, {"unexpected": 0, "missing_sh": 1}, id="routed"
        ),
    ],
)
def test_compare_verdicts(self_hosted: Answer, workspace: Answer, found: dict[str, Any]) -> None:
    p = compare(self_hosted, workspace, tolerance=1e-9, expected=rules())
    got = {
        "no_data": p.no_data,
        "equal": p.equal,
        "not_migrated": len(p.not_migrated),
        "collisions": p.collisions,
        "compared": p.series_compared,
        "unexpected": len(p.unexpected_in_workspace),
        "missing_sh": len(p.missing_in_self_hosted),
    }
    assert {k: got[k] for k in found} == found


def test_a_collision_names_the_merged_series_by_family() -> None:
    p = compare({UP_A: POINTS, UP_B: POINTS}, {UP: POINTS}, tolerance=1e-9, expected=rules())
    (collision,) = p.collisions
    assert collision.text() == 'up <- up{job="a"}, up{job="b"}'
    assert (p.families["up"].colliding, p.families["up"].in_both) == (2, 0)


def report_of(self_hosted: Answer, workspace: Answer) -> QueryReport:
    parity = compare(self_hosted, workspace, tolerance=1e-9, expected=rules())
    runs = side_stats([Outcome(0.1)])
    urls = {"self-hosted": "http://a", "workspace": "http://b"}
    return QueryReport("up{job='typo'}", 0.0, 60.0, 15.0, runs, runs, parity, urls)


@pytest.mark.parametrize(
    ("reports", "code", "statuses", "in_text"),
    [
        pytest.param(
            [report_of({}, {})],
            EXIT_DIFFERENCES,
            ["no data"],
            "NO DATA: neither store has a series for this query in the range",
            id="no_data_is_not_parity",
        ),
        pytest.param(
            [report_of({(("__name__", "node_load1"),): POINTS}, {})],
            EXIT_DIFFERENCES,
            ["no data"],
            "the 1 self-hosted series are not migrated",
            id="only_not_migrated",
        ),
        pytest.param(
            [report_of({UP_A: POINTS}, {UP: POINTS}), report_of({}, {})],
            EXIT_DIFFERENCES,
            ["parity", "no data"],
            "parity 1/2, differences 0, no data 1",
            id="one_of_two",
        ),
        pytest.param(
            [report_of({UP_A: POINTS, UP_B: POINTS}, {UP: POINTS})],
            EXIT_DIFFERENCES,
            ["differences"],
            "1 workspace series each made of several self-hosted series (2 in all",
            id="collision",
        ),
        pytest.param(
            [report_of({}, {(("__name__", "node_load1"),): POINTS})],
            EXIT_DIFFERENCES,
            ["differences"],
            "1 series in the workspace but not routed there by the rules (unexpected)",
            id="unexpected",
        ),
        pytest.param(
            [report_of({UP_A: POINTS}, {UP: POINTS})], EXIT_PARITY, ["parity"], "equal", id="ok"
        ),
    ],
)
def test_report_of_the_verdicts(
    reports: list[QueryReport], code: int, statuses: list[str], in_text: str
) -> None:
    assert code != EXIT_NOT_COMPARED
    summary = summary_line(reports, when="2026-12-07T10:00:00Z")
    text = format_report(reports, tolerance=1e-9, summary=summary)
    document = to_json(reports, tolerance=1e-9, summary=summary)
    assert (exit_code(reports), [r.status for r in reports]) == (code, statuses)
    assert in_text in text
    assert [q["status"] for q in document["queries"]] == statuses
    assert document["exit_code"] == code
