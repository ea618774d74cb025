"""``rwrouter compare``'s pure core: answers parsed, parity within a tolerance, latency
statistics, the report and its exit code, the stores' query URLs and the window."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rwrouter.cli.compare import expected_in_workspace
from rwrouter.compare.client import query_form, query_url
from rwrouter.compare.parity import (
    NO_NAME,
    AnswerError,
    Histogram,
    Labels,
    Matrix,
    close,
    compare,
    parse_matrix,
)
from rwrouter.compare.report import (
    EXIT_DIFFERENCES,
    EXIT_NOT_COMPARED,
    EXIT_PARITY,
    EXIT_USAGE,
    Outcome,
    QueryReport,
    exit_code,
    format_report,
    newest_only,
    percentile,
    side_stats,
    summary_line,
)
from rwrouter.compare.report_json import to_json
from rwrouter.compare.targets import (
    MAX_POINTS,
    Window,
    choose_destinations,
    parse_queries,
    query_base,
    store_url,
    window,
)
from rwrouter.config import parse_config
from rwrouter.doubles.sigv4_verify import canonical_query
from rwrouter.errors import ConfigError

UTIL: Labels = (("Hostname", "n1"), ("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", "0"))
FB: Labels = (("Hostname", "n1"), ("__name__", "DCGM_FI_DEV_FB_USED"), ("gpu", "0"))
AVG: Labels = (("Hostname", "n1"),)


def answer(*series: tuple[dict[str, str], list[list[Any]]]) -> dict[str, Any]:
    result = [{"metric": metric, "values": values} for metric, values in series]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


# --------------------------------------------------------------------------------------------
# parse_matrix


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param(answer(), {}, id="no_series"),
        pytest.param(
            answer(({"__name__": "up", "job": "a"}, [[10, "1"], [10.5, "2.5"]])),
            {(("__name__", "up"), ("job", "a")): {10_000: 1.0, 10_500: 2.5}},
            id="labels_sorted_timestamps_in_ms",
        ),
        pytest.param(
            answer(({}, [[1, "+Inf"], [2, "-Inf"]])),
            {(): {1000: math.inf, 2000: -math.inf}},
            id="infinities",
        ),
        pytest.param(
            {
                "status": "success",
                "data": {
                    "resultType": "matrix",
                    "result": [
                        {
                            "metric": {"__name__": "h"},
                            "histograms": [
                                [1, {"count": "3", "sum": "1.5", "buckets": [[0, "0", "1", "3"]]}]
                            ],
                        }
                    ],
                },
            },
            {(("__name__", "h"),): {1000: Histogram(3.0, 1.5, ((0, 0.0, 1.0, 3.0),))}},
            id="native_histogram",
        ),
    ],
)
def test_parse_matrix(document: dict[str, Any], expected: Matrix) -> None:
    assert parse_matrix(document) == expected


def test_parse_matrix_keeps_nan() -> None:
    (points,) = parse_matrix(answer(({}, [[1, "NaN"]]))).values()
    value = points[1000]
    assert isinstance(value, float) and math.isnan(value)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
            "bad_data: parse error at char 3",
            id="prometheus_error",
        ),
        pytest.param(
            {"message": "Missing Authentication Token"},
            "error: Missing Authentication Token",
            id="aws_error",
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": []}},
            "expected a matrix result, got 'vector'",
            id="vector",
        ),
        pytest.param([], "not a JSON object", id="not_an_object"),
        pytest.param(answer(({}, [[1]])), "not [<unix seconds>, <value>]", id="short_point"),
        pytest.param(
            answer(({}, [[1, "x"]])), "a sample value is not a number: 'x'", id="bad_value"
        ),
    ],
)
def test_parse_matrix_refuses(document: object, message: str) -> None:
    with pytest.raises(AnswerError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_matrix(document)


# --------------------------------------------------------------------------------------------
# close


@pytest.mark.parametrize(
    ("a", "b", "tolerance", "equal"),
    [
        pytest.param(1.0, 1.0, 0.0, True, id="identical"),
        pytest.param(1.0, 1.0 + 1e-12, 1e-9, True, id="rounding"),
        pytest.param(1.0, 1.001, 1e-9, False, id="different"),
        pytest.param(1.0, 1.001, 1e-2, True, id="within_a_loose_tolerance"),
        pytest.param(0.0, 1e-300, 1e-9, False, id="zero_only_equals_zero"),
        pytest.param(math.nan, math.nan, 1e-9, True, id="nan_nan"),
        pytest.param(math.nan, 1.0, 1e-9, False, id="nan_number"),
        pytest.param(math.inf, math.inf, 1e-9, True, id="inf_inf"),
        pytest.param(math.inf, -math.inf, 1e-9, False, id="inf_minus_inf"),
        pytest.param(
            Histogram(3, 1.5, ((0, 0.0, 1.0, 3),)),
            Histogram(3, 1.5 + 1e-12, ((0, 0.0, 1.0, 3),)),
            1e-9,
            True,
            id="histograms_close",
        ),
        pytest.param(
            Histogram(3, 1.5, ((0, 0.0, 1.0, 3),)),
            Histogram(3, 1.5, ((0, 0.0, 2.0, 3),)),
            1e-9,
            False,
            id="histograms_other_buckets",
        ),
        pytest.param(Histogram(3, 1.5, ()), 3.0, 1e-9, False, id="histogram_and_float"),
    ],
)
def test_close(a: Any, b: Any, tolerance: float, equal: bool) -> None:
    assert close(a, b, tolerance=tolerance) is equal


# --------------------------------------------------------------------------------------------
# compare

BOTH: Matrix = {UTIL: {1000: 50.0, 2000: 60.0}, FB: {1000: 7.0}}


@pytest.mark.parametrize(
    ("self_hosted", "workspace", "expected", "counts"),
    [
        pytest.param(BOTH, BOTH, None, (2, 3, 0, 0, 0, 0, 0), id="equal"),
        pytest.param(
            BOTH, {UTIL: BOTH[UTIL]}, None, (1, 2, 1, 0, 0, 0, 0), id="family_missing_in_workspace"
        ),
        pytest.param(
            {UTIL: BOTH[UTIL]}, BOTH, None, (1, 2, 0, 1, 0, 0, 0), id="missing_in_self_hosted"
        ),
        pytest.param(
            BOTH,
            {**BOTH, UTIL: {1000: 50.0, 2000: 61.0}},
            None,
            (2, 3, 0, 0, 0, 1, 1),
            id="value_differs",
        ),
        pytest.param(
            BOTH, {**BOTH, UTIL: {1000: 50.0}}, None, (2, 3, 0, 0, 0, 1, 1), id="point_absent"
        ),
        pytest.param(
            BOTH,
            {UTIL: BOTH[UTIL]},
            lambda labels: labels if dict(labels)["__name__"].endswith("UTIL") else None,
            (1, 2, 0, 0, 1, 0, 0),
            id="family_not_migrated",
        ),
        pytest.param(
            {(("__name__", "gpu.util"),): {1000: 1.0}},
            {(("__name__", "gpu_util"),): {1000: 1.0}},
            lambda labels: (("__name__", "gpu_util"),),
            (1, 1, 0, 0, 0, 0, 0),
            id="escaped_name",
        ),
    ],
)
def test_compare(
    self_hosted: Matrix,
    workspace: Matrix,
    expected: Any,
    counts: tuple[int, int, int, int, int, int, int],
) -> None:
    p = compare(self_hosted, workspace, tolerance=1e-9, expected=expected)
    assert (
        p.series_compared,
        p.points_compared,
        len(p.missing_in_workspace),
        len(p.missing_in_self_hosted),
        len(p.not_migrated),
        p.differing_series,
        p.differing_points,
    ) == counts
    assert p.equal is (counts[2] + counts[3] + counts[5] == 0)


def test_compare_names_what_differs_by_family() -> None:
    workspace = {UTIL: {1000: 50.0, 2000: 61.0}, AVG: {1000: 1.0}}
    p = compare(BOTH, workspace, tolerance=1e-9, limit=1)
    assert [d.text() for d in p.differences] == [
        'DCGM_FI_DEV_GPU_UTIL{Hostname="n1", gpu="0"} at 1970-01-01T00:00:02.000Z: '
        "self-hosted 60, workspace 61"
    ]
    assert p.families["DCGM_FI_DEV_FB_USED"].missing_in_workspace == 1
    assert p.families["DCGM_FI_DEV_GPU_UTIL"].differing == 1
    assert p.families[NO_NAME].missing_in_self_hosted == 1


# --------------------------------------------------------------------------------------------
# statistics and the report


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([0.2], 95, 0.2, id="one_value"),
        pytest.param([1.0, 2.0, 3.0, 4.0, 5.0], 50, 3.0, id="median"),
        pytest.param([1.0, 2.0, 3.0, 4.0, 5.0], 95, 4.8, id="p95_interpolated"),
        pytest.param([5.0, 1.0], 100, 5.0, id="max"),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_side_stats_counts_timeouts_and_errors_apart() -> None:
    stats = side_stats(
        [
            Outcome(0.5),
            Outcome(None, timed_out=True, error="timed out after 1s"),
            Outcome(None, error="HTTP 422: bad_data: x"),
            Outcome(1.5),
        ]
    )
    assert (stats.runs, stats.answered, stats.timeouts, stats.errors) == (4, 2, 1, 1)
    assert (stats.p50, stats.error) == (1.0, "timed out after 1s")


def report(sh: list[Outcome], ws: list[Outcome], workspace: Matrix | None) -> QueryReport:
    parity = None if workspace is None else compare(BOTH, workspace, tolerance=1e-9)
    return QueryReport(
        query="avg(DCGM_FI_DEV_GPU_UTIL)",
        start=0.0,
        end=3600.0,
        step=30.0,
        self_hosted=side_stats(sh),
        workspace=side_stats(ws),
        parity=parity,
        urls={"self-hosted": "http://a", "workspace": "http://b"},
    )


FAST = [Outcome(0.1), Outcome(0.1)]
SLOW = [Outcome(2.0), Outcome(3.0)]
TIMEOUT = [Outcome(None, timed_out=True, error="timed out after 1s")] * 2
BAD = [Outcome(None, error='HTTP 400: bad_data: invalid parameter "query": 1:5: parse error')] * 2


@pytest.mark.parametrize(
    ("reports", "code", "status", "in_summary"),
    [
        pytest.param([report(SLOW, FAST, BOTH)], EXIT_PARITY, "parity", "25.00x", id="parity"),
        pytest.param(
            [report(SLOW, FAST, {UTIL: BOTH[UTIL]})],
            EXIT_DIFFERENCES,
            "differences",
            "differences 1",
            id="differences",
        ),
        pytest.param(
            [report(TIMEOUT, FAST, None)],
            EXIT_NOT_COMPARED,
            "not compared",
            "self-hosted timed out on 1 query",
            id="self_hosted_timed_out",
        ),
        pytest.param(
            [report(SLOW, [Outcome(0.1), TIMEOUT[0]], BOTH)],
            EXIT_NOT_COMPARED,
            "parity",
            "workspace timed out on 1 query",
            id="one_run_timed_out",
        ),
        pytest.param(
            [report(BAD, BAD, None)], EXIT_USAGE, "bad query", "bad query 1", id="bad_query"
        ),
        pytest.param(
            [report(BAD, FAST, None)],
            EXIT_NOT_COMPARED,
            "not compared",
            "self-hosted failed on 1 query",
            id="refused_by_one_store_only",
        ),
    ],
)
def test_report(reports: list[QueryReport], code: int, status: str, in_summary: str) -> None:
    assert exit_code(reports) == code
    assert reports[0].status == status
    summary = summary_line(reports, when="2026-12-07T10:00:00Z")
    assert summary.startswith("rwrouter compare 2026-12-07T10:00:00Z: 1 query")
    assert in_summary in summary and "\n" not in summary
    text = format_report(reports, tolerance=1e-9, summary=summary)
    assert text.endswith(summary) and "  parity: " in text
    document = to_json(reports, tolerance=1e-9, summary=summary)
    assert (document["exit_code"], document["queries"][0]["status"]) == (code, status)


def test_report_text_says_what_is_missing_where() -> None:
    r = report(SLOW, FAST, {UTIL: BOTH[UTIL]})
    text = format_report([r], tolerance=1e-9, summary="s")
    assert "1 series missing in the workspace (by family: DCGM_FI_DEV_FB_USED 1)" in text
    assert 'DCGM_FI_DEV_FB_USED{Hostname="n1", gpu="0"}' in text
    assert "speed-up: 25.00x" in text
    parity = to_json([r], tolerance=1e-9, summary="s")["queries"][0]["parity"]
    assert parity["families"]["DCGM_FI_DEV_FB_USED"]["missing_in_workspace"] == 1


# --------------------------------------------------------------------------------------------
# targets


@pytest.mark.parametrize(
    ("url", "base"),
    [
        pytest.param(
            "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
            id="workspace",
        ),
        pytest.param("http://prometheus:9090/api/v1/write", "http://prometheus:9090", id="prom"),
        pytest.param("http://p:9090/prom/api/v1/write/", "http://p:9090/prom", id="prefix"),
        pytest.param("http://mimir/api/v1/push", None, id="mimir_push"),
        pytest.param("http://vm:8428/api/v1/import", None, id="other"),
    ],
)
def test_query_base(url: str, base: str | None) -> None:
    assert query_base(url) == base


WS = """
  - name: workspace
    url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write
    sigv4: {region: us-east-1}
