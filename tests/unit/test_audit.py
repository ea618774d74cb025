"""The audit's pure core (rwrouter.audit): active series per metric name over a window, the
merge of several workers' counts, tiered monthly cost, the report and its table."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.audit import (
    GENERATIONS,
    SECONDS_PER_MONTH,
    ActiveSeries,
    Snapshot,
    build_report,
    format_table,
    merge,
    monthly_cost,
    monthly_samples,
    rank,
)
from rwrouter.config import AuditConfig, PriceTier
from rwrouter.config.model import AMP_PRICE_TIERS
from rwrouter.routing import Route, RoutedSeries, Router
from rwrouter.wire import decompress
from tests.support.series import Series, build_body

WINDOW = 800.0  # seconds: generations of 100 s
SPAN = WINDOW / GENERATIONS


def share(*series: tuple[str, int, int]) -> RoutedSeries:
    """A routed share of series (metric name, instance number, samples)."""
    body = build_body([
        Series((("__name__", name), ("instance", str(i))), tuple((1000 + k, 1.0) for k in range(n)))
        for name, i, n in series
    ])
    return Router(global_rules=(), routes=[Route(name="d")]).route(
        decompress(body, max_decoded_bytes=1 << 24)).series[0]  # fmt: skip


def counts(snap: Snapshot) -> dict[str, int]:
    return {name: c.active_series for name, c in snap.names.items() if c.active_series}


def new(**kw: float) -> ActiveSeries:
    args = {"window": WINDOW, "max_series": 1000, "rate_window": 100.0, "now": 0.0, **kw}
    return ActiveSeries(window=args["window"], max_series=int(args["max_series"]),
                        rate_window=args["rate_window"], now=args["now"])  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Active series

ACTIVE_CASES = [
    # id, sightings [(time s, [(name, instance, samples)])], snapshot time, expected active
    ("distinct_series_per_name", [(0, [("gpu", 0, 1), ("gpu", 1, 1), ("net", 0, 1)])], 1,
     {"gpu": 2, "net": 1}),
    ("the_same_series_every_scrape_counts_once", [(t, [("gpu", 0, 1)]) for t in range(0, 700, 15)],
     700, {"gpu": 1}),
    ("same_labels_other_name_is_another_series", [(0, [("a", 0, 1), ("b", 0, 1)])], 1,
     {"a": 1, "b": 1}),
    ("seen_within_the_window_counts", [(0, [("gpu", 0, 1)])], WINDOW - 1, {"gpu": 1}),
    ("forgotten_a_generation_after_the_window", [(0, [("gpu", 0, 1)])], WINDOW + SPAN, {}),
    ("seen_again_stays", [(0, [("gpu", 0, 1)]), (WINDOW - 1, [("gpu", 0, 1)])],
     2 * WINDOW - 2, {"gpu": 1}),
    ("churned_series_expire_new_ones_count", [(0, [("job", i, 1) for i in range(5)]),
                                             (WINDOW, [("job", i, 1) for i in range(5, 8)])],
     WINDOW + SPAN + 1, {"job": 3}),
    ("idle_longer_than_everything", [(0, [("gpu", 0, 1)])], 100 * WINDOW, {}),
]  # fmt: skip


@pytest.mark.parametrize(("sightings", "at", "expected"), [c[1:] for c in ACTIVE_CASES],
                         ids=[c[0] for c in ACTIVE_CASES])  # fmt: skip
def test_active_series(sightings: list[tuple[float, list[tuple[str, int, int]]]], at: float,
                       expected: dict[str, int]) -> None:  # fmt: skip
    active = new()
    for now, series in sightings:
        routed = share(*series)
        active.observe(routed.body, routed.index, now)
    snap = active.snapshot(at)
    assert counts(snap) == expected
    assert snap.active_series == sum(expected.values()) == len(active)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 9)), max_size=60),
       st.integers(0, 4000))  # fmt: skip
def test_active_series_is_between_the_window_and_one_generation_more(
    sightings: list[tuple[int, int]], at: int
) -> None:
    """Against a model that remembers every sighting: every series seen within the window
    counts, none last seen more than window + one generation ago does."""
    sightings.sort()
    at = max(at, sightings[-1][0] if sightings else 0)
    active, last = new(), {}
    for now, instance in sightings:
        routed = share(("m", instance, 1))
        active.observe(routed.body, routed.index, now)
        last[instance] = now
    got = active.snapshot(at).active_series
    assert sum(at - t < WINDOW for t in last.values()) <= got
    assert got <= sum(at - t < WINDOW + SPAN for t in last.values())


def test_max_series_caps_the_count_and_says_so_for_a_window() -> None:
    active = new(max_series=3)
    routed = share(*[("m", i, 1) for i in range(5)])
    active.observe(routed.body, routed.index, 0.0)
    snap = active.snapshot(1.0)
    assert (snap.active_series, snap.capped) == (3, True)
    assert active.snapshot(WINDOW + SPAN).capped is False  # nothing new was refused since


def test_samples_per_second_over_the_rate_window() -> None:
    active = new(rate_window=100.0)
    for now in range(0, 400, 10):  # 6 samples of gpu and 2 of net every 10 s
        routed = share(("gpu", 0, 3), ("gpu", 1, 3), ("net", 0, 2))
        active.observe(routed.body, routed.index, float(now))
    names = active.snapshot(400.0).names
    # marks every 20 s; the oldest within 100 s is at 300 s: the sightings at 300..390
    assert names["gpu"].samples_per_second == pytest.approx(0.6)
    assert names["net"].samples_per_second == pytest.approx(0.2)


def test_rate_before_a_whole_rate_window_is_since_the_first_share() -> None:
    active = new(rate_window=100.0)
    routed = share(("gpu", 0, 10))
    active.observe(routed.body, routed.index, 0.0)
    assert active.snapshot(3.0).names["gpu"].samples_per_second == 0.0  # one share: no rate
    active.observe(routed.body, routed.index, 5.0)
    assert active.snapshot(5.0).names["gpu"].samples_per_second == pytest.approx(2.0)


def test_a_long_metric_name_is_found_and_a_missing_one_is_never_routed() -> None:
    routed = share(("", 0, 1))  # no __name__: the routed share is empty (invalid)
    assert routed.series == 0
    active = new()
    long_name = "DCGM_FI_PROF_" + "X" * 200  # a 2-byte length
    routed = share((long_name, 0, 1), (long_name, 1, 1))
    active.observe(routed.body, routed.index, 0.0)
    assert counts(active.snapshot(1.0)) == {long_name: 2}


@pytest.mark.parametrize(("window", "rate", "size"), [(0.0, 1.0, 1), (1.0, 0.0, 1), (1.0, 1.0, 0)],
                         ids=["window", "rate_window", "max_series"])  # fmt: skip
def test_bad_settings_raise(window: float, rate: float, size: int) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ActiveSeries(window=window, max_series=size, rate_window=rate, now=0.0)


# ---------------------------------------------------------------------------------------------
# Merging workers


def test_merge_counts_a_series_two_workers_saw_once_and_adds_rates() -> None:
    one, two = new(), new()
    a = share(("gpu", 0, 1), ("gpu", 1, 1), ("net", 0, 4))
    b = share(("gpu", 1, 1), ("gpu", 2, 1))
    for at in (0.0, 10.0):
        one.observe(a.body, a.index, at)
    for at in (0.0, 20.0):
        two.observe(b.body, b.index, at)
    merged = merge([one.snapshot(10.0, keys=True), two.snapshot(20.0, keys=True)])
    assert counts(merged) == {"gpu": 3, "net": 1}
    assert merged.names["gpu"].samples_per_second == pytest.approx(2 / 10 + 2 / 20)
    assert merged.observed == 20.0


def test_merge_needs_keys() -> None:
    one = new()
    a = share(("gpu", 0, 1))
    one.observe(a.body, a.index, 0.0)
    with pytest.raises(ValueError, match="keys=True"):
        merge([one.snapshot(1.0)])


# ---------------------------------------------------------------------------------------------
# Cost

TIERS = (
    PriceTier(per_million=2.0, up_to_samples=10_000_000),
    PriceTier(per_million=1.0, up_to_samples=30_000_000),
    PriceTier(per_million=0.5),
)
COST_CASES = [
    ("nothing", 0, TIERS, 0.0),
    ("inside_the_first_tier", 5e6, TIERS, 10.0),
    ("at_the_first_bound", 1e7, TIERS, 20.0),
    ("into_the_second", 2e7, TIERS, 30.0),
    ("into_the_last", 5e7, TIERS, 20.0 + 20.0 + 10.0),
    ("one_flat_tier", 3e6, (PriceTier(per_million=0.1),), 0.3),
    ("amp_us_east_1_3_billion", 3e9, AMP_PRICE_TIERS, 2000 * 0.09 + 1000 * 0.035),
]  # fmt: skip


@pytest.mark.parametrize(("samples", "tiers", "expected"), [c[1:] for c in COST_CASES],
                         ids=[c[0] for c in COST_CASES])  # fmt: skip
def test_monthly_cost(samples: float, tiers: tuple[PriceTier, ...], expected: float) -> None:
    assert monthly_cost(samples, tiers) == pytest.approx(expected)


BOUNDED_LAST = (PriceTier(per_million=1, up_to_samples=5),)


@pytest.mark.parametrize(("samples", "tiers"), [(-1.0, TIERS), (1.0, ()), (1.0, BOUNDED_LAST)],
                         ids=["negative", "no_tiers", "bounded_last"])  # fmt: skip
def test_monthly_cost_rejects(samples: float, tiers: tuple[PriceTier, ...]) -> None:
    with pytest.raises(ValueError):
        monthly_cost(samples, tiers)


def test_a_month_is_730_hours() -> None:
    assert SECONDS_PER_MONTH == 2_628_000
    assert monthly_samples(1000.0) == 2.628e9


# ---------------------------------------------------------------------------------------------
# Report


def _report(top: int | None = None) -> dict[str, object]:
    active = new()
    a = share(*[("gpu", i, 1) for i in range(4)], ("net", 0, 8), ("net", 1, 8))
    active.observe(a.body, a.index, 0.0)
    active.observe(a.body, a.index, 4.0)
    snap = active.snapshot(4.0)  # gpu 1 sample/s, net 4 samples/s
    audit = AuditConfig(window=WINDOW, series_limit=100, price_tiers=TIERS)
    return build_report({"ws": snap}, audit=audit, shadow={"ws": True}, top=top)


def test_report_ranks_names_by_active_series_and_projects_cost() -> None:
    report = _report()
    json.dumps(report, allow_nan=False)
    (dest,) = report["destinations"]  # type: ignore[misc]
    assert [m["name"] for m in dest["metrics"]] == ["gpu", "net"]
    assert (dest["active_series"], dest["series_limit_ratio"]) == (6, 0.06)
    assert dest["samples_per_second"] == pytest.approx(5.0)
    assert dest["monthly_samples"] == pytest.approx(5.0 * SECONDS_PER_MONTH)
    assert dest["monthly_cost"] == pytest.approx(monthly_cost(5.0 * SECONDS_PER_MONTH, TIERS))
    assert sum(m["monthly_cost"] for m in dest["metrics"]) == pytest.approx(dest["monthly_cost"])
    assert (dest["shadow"], dest["complete"], dest["capped"]) == (True, False, False)
    assert dest["metric_names"] == 2 and len(_report(top=1)["destinations"][0]["metrics"]) == 1  # type: ignore[index]


RANK_CASES = [
    ("series_then_samples", "series", ["b", "a", "c"]),
    ("samples_then_series", "samples", ["c", "b", "a"]),
]
METRICS = [{"name": "a", "active_series": 5, "samples_per_second": 1.0},
           {"name": "b", "active_series": 5, "samples_per_second": 2.0},
           {"name": "c", "active_series": 1, "samples_per_second": 9.0}]  # fmt: skip


@pytest.mark.parametrize(("by", "expected"), [c[1:] for c in RANK_CASES],
                         ids=[c[0] for c in RANK_CASES])  # fmt: skip
def test_rank(by: str, expected: list[str]) -> None:
    assert [m["name"] for m in rank(METRICS, by)] == expected


def test_rank_rejects_an_unknown_key() -> None:
    with pytest.raises(ValueError, match="sort by one of series, samples"):
        rank(METRICS, "cost")


def test_table_shows_the_summary_and_the_names() -> None:
    text = format_table(_report(), top=1)
    assert "destination ws (shadow: counted, not sent): observed 4s of the 13m20s window" in text
    assert "  active series     6 (6% of the 100 limit)" in text
    assert "  samples/s         5.0" in text
    assert "USD/MONTH" in text and "  ... and 1 more metric names" in text
    assert text.splitlines()[-1].startswith("price (USD, samples a month): 2 per million up to")
    by_samples = format_table(_report(), sort="samples", top=1)
    assert "\n  net " in by_samples and "\n  gpu " not in by_samples


def test_table_without_audited_destinations_says_how_to_get_one() -> None:
    report = build_report({}, audit=AuditConfig(), shadow={})
    assert "set `shadow: true` or `audit: true`" in format_table(report)


def test_rates_count_from_the_first_share_not_from_an_idle_start() -> None:
    active = new(rate_window=100.0)
    assert active.snapshot(50.0).names == {}
    routed = share(("gpu", 0, 10))
    active.observe(routed.body, routed.index, 60.0)
    active.observe(routed.body, routed.index, 65.0)
    assert active.snapshot(65.0).names["gpu"].samples_per_second == pytest.approx(2.0)


@pytest.mark.parametrize(("active", "limit", "text"),
                         [(8, 50_000_000, "(<0.001% of"), (0, 10, "(0% of"),
                          (4_194_304, 50_000_000, "(8.39% of"), (60, 50, "(120% of")],
                         ids=["tiny_never_an_exponent", "zero", "some", "over"])  # fmt: skip
def test_table_percent_of_the_limit(active: int, limit: int, text: str) -> None:
    dest = {"name": "d", "shadow": False, "observed_seconds": 1.0, "complete": False,
            "capped": False, "active_series": active, "series_limit_ratio": active / limit,
            "samples_per_second": 0.0, "monthly_samples": 0.0, "monthly_cost": 0.0,
            "metric_names": 0, "metrics": []}  # fmt: skip
    report = {**build_report({}, audit=AuditConfig(), shadow={}), "destinations": [dest],
              "series_limit": limit}  # fmt: skip
    assert text in format_table(report)


# ---------------------------------------------------------------------------------------------
# Following a reload (rwrouter.sending.audit.Audit.configure)

BASE = """
remote_write:
  - {name: ws, url: "http://ws:1/w", audit: true}
  - name: shadow
    shadow: true
    write_relabel_configs: [{source_labels: [__name__], regex: "gpu.*", action: keep}]
