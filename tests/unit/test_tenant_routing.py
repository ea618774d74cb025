"""Routing per tenant (rwrouter.routing.tenants): the rules see ``__tenant__``, it is removed
after them, each tenant's outcomes stay its own, requests without a tenant are routed as
before; the compiled and the pure-Python loops agree."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rwrouter.config import parse_config
from rwrouter.reasons import DropReason
from rwrouter.routing import RoutedRequest, Router, build_router
from rwrouter.routing import router as router_module
from rwrouter.routing.scan import Scan, scan_request_py
from rwrouter.routing.tenants import TenantRouter, Tenants, mentions_tenant
from rwrouter.wire import remote_pb2, types_pb2
from rwrouter.wire.accelerator import ACCELERATED, compiled
from tests.support.series import Series, write_request

LabelSet = tuple[tuple[str, str], ...]

HEAD = """
remote_write:
  - name: a
    url: http://127.0.0.1:1/api/v1/write
    write_relabel_configs: {a}
  - name: b
    url: http://127.0.0.1:2/api/v1/write
    fallback: true
"""
KEEP_TEAM_A = "[{source_labels: [__tenant__], regex: team-a, action: keep}]"
DROP_TEAM_A = "[{source_labels: [__tenant__], regex: team-a, action: drop}]"
BY_NAME = '[{source_labels: [__name__], regex: "up", action: keep}]'
COPY = "[{source_labels: [__tenant__], target_label: tenant}]"
LABELMAP = '[{action: labelmap, regex: "__(tenant)__", replacement: "org_$1"}]'
ONLY_TENANT = '[{action: labelkeep, regex: "__tenant__"}]'
GLOBAL_COPY = "relabel_configs: [{source_labels: [__tenant__], target_label: t}]\n"

UP = (("__name__", "up"), ("job", "node"))
OWN_B = (("__name__", "up"), ("__tenant__", "team-b"), ("job", "node"))
OWN_A = (("__name__", "up"), ("__tenant__", "team-a"), ("job", "node"))


def config(a_rules: str, extra: str = "") -> str:
    return extra + HEAD.format(a=a_rules)


def routed_labels(routed: RoutedRequest) -> list[list[LabelSet]]:
    """Per destination, the label sets of the series it gets."""
    out = []
    for share in routed.shares:
        request = remote_pb2.WriteRequest()
        request.ParseFromString(share.body)
        out.append([tuple((lab.name, lab.value) for lab in ts.labels) for ts in request.timeseries])
    return out


def data_of(*label_sets: LabelSet) -> bytes:
    series = [Series(labels, ((1000, 1.0),)) for labels in label_sets]
    return bytes(write_request(series).SerializeToString())


def tenants_of(text: str, **kw: Any) -> Tenants:
    return Tenants(build_router(parse_config(text, env={})), **kw)


# (id, config, tenant, input label sets, per destination the label sets it gets)
CASES = [
    ("keep_by_tenant_kept", config(KEEP_TEAM_A), "team-a", [UP], [[UP], []]),
    ("keep_by_tenant_other_tenant", config(KEEP_TEAM_A), "team-b", [UP], [[], [UP]]),
    ("keep_by_tenant_no_tenant", config(KEEP_TEAM_A), None, [UP], [[], [UP]]),
    ("drop_by_tenant_dropped", config(DROP_TEAM_A), "team-a", [UP], [[], [UP]]),
    ("drop_by_tenant_other_kept", config(DROP_TEAM_A), "team-b", [UP], [[UP], []]),
    (
        "copy_kept_in_a_label",
        config(COPY),
        "team-a",
        [UP],
        [[(("__name__", "up"), ("job", "node"), ("tenant", "team-a"))], []],
    ),
    ("copy_no_tenant_no_label", config(COPY), None, [UP], [[UP], []]),
    (
        "labelmap_copies_it",
        config(LABELMAP),
        "team-a",
        [UP],
        [[(("__name__", "up"), ("job", "node"), ("org_tenant", "team-a"))], []],
    ),
    (
        "global_rule_copies_it_everywhere",
        config("[]", GLOBAL_COPY),
        "team-a",
        [UP],
        [[(("__name__", "up"), ("job", "node"), ("t", "team-a"))], []],
    ),
    ("own_label_replaced_by_the_tenant", config(KEEP_TEAM_A), "team-a", [OWN_B], [[UP], []]),
    ("own_label_cannot_claim_a_tenant", config(KEEP_TEAM_A), "team-b", [OWN_A], [[], [UP]]),
    ("own_label_removed_without_tenant", config(KEEP_TEAM_A), None, [OWN_A], [[], [UP]]),
    ("left_with_only_the_tenant_dropped", config(ONLY_TENANT), "team-a", [UP], [[], [UP]]),
    ("no_rule_mentions_it_unchanged", config(BY_NAME), "team-a", [UP, OWN_B], [[UP, OWN_B], []]),
    ("no_rule_mentions_it_no_tenant", config(BY_NAME), None, [UP, OWN_B], [[UP, OWN_B], []]),
]


@pytest.mark.parametrize(
    ("text", "tenant", "series", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_routing_with_tenant(
    text: str, tenant: str | None, series: list[LabelSet], expected: list[list[LabelSet]]
) -> None:
    tenants = tenants_of(text)
    router = tenants.for_tenant(tenant)
    data = data_of(*series)
    first = router.route(data, now=1.0)
    assert routed_labels(first) == expected
    assert routed_labels(router.route(data, now=2.0)) == expected  # the cached outcomes


def test_left_with_only_the_tenant_is_counted_as_relabel() -> None:
    routed = tenants_of(config(ONLY_TENANT)).for_tenant("team-a").route(data_of(UP))
    assert routed.dropped == {(0, DropReason.RELABEL): 1}


def test_no_tenant_router_is_the_plain_router_when_no_rule_mentions_it() -> None:
    router = build_router(parse_config(config(BY_NAME), env={}))
    tenants = Tenants(router)
    assert tenants.for_tenant(None) is router
    assert tenants.for_tenant("team-a") is router
    assert type(router) is Router
    assert tenants.tenants == []


MENTIONS = [
    ("source_label", KEEP_TEAM_A, True),
    ("copy", COPY, True),
    ("target_label", "[{target_label: __tenant__, replacement: x}]", True),
    ("labelmap_matching", LABELMAP, True),
    ("labelmap_writing", '[{action: labelmap, regex: "x_(.*)", replacement: __tenant__}]', True),
    ("labelmap_not_matching", '[{action: labelmap, regex: "x_(.*)", replacement: y}]', False),
    ("by_name", BY_NAME, False),
    ("labeldrop_all", '[{action: labeldrop, regex: ".*_id"}]', False),
    ("none", "[]", False),
]


@pytest.mark.parametrize(
    ("rules", "expected"), [c[1:] for c in MENTIONS], ids=[c[0] for c in MENTIONS]
)
def test_mentions_tenant(rules: str, expected: bool) -> None:
    router = build_router(parse_config(config(rules), env={}))
    assert mentions_tenant(router.global_rules, router.routes) is expected


def test_cache_isolation_between_tenants() -> None:
    """The same label sets, routed in turns for two tenants and none, cached each time: every
    answer is its own tenant's."""
    tenants = tenants_of(config(KEEP_TEAM_A))
    data = data_of(UP, (("__name__", "up"), ("job", "db")))
    want = {
        "team-a": [[UP, (("__name__", "up"), ("job", "db"))], []],
        "team-b": [[], [UP, (("__name__", "up"), ("job", "db"))]],
        None: [[], [UP, (("__name__", "up"), ("job", "db"))]],
    }
    for now in range(3):
        for tenant in ("team-a", "team-b", None, "team-a"):
            routed = tenants.for_tenant(tenant).route(data, now=float(now))
            assert routed_labels(routed) == want[tenant], (now, tenant)
    assert tenants.tenants == ["team-b", "team-a"]
    assert all(len(router) == 2 for router in tenants.routers)
    assert tenants.hits == 4 * 3 * 2 - 3 * 2  # every lookup but each router's first two