"""
SH = """
  - name: self-hosted
    url: http://prometheus:9090/api/v1/write
"""
SHADOW = """
  - name: candidate
    shadow: true
"""


@pytest.mark.parametrize(
    ("destinations", "names", "chosen"),
    [
        pytest.param(WS + SH, {}, ("workspace", "self-hosted"), id="one_each"),
        pytest.param(WS + SHADOW + SH, {}, ("workspace", "self-hosted"), id="shadow_ignored"),
        pytest.param(
            WS + SH + SH.replace("self-hosted", "other") + "    fallback: true\n",
            {},
            ("workspace", "other"),
            id="the_fallback",
        ),
        pytest.param(
            WS + SH + SH.replace("self-hosted", "other"),
            {"self_hosted": "other"},
            ("workspace", "other"),
            id="named",
        ),
    ],
)
def test_choose_destinations(
    destinations: str, names: dict[str, str], chosen: tuple[str, str]
) -> None:
    config = parse_config("remote_write:" + destinations, env={})
    ws, sh = choose_destinations(config, **names)
    assert (ws.name, sh.name) == chosen


@pytest.mark.parametrize(
    ("destinations", "names", "message"),
    [
        pytest.param(SH, {}, "no sigv4 destination", id="no_workspace"),
        pytest.param(
            WS + SH + SH.replace("self-hosted", "other"),
            {},
            "--self-hosted-name: several self-hosted destinations (self-hosted, other)",
            id="two_self_hosted",
        ),
        pytest.param(WS + SH, {"workspace": "nope"}, "no sigv4 destination named 'nope'", id="bad"),
    ],
)
def test_choose_destinations_refuses(
    destinations: str, names: dict[str, str], message: str
) -> None:
    config = parse_config("remote_write:" + destinations, env={})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        choose_destinations(config, **names)


def test_store_url() -> None:
    config = parse_config(
        "remote_write:" + WS + "  - {name: vm, url: 'http://vm:8428/api/v1/import'}\n", env={}
    )
    ws, vm = config.remote_write
    assert store_url(ws, None, "--workspace").endswith("/workspaces/ws-1")
    assert store_url(vm, "http://vm:8428/", "--self-hosted") == "http://vm:8428"
    with pytest.raises(ConfigError, match="--self-hosted: cannot derive the query URL"):
        store_url(vm, None, "--self-hosted")
    with pytest.raises(ConfigError, match="--self-hosted: expected an http"):
        store_url(vm, "vm:8428", "--self-hosted")


@pytest.mark.parametrize(
    ("text", "queries"),
    [
        pytest.param("up\n", ["up"], id="one"),
        pytest.param(
            "# GPU\n\n  avg(DCGM_FI_DEV_GPU_UTIL)  \n  # x\nsum(up) # PromQL comment\n",
            ["avg(DCGM_FI_DEV_GPU_UTIL)", "sum(up) # PromQL comment"],
            id="comments_and_blanks",
        ),
    ],
)
def test_parse_queries(text: str, queries: list[str]) -> None:
    assert parse_queries(text) == queries


def test_parse_queries_refuses_an_empty_file() -> None:
    with pytest.raises(ValueError, match="no query in the file"):
        parse_queries("# only a comment\n")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {"now": 1030.0, "range_s": 300.0, "step_s": 30.0, "end": None},
            Window(690_000, 990_000, 30_000),
            id="default_end_30s_ago_aligned_to_step",
        ),
        pytest.param(
            {"now": 1000.0, "range_s": 86400.0, "step_s": None, "end": 90000.0},
            Window(3_600_000, 90_000_000, 600_000),
            id="default_step_24h_is_10m_window_exactly_the_range",
        ),
        pytest.param(
            {"now": 1e9, "range_s": 3600.0, "step_s": None, "end": 7207.0},
            Window(3_600_000, 7_200_000, 15_000),
            id="default_step_1h_is_15s_not_14s",
        ),
        pytest.param(
            {"now": 1000.0, "range_s": 60.0, "step_s": None, "end": 500.5},
            Window(440_000, 500_000, 1_000),
            id="default_step_at_least_1s",
        ),
        pytest.param(
            {"now": 1000.0, "range_s": 86400.0 * 365 * 8, "step_s": None, "end": 1e10},
            Window(9_746_956_800_000, 9_999_936_000_000, 86_400_000 * 12),
            id="default_step_beyond_6h_whole_days",
        ),
    ],
)
def test_window(kwargs: dict[str, Any], expected: Window) -> None:
    assert window(**kwargs) == expected


def test_window_refuses_more_points_than_prometheus_answers() -> None:
    with pytest.raises(ConfigError, match=f"at most {MAX_POINTS:,}"):
        window(now=1e9, range_s=86400.0, step_s=1.0, end=None)


# --------------------------------------------------------------------------------------------
# the query (signed as sent) and the labels the workspace holds a series under


def test_query_form_is_in_sigv4_canonical_form() -> None:
    assert query_url("http://w/workspaces/ws-1") == "http://w/workspaces/ws-1/api/v1/query_range"
    raw = query_form('avg by (a) (m{x=~"a|b"}) / 2', Window(1_000, 2_500, 1_000)).decode()
    assert raw == canonical_query(raw)  # what the verifier computes is what was signed
    assert raw.startswith("end=2.5&query=avg%20by%20%28a%29") and raw.endswith("&step=1")


def test_expected_in_workspace_applies_the_rules_and_escaping() -> None:
    config = parse_config(
        """
