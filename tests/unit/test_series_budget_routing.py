"""A router with series budgets (rwrouter.routing.budgeted): a new series past a destination's
series_limit goes to the fallback destination or is dropped, decided once per label set and
cached; the compiled loop and the pure one agree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rwrouter.config import OnSeriesLimit
from rwrouter.reasons import DropReason
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing import Route, RoutedRequest
from rwrouter.routing import router as router_module
from rwrouter.routing import scan as scan_module
from rwrouter.routing.budget import SeriesBudget
from rwrouter.routing.budgeted import BudgetedRouter
from rwrouter.routing.cache import unpack_entry
from rwrouter.routing.outcome import REASONS
from rwrouter.routing.scan import scan_request_py, scan_rw2_py
from rwrouter.wire import decompress, remote_pb2, write_v2_pb2
from rwrouter.wire.accelerator import ACCELERATED, encode_labels
from rwrouter.wire.index import INDEX, label_name, named_frames_list, named_frames_py
from tests.support.series import Series, build_body

WINDOW = 800.0  # generations of 100 s
KEEP_GPU = parse_relabel_configs(
    [{"source_labels": ["__name__"], "regex": "gpu_.*", "action": "keep"}], "test"
)
DROP = OnSeriesLimit.DROP
FALLBACK = OnSeriesLimit.FALLBACK


@pytest.fixture(params=["compiled", "pure"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "compiled" and not ACCELERATED:
        pytest.skip("the accelerator is not built")
    if request.param == "pure":
        monkeypatch.setattr(router_module, "scan_request", scan_request_py)
        monkeypatch.setattr(router_module, "scan_rw2", scan_rw2_py)
        monkeypatch.setattr(scan_module, "scan_request", scan_request_py)
        monkeypatch.setattr(router_module, "_route_labels", None)
    yield request.param


def request(*names: str) -> bytes:
    """A decompressed write request, one series (one sample) per ``name:pod``."""
    series = [
        Series((("__name__", n.split(":")[0]), ("pod", n.split(":")[1])), [(1000, 1.0)])
        for n in names
    ]
    return decompress(build_body(series), max_decoded_bytes=1 << 24)


def got(routed: RoutedRequest) -> list[list[str]]:
    """Per destination, the ``name:pod`` of the series it gets."""
    out = []
    for share in routed.shares:
        req = remote_pb2.WriteRequest()
        req.ParseFromString(share.body)
        out.append([":".join(lab.value for lab in ts.labels) for ts in req.timeseries])
    return out


def router(limit: int, action: OnSeriesLimit, *, other: bool = False) -> BudgetedRouter:
    """``ws`` (GPU series, the budget), optionally ``other`` (every series), ``store``
    (fallback)."""
    routes = [Route(name="ws", rules=KEEP_GPU)]
    if other:
        routes.append(Route(name="other"))
    routes.append(Route(name="store", fallback=True))
    budget = SeriesBudget(limit=limit, window=WINDOW, action=action, now=0.0)
    return BudgetedRouter(budgets={"ws": budget}, global_rules=(), routes=routes)


# (series sent, time) per request, then per destination what the last request sent it
Case = tuple[int, OnSeriesLimit, bool, list[tuple[list[str], float]], list[list[str]]]
CASES = [
    pytest.param(
        2,
        FALLBACK,
        False,
        [(["gpu_a:1", "gpu_a:2", "gpu_a:3", "cpu:1"], 0)],
        [["gpu_a:1", "gpu_a:2"], ["gpu_a:3", "cpu:1"]],
        id="over_to_the_fallback",
    ),
    pytest.param(
        2,
        DROP,
        False,
        [(["gpu_a:1", "gpu_a:2", "gpu_a:3", "cpu:1"], 0)],
        [["gpu_a:1", "gpu_a:2"], ["cpu:1"]],
        id="over_dropped",
    ),
    pytest.param(
        1,
        FALLBACK,
        True,
        [(["gpu_a:1", "gpu_a:2"], 0)],
        [["gpu_a:1"], ["gpu_a:1", "gpu_a:2"], []],
        id="another_destination_keeps_it",
    ),
    pytest.param(
        2,
        FALLBACK,
        False,
        [(["gpu_a:1", "gpu_a:2"], 0), (["gpu_a:3", "gpu_a:1", "gpu_a:2"], 10)],
        [["gpu_a:1", "gpu_a:2"], ["gpu_a:3"]],
        id="series_it_has_keep_flowing",
    ),
    pytest.param(
        1,
        FALLBACK,
        False,
        [(["gpu_a:1", "gpu_a:2"], 0), (["gpu_a:2"], 10), (["gpu_a:2"], 950)],
        [["gpu_a:2"], []],
        id="room_freed_the_cached_over_series_is_decided_again",
    ),
    pytest.param(
        1,
        FALLBACK,
        False,
        [(["gpu_a:1", "gpu_a:2"], 0)]
        + [(["gpu_a:1", "gpu_a:2"], t) for t in range(100, 1700, 100)],
        [["gpu_a:1"], ["gpu_a:2"]],
        id="series_sent_keep_their_room",
    ),
]


@pytest.mark.parametrize(("limit", "action", "other", "requests", "expected"), CASES)
def test_routing_with_a_budget(
    path: str,
    limit: int,
    action: OnSeriesLimit,
    other: bool,
    requests: list[tuple[list[str], float]],
    expected: list[list[str]],
) -> None:
    r = router(limit, action, other=other)
    routed = None
    for names, now in requests:
        routed = r.route(request(*names), now=now)
    assert routed is not None
    assert got(routed) == expected


@pytest.mark.parametrize("action", [FALLBACK, DROP], ids=["fallback", "drop"])
def test_over_series_are_counted_by_name_and_their_samples_dropped_there(
    path: str, action: OnSeriesLimit
) -> None:
    r = router(1, action)
    first = r.route(request("gpu_a:1", "gpu_a:2", "gpu_b:1"), now=0)
    again = r.route(request("gpu_a:1", "gpu_a:2", "gpu_b:1"), now=1)
    for routed in (first, again):  # the second from the cache: the same outcome
        assert routed.dropped == {(0, DropReason.SERIES_LIMIT): 2}
    assert again.shares[0].series == 1
    state = r.budget_states(1)["ws"]
    assert (state.active, state.limit, state.over, state.limited) == (
        1,
        1,
        {"gpu_a": 1, "gpu_b": 1},
        2,
    )
    assert r.hits == 3  # decided once per label set: hits stay hits


def test_a_reload_keeps_the_counts_of_the_same_window(path: str) -> None:
    old = router(2, FALLBACK)
    old.route(request("gpu_a:1", "gpu_a:2"), now=0)
    new = router(3, DROP)
    new.adopt(old)
    routed = new.route(request("gpu_a:9", "gpu_a:8", "gpu_a:1"), now=1)
    assert got(routed) == [["gpu_a:9", "gpu_a:1"], []]
    assert new.budget_states(1)["ws"].action == DROP


def test_a_budget_for_an_unknown_destination_is_refused() -> None:
    budget = SeriesBudget(limit=1, window=WINDOW, action=DROP, now=0.0)
    with pytest.raises(ValueError, match="unknown destination 'nope'"):
        BudgetedRouter(budgets={"nope": budget}, global_rules=(), routes=[Route(name="ws")])


def request_rw2(*names: str) -> bytes:
    """:func:`request` as a remote write 2.0 request."""
    req = write_v2_pb2.Request()
    symbols = [""]
    for n in names:
        ts = req.timeseries.add()
        for text in ("__name__", n.split(":")[0], "pod", n.split(":")[1]):
            if text not in symbols:
                symbols.append(text)
            ts.labels_refs.append(symbols.index(text))
        ts.samples.add(value=1.0, timestamp=1000)
    req.symbols.extend(symbols)
    return bytes(req.SerializeToString())


def test_remote_write_2_is_decided_the_same_and_again_when_room_frees(path: str) -> None:
    r = router(1, FALLBACK)
    steps = [(["gpu_a:1", "gpu_a:2"], 0.0), (["gpu_a:2"], 10.0), (["gpu_a:2"], 950.0)]
    expected = [
        [["gpu_a:1"], ["gpu_a:2"]],
        [[], ["gpu_a:2"]],  # from the cache (both of the compiled loop's keys)
        [["gpu_a:2"], []],
    ]
    for (names, now), want in zip(steps, expected, strict=True):
        assert got(r.route(request_rw2(*names), now=now, rw2=True)) == want


# -- the compiled miss path decides the same (issue 16: the hot path stays compiled) ----------

ADD_CLUSTER = parse_relabel_configs(
    [
        {"source_labels": ["__name__"], "regex": "gpu_.*", "action": "keep"},
        {"target_label": "cluster", "replacement": "c9"},
    ],
    "test",
)


def fleet(pods: range) -> list[str]:
    """``name:pod`` of 3 GPU metric names per pod (the budget's) and one CPU one."""
    return [f"{name}:{pod}" for pod in pods for name in ("gpu_a", "gpu_b", "gpu_c", "cpu")]


def spied(r: BudgetedRouter) -> tuple[list[bytes], list[bytes]]:
    """The label sets ``r`` reviews (its budget's decision) and those its Python ``_miss``
    routes, from now on (both lists grow; the calls are still answered)."""
    reviewed: list[bytes] = []
    missed: list[bytes] = []
    assert r._review is not None
    mask, review = r._review
    python_miss = r._miss

    def counted_review(key: bytes, entry: bytes) -> bytes:
        reviewed.append(key)
        return review(key, entry)

    def counted_miss(raw_labels: bytes) -> bytes:
        missed.append(raw_labels)
        return python_miss(raw_labels)

    r._review = (mask, counted_review)
    r._miss = counted_miss  # type: ignore[method-assign]
    return reviewed, missed


def run_steps(
    rules: tuple[Any, ...], limit: int, action: OnSeriesLimit, other: bool, rw2: bool
) -> tuple[list[RoutedRequest], list[Any], int, int]:
    """Three requests through a new router (ws with ``rules`` and the budget, optionally
    ``other``, the fallback ``store``): 20 pods at 0 s, those and 10 more at 10 s, then after
    the window 20 other pods; the results, the budget's state after each, and how many label
    sets were reviewed and missed in Python."""
    routes = [Route(name="ws", rules=rules)]
    if other:
        routes.append(Route(name="other"))
    routes.append(Route(name="store", fallback=True))
    budget = SeriesBudget(limit=limit, window=WINDOW, action=action, now=0.0)
    r = BudgetedRouter(budgets={"ws": budget}, global_rules=(), routes=routes)
    reviewed, missed = spied(r)
    outs, states = [], []
    for pods, now in ((range(20), 0.0), (range(30), 10.0), (range(100, 120), 950.0)):
        names = fleet(pods)
        data = request_rw2(*names) if rw2 else request(*names)
        outs.append(r.route(data, now=now, rw2=rw2))
        states.append(r.budget_states(now)["ws"])
    return outs, states, len(reviewed), len(missed)


EQUIVALENCE = [
    pytest.param(KEEP_GPU, 40, FALLBACK, False, False, id="rw1-template-over-fallback"),
    pytest.param(KEEP_GPU, 40, DROP, False, False, id="rw1-template-over-drop"),
    pytest.param(KEEP_GPU, 1000, FALLBACK, False, False, id="rw1-template-under"),
    pytest.param(KEEP_GPU, 40, FALLBACK, True, False, id="rw1-template-another-keeps"),
    pytest.param(ADD_CLUSTER, 40, FALLBACK, False, False, id="rw1-plan-over-fallback"),
    pytest.param(ADD_CLUSTER, 40, DROP, False, False, id="rw1-plan-over-drop"),
    pytest.param(ADD_CLUSTER, 1000, DROP, False, False, id="rw1-plan-under"),
    pytest.param(KEEP_GPU, 40, FALLBACK, False, True, id="rw2-template-over-fallback"),
    pytest.param(KEEP_GPU, 40, DROP, False, True, id="rw2-template-over-drop"),
    pytest.param(ADD_CLUSTER, 40, FALLBACK, False, True, id="rw2-plan-over-fallback"),
    pytest.param(ADD_CLUSTER, 1000, FALLBACK, False, True, id="rw2-plan-under"),
]


@pytest.mark.skipif(not ACCELERATED, reason="the accelerator is not built")
@pytest.mark.parametrize(("rules", "limit", "action", "other", "rw2"), EQUIVALENCE)
def test_compiled_misses_decide_as_the_pure_path(
    rules: tuple[Any, ...],
    limit: int,
    action: OnSeriesLimit,
    other: bool,
    rw2: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled loop routes the misses itself (template shortcut or plan) and asks the
    budget only about the label sets ws keeps: the same requests, budget and counters as the
    pure path, which routes every miss in Python."""
    fast, fast_states, fast_reviewed, fast_missed = run_steps(rules, limit, action, other, rw2)
    with monkeypatch.context() as m:
        m.setattr(router_module, "scan_request", scan_request_py)
        m.setattr(router_module, "scan_rw2", scan_rw2_py)
        m.setattr(scan_module, "scan_request", scan_request_py)
        m.setattr(router_module, "_route_labels", None)
        pure, pure_states, pure_reviewed, pure_missed = run_steps(rules, limit, action, other, rw2)
    assert fast == pure
    assert fast_states == pure_states
    # Reviewed: each label set ws keeps, once (then cached): 60 + 30, then 60 after the window
    assert fast_reviewed == pure_reviewed == 60 + 30 + 60
    assert pure_missed == 4 * (20 + 10 + 20)  # every miss in Python
    assert fast_missed <= 4 * 3  # compiled: at most the first of each template, per request
    first, second, third = fast
    kept = min(limit, 60)
    assert first.shares[0].series == kept
    over = 60 - kept
    assert first.dropped.get((0, DropReason.SERIES_LIMIT), 0) == over
    store = first.shares[-1].series
    assert store == (0 if other else 20 + (over if action == FALLBACK else 0))
    assert second.shares[0].series == min(limit, 90)
    assert third.shares[0].series == min(limit, 60)  # room freed: decided again
    assert fast_states[0].limited == over


def labels_of(name: str) -> tuple[tuple[str, str], ...]:
    """The sorted labels of a ``name:pod`` series."""
    metric, pod = name.split(":")
    return (("__name__", metric), ("pod", pod))


@pytest.mark.parametrize(
    ("action", "second"),
    [
        pytest.param(FALLBACK, (DropReason.SERIES_LIMIT, "store"), id="fallback"),
        pytest.param(DROP, (DropReason.SERIES_LIMIT, DropReason.SERIES_LIMIT), id="drop"),
    ],
)
def test_the_relabel_tool_path_decides_per_series(
    path: str, action: OnSeriesLimit, second: tuple[object, object]
) -> None:
    """Router.route_series (what `rwrouter relabel` shows) asks the budget as a request does:
    two series of one template (same metric name), a budget of 1: the first is kept, the
    second is over."""
    r = router(1, action)
    first = r.route_series(labels_of("gpu_a:1"))
    over = r.route_series(labels_of("gpu_a:2"))
    assert isinstance(first[0], bytes) and first[1] is None
    assert over[0] == second[0]
    if second[1] == "store":
        assert isinstance(over[1], bytes)
    else:
        assert over[1] is None  # dropped: the fallback does not take it
    assert r.route_series(labels_of("gpu_a:2")) == over  # cached


def test_a_collision_recheck_is_decided_by_the_budget(path: str) -> None:
    """Router._route_again (a collision loser routed again after a rotation) caches the
    budget's decision, not the rules' outcome alone."""
    r = router(1, FALLBACK)
    r.route(request("gpu_a:1"), now=0)
    key = encode_labels(labels_of("gpu_a:2"))
    r._route_again(key)
    entry = r._young.get(key)
    assert entry is not None
    assert unpack_entry(key, entry)[0] == REASONS.index(DropReason.SERIES_LIMIT)
    assert isinstance(unpack_entry(key, entry)[1], tuple)  # the fallback takes it


@pytest.mark.parametrize(
    ("labels", "name"),
    [
        pytest.param((("__name__", "gpu_util"), ("gpu", "0")), b"gpu_util", id="first"),
        pytest.param((("A", "x"), ("__name__", "m")), b"m", id="after_another_label"),
        pytest.param((("gpu", "0"),), b"", id="no_name"),
        pytest.param((("__name__", ""),), b"", id="empty_name"),
        pytest.param((("__name__", "é" * 100),), "é".encode() * 100, id="long_utf8_name"),
        pytest.param(
            (("A", "\n\x08__name__\x12\x04fake"), ("__name__", "real")),
            b"real",
            id="a_value_holding_the_name_field_bytes",
        ),
    ],
)
def test_label_name_is_the_audits_name_of_the_encoded_labels(
    labels: tuple[tuple[str, str], ...], name: bytes
) -> None:
    encoded = encode_labels(labels)
    assert label_name(encoded) == name
    # The audit's count finds the same name in a frame of them (compiled and reference).
    frame = b"\x0a" + bytes([len(encoded)]) + encoded if len(encoded) < 128 else None
    if frame is not None:
        index = INDEX.pack(len(frame), 1, 7)
        assert named_frames_list(frame, index) == [(name, 1, 7)]
        assert list(named_frames_py(frame, index)) == [(name, 1, 7)]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x0a", id="length_missing"),
        pytest.param(b"\x0a\x40\x0a\x08__name__", id="label_cut_short"),
        pytest.param(b"\x0a\x0c\x0a\x08__name__\x12\x7f", id="value_past_its_label"),
        pytest.param(b"\x0a\xff\xff\xff\xff\xff\xff", id="length_never_ends"),
    ],
)
def test_label_name_of_malformed_labels_is_empty(data: bytes) -> None:

    assert label_name(data) == b""
