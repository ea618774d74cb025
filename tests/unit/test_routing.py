"""Routing (rwrouter.routing): global rules, per-destination copies, fallback, drop counts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from rwrouter.errors import DecodeError
from rwrouter.reasons import DropReason
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing import Route, RoutedRequest, Router, shard_hash
from rwrouter.wire import encode_labels, remote_pb2, types_pb2
from tests.support.frames import parse_write_request

Labels = Mapping[str, str]


def rules(raw: list[dict[str, Any]] | None) -> tuple[Any, ...]:
    return parse_relabel_configs(raw, "test")


def route(name: str, raw: list[dict[str, Any]] | None = None, **kw: Any) -> Route:
    return Route(name=name, rules=rules(raw), **kw)


def request(
    series: Sequence[Labels | tuple[Labels, int, int, int]] = (),
    metadata: Sequence[str] = (),
) -> bytes:
    """A decompressed write request; a series is its labels (one sample) or (labels, samples,
    exemplars, histograms). Labels are sent in the given order."""
    req = remote_pb2.WriteRequest()
    for item in series:
        labels, ns, ne, nh = item if isinstance(item, tuple) else (item, 1, 0, 0)
        ts = req.timeseries.add()
        for name, value in labels.items():
            ts.labels.add(name=name, value=value)
        for i in range(ns):
            ts.samples.add(value=float(i), timestamp=1000 + i)
        for i in range(ne):
            ex = ts.exemplars.add(value=float(i), timestamp=1000 + i)
            ex.labels.add(name="trace_id", value=f"t{i}")
        for i in range(nh):
            ts.histograms.add(count_int=i, sum=1.0, timestamp=1000 + i)
    for family in metadata:
        req.metadata.add(type=types_pb2.MetricMetadata.GAUGE, metric_family_name=family, help="h")
    return bytes(req.SerializeToString())


def sent(out: RoutedRequest, index: int) -> list[dict[str, str]]:
    """The label sets sent to destination ``index`` (decoded with protobuf)."""
    req = remote_pb2.WriteRequest()
    req.ParseFromString(b"".join(out.shares[index].frames))
    return [{lab.name: lab.value for lab in ts.labels} for ts in req.timeseries]


def sent_series(out: RoutedRequest, index: int) -> list[types_pb2.TimeSeries]:
    req = remote_pb2.WriteRequest()
    req.ParseFromString(b"".join(out.shares[index].frames))
    return list(req.timeseries)


def sent_metadata(out: RoutedRequest, index: int) -> list[str]:
    req = remote_pb2.WriteRequest()
    req.ParseFromString(b"".join(out.metadata[index]))
    return [m.metric_family_name for m in req.metadata]


GPU = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "job": "dcgm"}
NODE = {"__name__": "node_load1", "instance": "n1", "job": "node"}
APP = {"__name__": "http_requests_total", "job": "api", "pod": "p1"}
KEEP_GPU = [{"action": "keep", "source_labels": ["__name__"], "regex": "DCGM_.*"}]
KEEP_NODE = [{"action": "keep", "source_labels": ["job"], "regex": "node"}]


# ---------------------------------------------------------------------------------------------
# Per-destination copies


def test_one_destinations_rules_never_leak_into_another() -> None:
    router = Router(
        global_rules=(),
        routes=[
            route(
                "a",
                [
                    {"target_label": "job", "replacement": "rewritten"},
                    {"action": "labeldrop", "regex": "gpu"},
                ],
            ),
            route("b"),
            route("c", [{"target_label": "extra", "replacement": "c"}]),
        ],
    )
    for _ in range(2):  # the cached outcome too
        out = router.route(request([GPU]))
        assert sent(out, 0) == [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "job": "rewritten"}]
        assert sent(out, 1) == [GPU]
        assert sent(out, 2) == [{**GPU, "extra": "c"}]
    assert out.dropped == {}


def test_destination_order_does_not_matter() -> None:
    a = route("a", [{"target_label": "job", "replacement": "x"}])
    b = route("b")
    first = Router(global_rules=(), routes=[a, b]).route(request([GPU]))
    second = Router(global_rules=(), routes=[b, a]).route(request([GPU]))
    assert sent(first, 1) == sent(second, 0) == [GPU]
    assert sent(first, 0) == sent(second, 1) == [{**GPU, "job": "x"}]


# ---------------------------------------------------------------------------------------------
# Fallback

FALLBACK_CASES: list[tuple[str, list[Route], list[list[dict[str, str]]]]] = [
    (
        "two_primaries_one_fallback",
        [route("gpu", KEEP_GPU), route("node", KEEP_NODE), route("rest", fallback=True)],
        [[GPU], [NODE], [APP]],
    ),
    (
        "two_fallbacks",
        [
            route("gpu", KEEP_GPU),
            route("f1", fallback=True),
            route("f2", [{"target_label": "via", "replacement": "f2"}], fallback=True),
        ],
        [[GPU], [NODE, APP], [{**NODE, "via": "f2"}, {**APP, "via": "f2"}]],
    ),
    (
        "fallback_listed_first",
        [route("rest", fallback=True), route("gpu", KEEP_GPU)],
        [[NODE, APP], [GPU]],
    ),
    (
        "fallback_applies_its_own_rules",
        [
            route("gpu", KEEP_GPU),
            route(
                "rest",
                [{"action": "drop", "source_labels": ["job"], "regex": "api"}],
                fallback=True,
            ),
        ],
        [[GPU], [NODE]],
    ),
    (
        "primary_keeping_everything_leaves_fallback_empty",
        [route("all"), route("rest", fallback=True)],
        [[GPU, NODE, APP], []],
    ),
    (  # a shadow destination (audit only) keeping everything changes nothing for the fallback
        "shadow_does_not_keep_for_the_fallback",
        [route("gpu", KEEP_GPU), route("audit", shadow=True), route("rest", fallback=True)],
        [[GPU], [GPU, NODE, APP], [NODE, APP]],
    ),
    (
        "shadow_fallback_gets_what_the_fallback_gets",
        [
            route("gpu", KEEP_GPU),
            route("rest", fallback=True),
            route("audit-rest", fallback=True, shadow=True),
        ],
        [[GPU], [NODE, APP], [NODE, APP]],
    ),
]


@pytest.mark.parametrize(
    ("routes", "expected"),
    [(r, e) for _, r, e in FALLBACK_CASES],
    ids=[n for n, _, _ in FALLBACK_CASES],
)
def test_fallback_gets_exactly_what_no_primary_kept(
    routes: list[Route], expected: list[list[dict[str, str]]]
) -> None:
    router = Router(global_rules=(), routes=routes)
    out = router.route(request([GPU, NODE, APP]))
    assert [sent(out, i) for i in range(len(routes))] == expected
    assert [s.samples for s in out.shares] == [len(e) for e in expected]
    # Not receiving a series because a primary kept it is not a drop for a fallback.
    # (The primaries in these cases do not rewrite labels, so what they sent is what they kept.)
    kept = {
        frozenset(d.items())
        for r, e in zip(routes, expected, strict=True)
        if not r.fallback and not r.shadow
        for d in e
    }
    for i, r in enumerate(routes):
        if r.fallback:
            drops = sum(n for (j, _), n in out.dropped.items() if j == i)
            assert drops == 3 - len(kept) - len(expected[i])


def test_fallback_receives_a_series_a_primary_left_invalid() -> None:
    routes = [
        route("a", [{"action": "labeldrop", "regex": "__name__"}]),
        route("rest", fallback=True),
    ]
    out = Router(global_rules=(), routes=routes).route(request([NODE]))
    assert sent(out, 0) == []
    assert sent(out, 1) == [NODE]
    assert out.dropped == {(0, DropReason.INVALID): 1}


def test_primary_drop_counted_fallback_not() -> None:
    routes = [route("gpu", KEEP_GPU), route("rest", fallback=True)]
    out = Router(global_rules=(), routes=routes).route(request([GPU, NODE]))
    assert out.dropped == {(0, DropReason.RELABEL): 1}


# ---------------------------------------------------------------------------------------------
# Global rules, invalid series


def test_global_rules_run_first() -> None:
    global_rules = rules(
        [
            {"target_label": "cluster", "replacement": "c1"},
            {
                "source_labels": ["job"],
                "target_label": "job",
                "regex": "dcgm",
                "replacement": "gpu",
            },
        ]
    )
    routes = [
        route("gpu", [{"action": "keep", "source_labels": ["job"], "regex": "gpu"}]),
        route("rest", fallback=True),
    ]
    out = Router(global_rules=global_rules, routes=routes).route(request([GPU, NODE]))
    assert sent(out, 0) == [{**GPU, "job": "gpu", "cluster": "c1"}]
    assert sent(out, 1) == [{**NODE, "cluster": "c1"}]


@pytest.mark.parametrize(
    "global_raw",
    [
        [{"action": "drop", "source_labels": ["__name__"], "regex": "node_.*"}],
        [{"action": "keep", "source_labels": ["__name__"], "regex": "DCGM_.*|http_.*"}],
        [{"action": "labeldrop", "regex": ".*"}],
    ],
    ids=["drop", "keep_no_match", "all_labels_removed"],
)
def test_global_drop_drops_for_all_destinations(global_raw: list[dict[str, Any]]) -> None:
    routes = [route("a"), route("b", KEEP_NODE), route("rest", fallback=True)]
    out = Router(global_rules=rules(global_raw), routes=routes).route(request([(NODE, 3, 1, 0)]))
    assert out.shares[0].frames == out.shares[1].frames == out.shares[2].frames == []
    assert out.dropped == {(i, DropReason.RELABEL): 4 for i in range(3)}
    assert out.samples_in == 4 and out.series_in == 1


def test_series_without_name_is_invalid_others_routed() -> None:
    routes = [
        route(
            "a",
            [
                {"action": "keep", "source_labels": ["job"], "regex": "node"},
                {"action": "labeldrop", "regex": "__name__"},
            ],
        ),
        route("b"),
    ]
    # Only NODE loses __name__ in "a" (GPU and APP are dropped by its keep rule).
    out = Router(global_rules=(), routes=routes).route(request([GPU, NODE, APP]))
    assert sent(out, 0) == []
    assert sent(out, 1) == [GPU, NODE, APP]
    assert out.dropped == {(0, DropReason.RELABEL): 2, (0, DropReason.INVALID): 1}


def test_series_sent_without_name_is_invalid_others_routed() -> None:
    nameless = {"job": "x", "instance": "i"}
    out = Router(global_rules=(), routes=[route("a")]).route(
        request([GPU, (nameless, 5, 0, 0), NODE])
    )
    assert sent(out, 0) == [GPU, NODE]
    assert out.dropped == {(0, DropReason.INVALID): 5}


def test_labelkeep_removing_name_is_invalid() -> None:
    labels = {"__name__": "up", "instance": "h:1", "job": "a", "pod": "p"}
    routes = [route("a", [{"action": "labelkeep", "regex": "job|instance"}]), route("b")]
    out = Router(global_rules=(), routes=routes).route(request([labels]))
    assert sent(out, 0) == []
    assert out.shares[0].samples == 0
    assert out.dropped == {(0, DropReason.INVALID): 1}
    assert sent(out, 1) == [labels]


def test_empty_label_values_are_removed() -> None:
    out = Router(global_rules=(), routes=[route("a")]).route(
        request([{"env": "", "__name__": "m", "job": "a"}])
    )
    assert sent(out, 0) == [{"__name__": "m", "job": "a"}]
    assert out.shares[0].hashes == [shard_hash(encode_labels((("__name__", "m"), ("job", "a"))))]


def test_invalid_labels_refuse_the_request_and_are_not_cached() -> None:
    req = remote_pb2.WriteRequest()
    ts = req.timeseries.add()
    ts.labels.add(name="__name__", value="m")
    ts.labels.add(name="__name__", value="n")
    data = req.SerializeToString()
    router = Router(global_rules=(), routes=[route("a")])
    for _ in range(2):
        with pytest.raises(DecodeError, match="duplicate"):
            router.route(data)
    assert len(router) == 0


# ---------------------------------------------------------------------------------------------
# Cache


def test_cache_hits_on_identical_request() -> None:
    router = Router(global_rules=(), routes=[route("a"), route("b", KEEP_GPU)])
    first = router.route(request([GPU, NODE]))
    assert (router.hits, router.misses) == (0, 2)
    second = router.route(request([GPU, NODE]))
    assert (router.hits, router.misses) == (2, 2)
    assert len(router) == 2
    assert first.shares == second.shares
    assert first.dropped == second.dropped


def test_cache_key_is_raw_bytes_order_matters() -> None:
    router = Router(global_rules=(), routes=[route("a")])
    router.route(request([{"__name__": "m", "a": "1"}]))
    out = router.route(request([{"a": "1", "__name__": "m"}]))  # same set, other order
    assert (router.hits, router.misses) == (0, 2)
    assert sent(out, 0) == [{"__name__": "m", "a": "1"}]


def numbered(first: int, count: int) -> list[dict[str, str]]:
    return [{"__name__": "m", "i": str(i)} for i in range(first, first + count)]


# (name, cache_size, requests of (first, count), cached after, hits when all are sent again)
CACHE_SIZE_CASES = [
    ("under_half_stays_young", 10, [(0, 4)], 4, 4),
    ("half_rotates_and_stays_as_old", 10, [(0, 5)], 5, 5),
    ("old_forgotten_at_next_rotation", 10, [(0, 5), (5, 5)], 5, 5),
    ("recent_kept_over_older", 10, [(0, 3), (3, 3)], 6, 3),
    ("one_request_over_the_size_is_not_kept", 10, [(0, 25)], 0, 0),
    ("size_one", 1, [(0, 1), (1, 1)], 1, 1),
]


@pytest.mark.parametrize(
    ("cache_size", "requests", "cached", "hits"),
    [case[1:] for case in CACHE_SIZE_CASES],
    ids=[case[0] for case in CACHE_SIZE_CASES],
)
def test_cache_size_bound(
    cache_size: int, requests: list[tuple[int, int]], cached: int, hits: int
) -> None:
    router = Router(global_rules=(), routes=[route("a")], cache_size=cache_size)
    for first, count in requests:
        router.route(request(numbered(first, count)))
        assert len(router) <= max(cache_size, count)
    assert len(router) == cached
    last_first, last_count = requests[-1]
    before = router.hits
    router.route(request(numbered(last_first, last_count)))
    assert router.hits - before == hits


# (name, cache_size, stable label sets, series per request, scrapes): a stable set of up to
# half the bound and a little more (less than a request over it): every scrape after the
# second is answered by one generation, each lookup a young hit, nothing copied, nothing old
STABLE_SET_CASES = [
    ("under_half", 1000, 400, 50, 6),
    ("exactly_half", 1000, 500, 50, 6),
    ("just_over_half", 1000, 510, 50, 6),
    ("over_half_a_request_straddles", 1000, 530, 70, 6),
]


@pytest.mark.parametrize(
    ("cache_size", "stable", "per_request", "scrapes"),
    [case[1:] for case in STABLE_SET_CASES],
    ids=[case[0] for case in STABLE_SET_CASES],
)
def test_stable_set_over_half_is_held_once(
    cache_size: int, stable: int, per_request: int, scrapes: int
) -> None:
    """A stable set a little over half the bound does not rotate every scrape (each lookup a
    young miss, an old hit and a copy): the old generation, once copied in full, is forgotten."""
    router = Router(global_rules=(), routes=[route("a")], cache_size=cache_size)
    for scrape in range(scrapes):
        hits, misses = router.hits, router.misses
        for first in range(0, stable, per_request):
            router.route(request(numbered(first, min(per_request, stable - first))))
            assert len(router._young) + len(router._old) <= cache_size + per_request
        if scrape >= 2:
            assert (router.hits - hits, router.misses - misses) == (stable, 0)
            assert len(router._old) == 0 and len(router._young) == stable


# (name, cache_size, active series, new per scrape): after the first scrapes only the new
# label sets miss: the recent ones stay cached while both generations fit the bound
CHURN_CASES = [
    ("a_third_new_small_set", 1000, 300, 100),
    ("half_new", 1000, 200, 100),
    ("a_third_new_half_the_cache", 1000, 500, 166),
]


@pytest.mark.parametrize(
    ("cache_size", "active", "new"),
    [case[1:] for case in CHURN_CASES],
    ids=[case[0] for case in CHURN_CASES],
)
def test_churn_misses_only_the_new(cache_size: int, active: int, new: int) -> None:
    router = Router(global_rules=(), routes=[route("a")], cache_size=cache_size)
    for scrape in range(20):
        first = scrape * new  # the oldest `new` of the last scrape are gone, `new` arrive
        misses = router.misses
        for at in range(first, first + active, 50):
            router.route(request(numbered(at, min(50, first + active - at))))
            assert len(router._young) + len(router._old) <= cache_size + 50
        if scrape:
            assert router.misses - misses == new, scrape


def test_cache_is_bounded_in_bytes_too() -> None:
    big = "v" * 10_000
    router = Router(global_rules=(), routes=[route("a")], cache_size=1000, cache_bytes=100_000)
    for i in range(50):
        router.route(request([{"__name__": "m", "i": str(i), "big": big}]))
        assert router.cached_bytes <= 100_000 + 10_100  # a request may add its own on top
    assert 0 < len(router) <= 10


# (name, seconds between the two requests, hit on the second)
CACHE_AGE_CASES = [
    ("same_time", 0.0, True),
    ("under_half_max_age", 299.0, True),
    ("over_half_still_in_old", 301.0, True),
    ("over_max_age_forgotten", 601.0, False),
]


@pytest.mark.parametrize(
    ("gap", "hit"), [c[1:] for c in CACHE_AGE_CASES], ids=[c[0] for c in CACHE_AGE_CASES]
)
def test_cache_age_bound(gap: float, hit: bool) -> None:
    router = Router(global_rules=(), routes=[route("a")], cache_max_age=600.0)
    router.route(request([GPU]), now=1000.0)
    router.route(request([GPU]), now=1000.0 + gap)
    assert router.hits == int(hit)


def test_churned_series_are_forgotten_after_max_age() -> None:
    """Pods restart every scrape: new label sets each time; the cache stays bounded by age."""
    router = Router(global_rules=(), routes=[route("a")], cache_max_age=120.0)
    sizes = []
    for scrape in range(40):  # 30 s apart: 20 minutes
        router.route(request(numbered(scrape * 10, 10)), now=scrape * 30.0)
        sizes.append(len(router))
    assert max(sizes) <= 10 * (120 // 30 + 1)  # at most max_age worth of scrapes
    assert router.hits == 0


def test_hit_ratio_over_the_last_window() -> None:
    router = Router(global_rules=(), routes=[route("a")])
    assert math.isnan(router.hit_ratio)
    router.route(request(numbered(0, 4)), now=0.0)
    assert router.hit_ratio == 0.0  # no completed window: since the start
    router.route(request(numbered(0, 4)), now=30.0)
    assert router.hit_ratio == 0.5
    router.route(request(numbered(0, 3) + numbered(10, 1)), now=61.0)  # window 0-61 closes
    assert router.hit_ratio == 0.5  # 4 misses, then 4 hits; this request is in the next one
    router.route(request(numbered(0, 4)), now=125.0)
    assert router.hit_ratio == 3 / 4


# ---------------------------------------------------------------------------------------------
# Metadata


def test_metadata_routed_by_family_name() -> None:
    routes = [
        route("gpu", KEEP_GPU),
        route("copy", [{"target_label": "x", "replacement": "y"}]),
        route("rest", fallback=True),
    ]
    data = request(metadata=["DCGM_FI_DEV_GPU_UTIL", "node_load1"])
    out = Router(global_rules=(), routes=routes).route(data)
    assert sent_metadata(out, 0) == ["DCGM_FI_DEV_GPU_UTIL"]
    assert sent_metadata(out, 1) == ["DCGM_FI_DEV_GPU_UTIL", "node_load1"]
    assert sent_metadata(out, 2) == []
    # The payload is forwarded unchanged (rules never rewrite metadata).
    framed = [b"\x1a" + bytes([len(m)]) + m for m in parse_write_request(data).metadata]
    assert out.metadata[1] == framed


def test_metadata_routing_is_remembered_per_payload() -> None:
    routes = [route("gpu", KEEP_GPU), route("rest", fallback=True)]
    router = Router(global_rules=(), routes=routes)
    calls: list[tuple[tuple[str, str], ...]] = []
    route_labels = router.route_labels

    def counting(labels: tuple[tuple[str, str], ...]) -> Any:
        calls.append(labels)
        return route_labels(labels)

    router.route_labels = counting  # type: ignore[method-assign]
    data = request(metadata=["DCGM_FI_DEV_GPU_UTIL", "node_load1"])
    first, second = router.route(data), router.route(data)
    assert len(calls) == 2  # once per payload, not once per request
    for out in (first, second):
        assert sent_metadata(out, 0) == ["DCGM_FI_DEV_GPU_UTIL"]
        assert sent_metadata(out, 1) == ["node_load1"]
    nameless = request(metadata=[""])
    assert [router.route(nameless).metadata_invalid for _ in range(2)] == [1, 1]


def test_metadata_fallback_and_global_drop() -> None:
    global_rules = rules([{"action": "drop", "source_labels": ["__name__"], "regex": "go_.*"}])
    routes = [route("gpu", KEEP_GPU), route("rest", fallback=True)]
    parts = request(metadata=["DCGM_X", "node_load1", "go_goroutines"])
    out = Router(global_rules=global_rules, routes=routes).route(parts)
    assert sent_metadata(out, 0) == ["DCGM_X"]
    assert sent_metadata(out, 1) == ["node_load1"]
    assert out.series_in == 0 and out.samples_in == 0
    assert out.dropped == {}


def test_metadata_only_label_is_name() -> None:
    # A rule matching another label never matches metadata: {__name__: family} only.
    routes = [
        route("a", [{"action": "keep", "source_labels": ["job"], "regex": "api"}]),
        route("rest", fallback=True),
    ]
    out = Router(global_rules=(), routes=routes).route(request(metadata=["http_requests_total"]))
    assert sent_metadata(out, 0) == []
    assert sent_metadata(out, 1) == ["http_requests_total"]


def test_labelmap_to_an_empty_name_makes_the_series_invalid() -> None:
    routes = [route("a", [{"action": "labelmap", "regex": "job", "replacement": "${9}"}])]
    out = Router(global_rules=(), routes=routes).route(request([{"__name__": "m", "job": "x"}]))
    assert sent(out, 0) == []
    assert out.dropped == {(0, "invalid"): 1}


def test_metadata_without_family_name_is_sent_nowhere_and_counted() -> None:
    routes = [route("a"), route("rest", fallback=True)]
    out = Router(global_rules=(), routes=routes).route(request(metadata=["", "up"]))
    assert sent_metadata(out, 0) == ["up"]
    assert sent_metadata(out, 1) == []
    assert out.metadata_invalid == 1


# ---------------------------------------------------------------------------------------------
# Exemplars / native histograms per destination, counts


def test_send_exemplars_and_histograms_off_strip_for_that_destination_only() -> None:
    routes = [
        route("all"),
        route("no_ex", send_exemplars=False),
        route("no_h", send_native_histograms=False),
        route("neither", send_exemplars=False, send_native_histograms=False),
    ]
    out = Router(global_rules=(), routes=routes).route(request([(GPU, 2, 1, 1)]))
    shapes = [
        [(len(ts.samples), len(ts.exemplars), len(ts.histograms)) for ts in sent_series(out, i)]
        for i in range(4)
    ]
    assert shapes == [[(2, 1, 1)], [(2, 0, 1)], [(2, 1, 0)], [(2, 0, 0)]]
    # Counts are what is sent: samples plus the exemplars/histograms that were kept.
    assert [s.counts for s in out.shares] == [[4], [3], [3], [2]]
    full = sent_series(out, 0)[0]
    for i in (1, 2, 3):
        ts = sent_series(out, i)[0]
        assert list(ts.samples) == list(full.samples)
        assert list(ts.labels) == list(full.labels)


def test_series_left_with_nothing_after_filtering_is_not_sent() -> None:
    routes = [route("all"), route("no_h", send_native_histograms=False)]
    out = Router(global_rules=(), routes=routes).route(request([(GPU, 0, 0, 2)]))
    assert [len(sent_series(out, i)) for i in range(2)] == [1, 0]
    assert out.dropped == {(1, "filtered"): 2}


SAMPLE_COUNT_CASES = [
    ("samples_only", (3, 0, 0), 3),
    ("exemplars_added", (2, 2, 0), 4),
    ("histograms_only", (0, 0, 2), 2),
    ("all_three", (1, 1, 1), 3),
]


def test_series_without_samples_is_not_forwarded() -> None:
    out = Router(global_rules=(), routes=[route("a")]).route(request([(NODE, 0, 0, 0)]))
    assert out.shares[0].frames == [] and out.dropped == {}
    assert out.series_in == 1 and out.samples_in == 0


@pytest.mark.parametrize(
    ("shape", "expected"),
    [(s, e) for _, s, e in SAMPLE_COUNT_CASES],
    ids=[n for n, _, _ in SAMPLE_COUNT_CASES],
)
def test_sample_counts(shape: tuple[int, int, int], expected: int) -> None:
    routes = [
        route("a"),
        route("b", [{"action": "drop", "source_labels": ["job"], "regex": "node"}]),
    ]
    out = Router(global_rules=(), routes=routes).route(request([(NODE, *shape), (GPU, 1, 0, 0)]))
    assert out.shares[0].counts == [expected, 1]
    assert out.shares[0].samples == expected + 1
    assert out.shares[1].counts == [1]
    assert out.shares[1].samples == 1
    assert out.dropped == {(1, DropReason.RELABEL): expected}
    assert out.samples_in == expected + 1
    assert out.series_in == 2
    assert out.shares[0].hashes[1] == shard_hash(encode_labels(tuple(sorted(GPU.items()))))


def test_drop_counts_accumulate_per_destination_and_reason() -> None:
    routes = [route("a", KEEP_GPU), route("b", [{"action": "labeldrop", "regex": "__name__"}])]
    out = Router(global_rules=(), routes=routes).route(
        request([(NODE, 2, 0, 0), (APP, 3, 1, 0), (GPU, 1, 0, 0)])
    )
    assert out.dropped == {(0, DropReason.RELABEL): 6, (1, DropReason.INVALID): 7}
    assert sent(out, 0) == [GPU]


@pytest.mark.parametrize(
    ("cached", "cap", "room"),
    [(5, 100, 5), (5, 3, 3)],
    ids=["as_many_as_the_last_generation", "capped"],
)
def test_a_new_young_generation_gets_the_last_ones_room(
    cached: int, cap: int, room: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation starts the new young generation with room for what the old one took, at
    most MAX_PRESIZE entries (LabelCache refuses more than 2^28)."""
    from rwrouter.routing import cache as cache_module

    asked: list[int] = []
    make = cache_module.new_cache

    def recording(expected: int = 0, /) -> Any:
        asked.append(expected)
        return make(expected)

    monkeypatch.setattr(cache_module, "new_cache", recording)
    monkeypatch.setattr(cache_module, "MAX_PRESIZE", cap)
    router = Router(global_rules=(), routes=[route("a")], cache_size=1000)
    router.route(request(numbered(0, cached)))
    router._rotate(0.0)
    assert asked[-1] == room and len(router) == cached