remote_write:
  - name: workspace
    url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write
    sigv4: {region: us-east-1}
    write_relabel_configs:
      - {source_labels: [__name__], regex: "DCGM_FI_DEV_GPU_UTIL|gpu[.]temp", action: keep}
      - {regex: pod, action: labeldrop}
  - name: self-hosted
    url: http://prometheus:9090/api/v1/write
""",
        env={},
    )
    expected = expected_in_workspace(config, "workspace")
    assert expected((*UTIL, ("pod", "p"))) == UTIL
    assert expected(FB) is None  # not migrated
    assert expected(AVG) == AVG  # no name: an aggregation, as it is
    assert expected((("__name__", "gpu.temp"),)) == (("__name__", "gpu_temp"),)


NEWEST = {UTIL: {3_540_000: 1.0, 3_570_000: 1.0, 3_600_000: 1.0}}


@pytest.mark.parametrize(
    ("workspace", "hint"),
    [
        pytest.param({UTIL: {3_540_000: 1.0, 3_570_000: 1.0}}, True, id="newest_point_missing"),
        pytest.param({UTIL: {3_540_000: 1.0}}, True, id="newest_two_timestamps"),
        pytest.param({UTIL: {3_570_000: 1.0, 3_600_000: 1.0}}, False, id="an_older_point"),
        pytest.param({UTIL: {3_540_000: 1.0, 3_570_000: 1.0}, FB: {1: 1.0}}, False, id="missing"),
        pytest.param(NEWEST, False, id="equal"),
    ],
)
def test_a_store_behind_gets_a_hint(workspace: Matrix, hint: bool) -> None:
    r = QueryReport(
        query="DCGM_FI_DEV_GPU_UTIL",
        start=3000.0,
        end=3600.0,
        step=30.0,
        self_hosted=side_stats(FAST),
        workspace=side_stats(FAST),
        parity=compare(NEWEST, workspace, tolerance=0.0),
        urls={},
    )
    text = format_report([r], tolerance=0.0, summary="s")
    assert newest_only(r) == hint and ("give an --end further back" in text) == hint


def test_a_difference_names_its_time_in_rfc3339() -> None:
    parity = compare({UTIL: {1_796_576_685_250: 1.0}}, {UTIL: {}}, tolerance=0.0)
    (difference,) = parity.differences
    assert " at 2026-12-06T17:04:45.250Z: self-hosted 1, workspace absent" in difference.text()


def test_a_bad_query_is_not_also_counted_as_failed() -> None:
    summary = summary_line([report(BAD, BAD, None)], when="w")
    assert "bad query 1" in summary and "failed" not in summary