"""
RELOADS = [
    # id, new file, destinations expected to keep their counts
    ("unchanged", BASE, {"ws", "shadow"}),
    ("shadow_rules_changed", BASE.replace('"gpu.*"', '"g.*"'), {"ws"}),
    ("audit_settings_changed", "audit: {window: 1h}\n" + BASE, set()),
    ("global_rules_changed",
     "relabel_configs: [{action: labeldrop, regex: instance}]\n" + BASE, set()),
    ("no_longer_audited", BASE.replace("audit: true", "audit: false"), {"shadow"}),
]  # fmt: skip


@pytest.mark.parametrize(("text", "kept"), [c[1:] for c in RELOADS], ids=[c[0] for c in RELOADS])
def test_audit_keeps_counts_only_under_the_same_rules(text: str, kept: set[str]) -> None:
    from rwrouter.config import parse_config
    from rwrouter.sending.audit import Audit

    audit = Audit(parse_config(BASE, env={}), now=0.0)
    routed = share(("gpu", 0, 1), ("gpu", 1, 1))
    audit.observe([("ws", routed), ("shadow", routed)], 0.0)
    audit.configure(parse_config(text, env={}), now=1.0)
    counted = {name: snap.active_series for name, snap in audit.snapshots(2.0).items()}
    assert {name for name, n in counted.items() if n} == kept
    assert set(counted) == set(audit.audited)
