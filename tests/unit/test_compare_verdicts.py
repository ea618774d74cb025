"""``rwrouter compare``: answers read strictly (every malformed one an AnswerError with a
one-line reason, never another exception)."""

from __future__ import annotations

import json
import math

import pytest

from rwrouter.compare.parity import AnswerError, close, parse_matrix


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
