"""The miss path's template shortcut when a destination escapes names: the compiled and the
pure ``signature`` give the same values and refuse non-legacy names alike, and routers with
and without the shortcut (compiled loop or pure loop) give the same entries, collisions
included (tests/unit/test_scan_paths.py style)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.reasons import DropReason
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing import Route, Router
from rwrouter.routing import router as router_module
from rwrouter.routing.escape import UNDERSCORES, is_legacy_label_name, is_legacy_metric_name
from rwrouter.routing.scan import scan_request_py, signature_py
from rwrouter.wire import codec
from tests.unit.test_scan_paths import (
    KEEP_CRITICAL,
    build_request,
    compiled,
    count_miss_calls,
    fleet_request,
    needs_accelerator,
    young_values,
)

try:
    from rwrouter.wire import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the build
    _scan = None

NAMES = ["__name__", "a.b", "a_b", "a:b", "0a", "job", "service.name", "service_name", "é"]
VALUES = ["up", "a.b", "a_b", "a:b", "1x", "http.server.duration", "http_server_duration", "é"]
WANTED = (b"__name__", b"job", b"service_name")


@needs_accelerator
@settings(max_examples=400, deadline=None)
@given(
    labels=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=5),
    shuffle=st.randoms(use_true_random=False),
    legacy=st.booleans(),
)
def test_signature_compiled_equals_pure_and_refuses_non_legacy_names(
    labels: dict[str, str], shuffle: random.Random, legacy: bool
) -> None:
    assert _scan is not None
    pairs = list(labels.items())
    shuffle.shuffle(pairs)
    raw = codec.encode_labels(tuple(pairs))
    values = _scan.signature(raw, WANTED, legacy)
    assert values == signature_py(raw, WANTED, legacy)
    assert _scan.signature(raw, WANTED, int(legacy)) == values  # not a bool: the reference
    if legacy and values is not None:  # canonical and legacy: no scheme changes the set
        decoded = codec.decode_labels(raw)
        assert all(is_legacy_label_name(name) for name, _ in decoded)
        assert is_legacy_metric_name(dict(decoded).get("__name__", "x"))
    if not legacy:
        assert values == _scan.signature(raw, WANTED)


ESCAPING_ROUTES = [
    Route("ws", parse_relabel_configs(KEEP_CRITICAL, "t"), escaping=UNDERSCORES),
    Route(
        "ws2",
        parse_relabel_configs([{"action": "drop", "source_labels": ["job"], "regex": "dcgm"}], "t"),
        escaping=UNDERSCORES,
    ),
    Route("self"),
    Route("rest", fallback=True),
]

series_strategy = st.fixed_dictionaries(
    {
        "name": st.sampled_from([*VALUES, "DCGM_FI_DEV_GPU_UTIL", "DCGM.FI.DEV.GPU.UTIL"]),
        "labels": st.dictionaries(st.sampled_from(NAMES[1:]), st.sampled_from(VALUES), max_size=3),
        "shuffle": st.randoms(use_true_random=False),
        "samples": st.just([(1.0, 1000)]),
        "exemplars": st.just(0),
        "histograms": st.just(0),
    }
)


def _pair() -> tuple[Router, Router]:
    shortcut = Router(global_rules=(), routes=ESCAPING_ROUTES)
    full = Router(global_rules=(), routes=ESCAPING_ROUTES)
    assert shortcut._signature_names is not None  # filter-only rules: the shortcut is on
    full._signature_names = None
    return shortcut, full


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(st.lists(series_strategy, min_size=1, max_size=6), min_size=1, max_size=3))
def test_shortcut_with_escaping_gives_the_full_paths_entries(
    requests: list[list[dict[str, Any]]],
) -> None:
    shortcut, full = _pair()
    for now, series in enumerate(requests):
        data = build_request(series)
        assert shortcut.route(data, now=float(now)) == full.route(data, now=float(now))
        assert dict(shortcut._young.items()) == dict(full._young.items())
    assert shortcut.take_collisions() == full.take_collisions()


@needs_accelerator
@pytest.mark.parametrize("loop", [compiled, scan_request_py], ids=["compiled", "pure"])
def test_a_legacy_twin_after_a_claim_goes_the_full_way(
    loop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_module, "scan_request", loop)
    r = Router(global_rules=(), routes=[Route("ws", escaping=UNDERSCORES), Route("self")])
    legacy = (("__name__", "http_server_duration"), ("job", "a"))
    other = (("__name__", "http_server_duration"), ("job", "b"))
    r.route(build_request([_series(other)]))  # a template for http_server_duration
    assert r._templates
    r.route(build_request([_series((("__name__", "http.server.duration"), ("job", "a")))]))
    assert not r._templates and r._no_template  # the claim took the name's template away
    out = r.route(build_request([_series(legacy), _series((*other[:1], ("job", "c")))]))
    assert out.dropped == {(0, DropReason.NAME_COLLISION): 1}
    assert out.shares[0].series == 1 and out.shares[1].series == 2


class _InOrder(random.Random):
    def shuffle(self, x: Any) -> None:
        x.sort()  # canonical: sorted by name


def _series(labels: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return {
        "name": dict(labels)["__name__"],
        "labels": dict(labels[1:]),
        "shuffle": _InOrder(),
        "samples": [(1.0, 1000)],
        "exemplars": 0,
        "histograms": 0,
    }


@needs_accelerator
def test_compiled_loop_with_escaping_applies_templates_itself_on_legacy_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(router_module, "scan_request", compiled)  # (whatever the environment says)
    data = fleet_request(6, 2)  # every name legacy: escaping changes nothing
    shortcut, full = _pair()
    calls = count_miss_calls(shortcut)
    assert shortcut.route(data) == full.route(data)
    assert (shortcut.misses, shortcut.hits) == (full.misses, full.hits)
    assert len(calls) <= len(shortcut._templates) + 1 < shortcut.misses  # the rest: in C
    assert young_values(shortcut) == young_values(full)
