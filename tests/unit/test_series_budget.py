"""The series budget of one destination (rwrouter.routing.budget): admitted, over, room freed."""

from __future__ import annotations

import pytest

from rwrouter.config import OnSeriesLimit
from rwrouter.metrics.audit import OTHER_NAMES, over_names
from rwrouter.routing import shard_hash
from rwrouter.routing.budget import SeriesBudget
from rwrouter.wire.accelerator import encode_labels
from tests.support.frames import frame_series, pack_frames

WINDOW = 800.0  # generations of 100 s


def labels(name: str, pod: str) -> bytes:
    return encode_labels((("__name__", name), ("pod", pod)))


def decide(budget: SeriesBudget, name: str, pod: str, now: float) -> bool:
    raw = labels(name, pod)
    return budget.decide(key=raw, name=name.encode(), hashed=shard_hash(raw), now=now)


def seen(budget: SeriesBudget, series: list[tuple[str, str]], now: float) -> None:
    """The destination's share of a request carrying ``series`` (one sample each)."""
    keys = [labels(name, pod) for name, pod in series]
    share = pack_frames([frame_series(k, b"\x12\x00") for k in keys], keys, [1] * len(keys))
    budget.observe(share.body, share.index, now)


def new(limit: int) -> SeriesBudget:
    return SeriesBudget(limit=limit, window=WINDOW, action=OnSeriesLimit.FALLBACK, now=0.0)


# (metric name, pod, time, admitted?) in order
Step = tuple[str, str, float, bool]


@pytest.mark.parametrize(
    ("limit", "steps"),
    [
        pytest.param(
            3,
            [("m", "a", 0, True), ("m", "b", 0, True), ("m", "c", 1, True), ("m", "d", 1, False)],
            id="admitted_up_to_the_limit",
        ),
        pytest.param(
            2,
            [("m", "a", 0, True), ("m", "b", 0, True), ("m", "c", 1, False), ("m", "a", 2, True)],
            id="a_series_it_has_keeps_flowing_past_the_limit",
        ),
        pytest.param(
            1,
            [("m", "a", 0, True), ("n", "a", 1, False), ("m", "a", 2, True)],
            id="another_name_is_another_series",
        ),
        pytest.param(
            1,
            [("m", "a", 0, True), ("m", "b", 10, False), ("m", "b", 950, True)],
            id="room_frees_when_a_series_leaves_the_window",
        ),
        pytest.param(
            1,
            [("m", "a", 0, True), ("m", "b", 10, False), ("m", "b", 850, False)],
            id="a_series_counts_up_to_one_generation_past_the_window",
        ),
        pytest.param(
            1,
            [("m", "a", 0, True), ("m", "a", 900, True), ("m", "b", 901, False)],
            id="admitted_again_after_leaving_when_there_is_room",
        ),
    ],
)
def test_decide(limit: int, steps: list[Step]) -> None:
    budget = new(limit)
    got = [decide(budget, name, pod, now) for name, pod, now, _ in steps]
    assert got == [admitted for *_, admitted in steps]


def test_series_sent_stay_active_and_keep_the_room() -> None:
    budget = new(2)
    assert decide(budget, "m", "a", 0) and decide(budget, "m", "b", 0)
    for now in range(100, 1700, 100):  # "a" sent every 100 s, "b" never again
        seen(budget, [("m", "a")], now)
    assert budget.active(1650) == 1
    assert decide(budget, "m", "c", 1650)  # b's place
    assert not decide(budget, "m", "d", 1650)
    assert decide(budget, "m", "a", 1650)


def test_over_series_are_listed_by_name_once_and_forgotten_when_room_frees() -> None:
    budget = new(1)
    assert decide(budget, "up", "a", 0)
    for pod in ("b", "c", "b"):
        assert not decide(budget, "gpu", pod, 1)
    assert not decide(budget, "temp", "a", 1)
    state = budget.state(1)
    assert (state.limit, state.active, state.limited) == (1, 1, 3)
    assert state.over == {"gpu": 2, "temp": 1}
    assert state.used == 1.0
    assert not budget.freed(500)  # still full
    assert budget.freed(950)  # "up" left: the over series are decided again
    assert budget.state(950).over == {}
    assert not budget.freed(950)
    assert budget.state(950).limited == 3  # a counter


@pytest.mark.parametrize(
    ("limit", "window"),
    [pytest.param(0, 10.0, id="no_limit"), pytest.param(5, 0.0, id="no_window")],
)
def test_bad_settings_raise(limit: int, window: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        SeriesBudget(limit=limit, window=window, action=OnSeriesLimit.DROP, now=0.0)


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        pytest.param({}, [], id="none"),
        pytest.param({"b": 2, "a": 2, "c": 5}, [("c", 5), ("a", 2), ("b", 2)], id="most_first"),
        pytest.param(
            {f"m{i:02}": 20 - i for i in range(12)},
            [(f"m{i:02}", 20 - i) for i in range(10)] + [(OTHER_NAMES, 9 + 10)],
            id="the_rest_summed",
        ),
    ],
)
def test_over_names_exposed(over: dict[str, int], expected: list[tuple[str, int]]) -> None:
    assert over_names(over) == expected
