"""A store's answer to a range query, read strictly (pure; ``rwrouter compare``).

:func:`parse_matrix` turns the Prometheus HTTP API's JSON for ``GET /api/v1/query_range``
(``{"status": "success", "data": {"resultType": "matrix", "result": [...]}}``; the managed
workspace answers the same API) into series by label set, each a mapping of timestamps (ms
since epoch) to values (a float, or a native histogram as :class:`Histogram`). Anything
that is not that format raises :class:`~rwrouter.errors.AnswerError` with a one-line
reason: the command reports the run as failed, it never compares half-read answers.

The format, as Prometheus writes it (HTTP API docs, "Expression query result formats",
"Range vectors", "Native histograms"):

- ``metric``: an object of label name to label value, both strings of valid UTF-8 (no
  lone surrogate), names not empty;
  no two series with the same labels;
- ``values``: ``[<unix seconds>, "<value>"]`` pairs: the timestamp a JSON number (not a
  boolean, finite, within int64 milliseconds), the value a string: a decimal number, or
  ``NaN``, ``+Inf``, ``-Inf`` (JSON has no such numbers); a number too large for a float64
  is refused, not read as an infinity;
- ``histograms``: ``[<unix seconds>, {"count": "<n>", "sum": "<s>", "buckets": [[<boundary
  rule>, "<left>", "<right>", "<count>"], ...]}]``, the boundary rule an integer 0-3
  (0 open left, 1 open right, 2 open both, 3 closed both), the rest strings as values are;
- at most one point per timestamp in a series (``values`` and ``histograms`` together).

Stale markers never appear in query results (PromQL drops them), so a ``NaN`` here is a
value, equal to another ``NaN`` for parity.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rwrouter.errors import AnswerError

__all__ = ["AnswerError", "Histogram", "Labels", "Matrix", "Value", "parse_matrix"]

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


@dataclass(frozen=True, slots=True)
class Histogram:
    """A native histogram point: ``count``, ``sum`` and its buckets, each ``(boundary rule,
    left, right, count)`` with the boundaries as numbers (Prometheus HTTP API, "Native
    histograms")."""

    count: float
    sum: float
    buckets: tuple[tuple[int, float, float, float], ...]


Value = float | Histogram
Matrix = dict[Labels, dict[int, Value]]  # label set -> timestamp (ms) -> value

#: A sample value as text: a decimal number (Go's strconv.FormatFloat, 'f' or 'e'), or one of
#: the three special values Prometheus writes (jsonutil.MarshalFloat).
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}
_MAX_MS = 2**63 - 1  # Prometheus timestamps are int64 milliseconds
_MAX_TEXT = 400  # characters of a value's text: float64's longest 'f' form is ~330


def parse_matrix(document: object) -> Matrix:
    """The series of a ``query_range`` answer (the decoded JSON), by label set (sorted pairs).

    Raises :class:`AnswerError` for an error answer (``status`` not ``success``: its
    ``errorType`` and ``error``), a result that is not a ``matrix``, or one that breaks the
    format (the module's list: the reason names the first thing wrong).
    """
    if not isinstance(document, Mapping):
        raise AnswerError("the answer is not a JSON object")
    if document.get("status") != "success":
        kind = _short(document.get("errorType") or "error")
        raise AnswerError(
            f"{kind}: {_short(document.get('error') or document.get('message') or '?')}"
        )
    data = document.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "matrix":
        got = data.get("resultType") if isinstance(data, Mapping) else None
        raise AnswerError(f"expected a matrix result, got {_repr(got)}")
    matrix: Matrix = {}
    for entry in _list(data.get("result"), "data.result"):
        if not isinstance(entry, Mapping):
            raise AnswerError("a result entry is not an object")
        labels = _labels(entry.get("metric"))
        if labels in matrix:
            raise AnswerError(f"two series with the same labels {_repr(dict(labels))}")
        matrix[labels] = _points(entry)
    return matrix


