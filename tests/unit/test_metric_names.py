"""The status page's metric names per destination: metric_name_samples (one share's samples per
name, checked against decoding every frame) and MetricNameShares (a sampled, weighted mean)."""

from __future__ import annotations

import pytest

from rwrouter.metrics.names import MetricNameShares
from rwrouter.routing import Route, Router
from rwrouter.wire import decode_labels, decompress
from rwrouter.wire.index import Frames, metric_name_samples
from tests.support.frames import parse_write_request
from tests.support.series import Series, build_body


def _routed(series: list[Series]) -> Frames:
    body = decompress(build_body(series), max_decoded_bytes=1 << 24)
    return Router(global_rules=(), routes=[Route(name="d")]).route(body).shares[0]


def _reference(routed: Frames, max_frames: int) -> dict[str, int]:
    """Decode every frame: the count metric_name_samples must give."""
    out: dict[str, int] = {}
    for raw in parse_write_request(routed.body).series[:max_frames]:
        name = dict(decode_labels(raw.labels)).get("__name__", "")
        out[name] = out.get(name, 0) + raw.samples
    return out


CASES = [
    # id, series (labels, samples), max_frames, expected samples per name
    ("name_first", [((("__name__", "m1"), ("a", "1")), 2)], 100, {"m1": 2}),
    (
        "name_after_upper_case_labels",
        [((("Hostname", "n"), ("UUID", "u"), ("__name__", "DCGM_X")), 1)],
        100,
        {"DCGM_X": 1},
    ),
    (
        "several_names",
        [
            ((("__name__", "a"),), 1),
            ((("__name__", "b"), ("x", "1")), 3),
            ((("__name__", "a"), ("x", "2")), 1),
        ],
        100,
        {"a": 2, "b": 3},
    ),
    (
        "value_looks_like_a_name_label",
        [((("__name__", "real"), ("z", "\n\b__name__\x12")), 1)],
        100,
        {"real": 1},
    ),
    (
        "only_the_first_frames",
        [((("__name__", "a"), ("i", str(i))), 1) for i in range(5)],
        3,
        {"a": 3},
    ),
    ("unicode_name", [((("__name__", "métrique.ü"),), 1)], 100, {"métrique.ü": 1}),
]


@pytest.mark.parametrize(
    ("series", "max_frames", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_metric_name_samples_matches_decoding_every_frame(
    series: list[tuple[tuple[tuple[str, str], ...], int]],
    max_frames: int,
    expected: dict[str, int],
) -> None:
    routed = _routed(
        [Series(labels, tuple((1000 + i, 1.0) for i in range(n))) for labels, n in series]
    )
    assert metric_name_samples(routed.body, routed.index, max_frames=max_frames) == expected
    assert expected == _reference(routed, max_frames)


def test_shares_are_a_weighted_mean_of_the_looks_taken_once_an_interval() -> None:
    shares = MetricNameShares(interval=1.0, weight=0.25)
    a = _routed([Series((("__name__", "a"),), ((1, 1.0),))])
    b = _routed([Series((("__name__", "b"),), ((1, 1.0),))])
    assert shares.due(10.0) and not shares.due(10.5) and shares.due(11.0)
    shares.observe(["d"], [a])
    assert shares.top() == {"d": [("a", 1.0)]}  # the first look counts whole
    shares.observe(["d"], [b])
    assert shares.top() == {"d": [("a", 0.75), ("b", 0.25)]}
    assert shares.top(limit=1) == {"d": [("a", 0.75)]}
    shares.forget(["other"])
    assert shares.top() == {}


def test_a_destination_that_got_nothing_keeps_its_last_shares() -> None:
    shares = MetricNameShares(weight=1.0)
    shares.observe(["d"], [_routed([Series((("__name__", "a"),), ((1, 1.0),))])])
    shares.observe(["d"], [_routed([Series((("x", "no name"),), ((1, 1.0),))])])
    assert shares.top() == {"d": [("a", 1.0)]}  # the invalid series was routed nowhere