def test_max_tenants_replaces_the_least_recently_used() -> None:
    text = config(KEEP_TEAM_A) + "relabel_cache: {max_entries: 900, max_bytes: 9000}\n"
    tenants = tenants_of(text, max_tenants=2)
    first = tenants.for_tenant("team-a")
    first.route(data_of(UP), now=1.0)
    tenants.for_tenant("team-b")
    tenants.for_tenant("team-a")  # now the most recently used
    tenants.for_tenant("team-c")  # replaces team-b
    assert tenants.tenants == ["team-a", "team-c"]
    assert tenants.for_tenant("team-a") is first
    assert [r.cache_size for r in tenants.routers] == [300, 300, 300]
    assert [r.cache_bytes for r in tenants.routers] == [3000, 3000, 3000]
    tenants.for_tenant("team-d")  # replaces team-c; its hits and misses are kept
    assert tenants.tenants == ["team-a", "team-d"]
    assert tenants.misses == 1


def test_metadata_is_routed_by_tenant() -> None:
    meta = types_pb2.MetricMetadata(metric_family_name="up", help="h", type="COUNTER")
    data = bytes(write_request([], metadata=[meta]).SerializeToString())
    tenants = tenants_of(config(KEEP_TEAM_A))
    assert [len(m) for m in tenants.for_tenant("team-a").route(data).metadata] == [1, 0]
    assert [len(m) for m in tenants.for_tenant("team-b").route(data).metadata] == [0, 1]