def _short(value: object) -> str:
    """``value`` for a one-line reason: its repr (a string's too), cut at 120 characters."""
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."


def _repr(value: object) -> str:
    """``value``'s repr for a one-line reason (:func:`_short`)."""
    return _short(repr(value))


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AnswerError(f"{where} is not a list")
    return value


def _labels(metric: object) -> Labels:
    if not isinstance(metric, Mapping):
        raise AnswerError("a result entry has no metric object")
    for name, value in metric.items():
        if not isinstance(name, str) or not name:
            raise AnswerError("a series has an empty label name")
        if not isinstance(value, str):
            raise AnswerError(
                f"label {_repr(name)} has a value that is not a string: {_repr(value)}"
            )
        try:  # JSON's \ud800 escapes decode to lone surrogates, which no label holds
            name.encode()
            value.encode()
        except UnicodeEncodeError:
            raise AnswerError(f"label {_repr(name)} is not valid UTF-8: {_repr(value)}") from None
    return tuple(sorted(metric.items()))


def _points(entry: Mapping[str, Any]) -> dict[int, Value]:
    points: dict[int, Value] = {}
    pairs: list[tuple[int, Value]] = [
        (ts, _float(raw, "a sample value")) for ts, raw in _pairs(entry, "values")
    ]
    pairs += [(ts, _histogram(raw)) for ts, raw in _pairs(entry, "histograms")]
    for ts, value in pairs:
        if ts in points:
            raise AnswerError(f"two points of one series at the same timestamp {ts / 1000:g}")
        points[ts] = value
    return points


def _pairs(entry: Mapping[str, Any], key: str) -> Iterable[tuple[int, object]]:
    for pair in _list(entry.get(key), key):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise AnswerError(f"a point of {key} is not [<unix seconds>, <value>]")
        yield _timestamp_ms(pair[0], key), pair[1]


def _timestamp_ms(seconds: object, key: str) -> int:
    """A point's timestamp (JSON number of seconds) in ms since epoch, rounded."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise AnswerError(f"a timestamp of {key} is not a number: {_repr(seconds)}")
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise AnswerError(f"a timestamp of {key} is not finite: {_repr(seconds)}")
    if abs(seconds) * 1000 > _MAX_MS:
        raise AnswerError(f"a timestamp of {key} is out of range: {_repr(seconds)}")
    return round(seconds * 1000)


def _float(raw: object, what: str) -> float:
    """A value written as Prometheus writes one: a string (module docstring)."""
    if not isinstance(raw, str):
        raise AnswerError(f"{what} is not a string: {_repr(raw)}")
    if raw in _SPECIAL:
        return _SPECIAL[raw]
    if len(raw) > _MAX_TEXT or not _NUMBER.fullmatch(raw):
        raise AnswerError(f"{what} is not a number: {_repr(raw)}")
    value = float(raw)
    if math.isinf(value):
        raise AnswerError(f"{what} is too large for a float64: {_repr(raw)}")
    return value


def _histogram(raw: object) -> Histogram:
    if not isinstance(raw, Mapping):
        raise AnswerError("a histogram point is not an object")
    buckets = []
    for bucket in _list(raw.get("buckets"), "buckets"):
        if not (isinstance(bucket, list) and len(bucket) == 4):
            raise AnswerError("a histogram bucket is not [rule, left, right, count]")
        rule, left, right, count = bucket
        if isinstance(rule, bool) or not isinstance(rule, int) or not 0 <= rule <= 3:
            raise AnswerError(f"a histogram bucket's boundary rule is not 0-3: {_repr(rule)}")
        bounds = _float(left, "a bucket boundary"), _float(right, "a bucket boundary")
        if math.isnan(bounds[0]) or math.isnan(bounds[1]):
            raise AnswerError("a histogram bucket boundary is NaN")
        buckets.append((rule, *bounds, _float(count, "a bucket count")))
    count = _float(raw.get("count"), "a histogram count")
    return Histogram(count, _float(raw.get("sum"), "a histogram sum"), tuple(buckets))