# -- the compiled loop and the pure-Python one -----------------------------------------------

TEMPLATE_RULES = (
    '[{source_labels: [__tenant__], regex: "team-a", action: keep},'
    ' {source_labels: [__name__], regex: "m1|m3", action: keep}]'
)


def random_series(seed: int, n: int) -> list[LabelSet]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        labels = {"__name__": f"m{rnd.randrange(5)}", "instance": f"i{rnd.randrange(40)}"}
        if rnd.random() < 0.2:
            labels["__tenant__"] = rnd.choice(["team-a", "team-b"])
        if rnd.random() < 0.3:
            labels["job"] = rnd.choice(["x", "y"])
        out.append(tuple(sorted(labels.items())))
    return out


PATHS = [
    ("filter_only_template", TEMPLATE_RULES),
    ("copy", COPY),
    ("labelmap", LABELMAP),
    ("global_copy", "[]"),
]


@pytest.mark.skipif(not ACCELERATED, reason="the compiled accelerator is not built here")
@pytest.mark.parametrize("rules", [c[1] for c in PATHS], ids=[c[0] for c in PATHS])
@pytest.mark.parametrize("tenant", ["team-a", "team-b", None], ids=["team_a", "team_b", "none"])
def test_compiled_and_python_loops_agree(
    rules: str, tenant: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = GLOBAL_COPY if rules == "[]" else ""
    scan_c = compiled("scan_request")
    assert scan_c is not None
    results = []
    for scan in (scan_request_py, lambda *a: Scan._make(scan_c(*a))):
        monkeypatch.setattr(router_module, "scan_request", scan)
        router = tenants_of(config(rules, extra)).for_tenant(tenant)
        assert isinstance(router, TenantRouter)
        out = []
        for seed in range(4):  # misses, then hits and templates across requests
            data = data_of(*random_series(seed % 2, 200))
            routed = router.route(data, now=float(seed))
            out.append((routed_labels(routed), routed.dropped, [s.index for s in routed.shares]))
        results.append(out)
    assert results[0] == results[1]
    for labels_per_request, _, _ in results[0]:
        for share in labels_per_request:
            assert all("__tenant__" not in dict(labels) for labels in share)
