"""The audit's pure core (rwrouter.audit): active series per metric name over a window, the
merge of several workers' counts, tiered monthly cost, the report and its table."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rwrouter.audit import (
    GENERATIONS,
    OTHER,
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
from rwrouter.audit import active as active_module
from rwrouter.audit import count as count_module
from rwrouter.audit.report import Report
from rwrouter.config import AuditConfig, PriceTier
from rwrouter.config.model import AMP_PRICE_TIERS
from rwrouter.routing import Route, Router
from rwrouter.wire import decompress
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.index import Frames
from tests.support.series import Series, build_body

WINDOW = 800.0  # seconds: generations of 100 s
SPAN = WINDOW / GENERATIONS


def share(*series: tuple[str, int, int]) -> Frames:
    """A routed share of series (metric name, instance number, samples)."""
    body = build_body(
        [
            Series(
                (("__name__", name), ("instance", str(i))), tuple((1000 + k, 1.0) for k in range(n))
            )
            for name, i, n in series
        ]
    )
    return (
        Router(global_rules=(), routes=[Route(name="d")])
        .route(decompress(body, max_decoded_bytes=1 << 24))
        .shares[0]
    )


def counts(snap: Snapshot) -> dict[str, int]:
    return {name: c.active_series for name, c in snap.names.items() if c.active_series}


def new(**kw: float) -> ActiveSeries:
    args = {"window": WINDOW, "max_series": 1000, "rate_window": 100.0, "now": 0.0, **kw}
    return ActiveSeries(
        window=args["window"],
        max_series=int(args["max_series"]),
        rate_window=args["rate_window"],
        now=args["now"],
    )


# ---------------------------------------------------------------------------------------------
# Active series

ACTIVE_CASES = [
    # id, sightings [(time s, [(name, instance, samples)])], snapshot time, expected active
    (
        "distinct_series_per_name",
        [(0, [("gpu", 0, 1), ("gpu", 1, 1), ("net", 0, 1)])],
        1,
        {"gpu": 2, "net": 1},
    ),
    (
        "the_same_series_every_scrape_counts_once",
        [(t, [("gpu", 0, 1)]) for t in range(0, 700, 15)],
        700,
        {"gpu": 1},
    ),
    (
        "same_labels_other_name_is_another_series",
        [(0, [("a", 0, 1), ("b", 0, 1)])],
        1,
        {"a": 1, "b": 1},
    ),
    ("seen_within_the_window_counts", [(0, [("gpu", 0, 1)])], WINDOW - 1, {"gpu": 1}),
    ("forgotten_a_generation_after_the_window", [(0, [("gpu", 0, 1)])], WINDOW + SPAN, {}),
    (
        "seen_again_stays",
        [(0, [("gpu", 0, 1)]), (WINDOW - 1, [("gpu", 0, 1)])],
        2 * WINDOW - 2,
        {"gpu": 1},
    ),
    (
        "churned_series_expire_new_ones_count",
        [(0, [("job", i, 1) for i in range(5)]), (WINDOW, [("job", i, 1) for i in range(5, 8)])],
        WINDOW + SPAN + 1,
        {"job": 3},
    ),
    ("idle_longer_than_everything", [(0, [("gpu", 0, 1)])], 100 * WINDOW, {}),
]


@pytest.mark.parametrize(
    ("sightings", "at", "expected"), [c[1:] for c in ACTIVE_CASES], ids=[c[0] for c in ACTIVE_CASES]
)
def test_active_series(
    sightings: list[tuple[float, list[tuple[str, int, int]]]], at: float, expected: dict[str, int]
) -> None:
    active = new()
    for now, series in sightings:
        routed = share(*series)
        active.observe(routed.body, routed.index, now)
    snap = active.snapshot(at)
    assert counts(snap) == expected
    assert snap.active_series == sum(expected.values()) == len(active)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 9)), max_size=60), st.integers(0, 4000)
)
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


RATE_CASES = [
    # id, rate window s, arrivals (time s, samples of "gpu"), snapshot time, expected samples/s
    # Buckets of rate_window / 5 = 20 s; the rate is over [start of the bucket 100 s ago, now],
    # or from the first share (its samples the base, as a rate() from a first point).
    ("steady_stream_exact", 100.0, [(t, 8) for t in range(0, 400, 10)], 400.0, 0.8),
    ("steady_from_the_start_exact", 100.0, [(t, 8) for t in range(0, 60, 15)], 45.0, 8 / 15),
    ("one_share_is_no_rate", 100.0, [(0, 10)], 5.0, 0.0),
    ("early_over_at_least_15_s", 100.0, [(0, 10), (3, 10)], 5.0, 10 / 15),
    ("early_over_at_least_a_short_bucket", 10.0, [(0, 10), (1, 10)], 1.0, 10 / 2),
    ("idle_start_does_not_count", 100.0, [(60, 10), (75, 10)], 75.0, 10 / 15),
    ("a_burst_at_the_start_is_not_thousands", 100.0, [(0, 1), (0.004, 1)], 0.004, 1 / 15),
    # 1/s for 90 s, 300 s of silence nobody read, 1/s again for 20 s: over [348, 410]
    (
        "after_an_unread_silence",
        60.0,
        [(t, 1) for t in [*range(90), *range(390, 410)]],
        410.0,
        20 / 62,
    ),
    ("long_after_everything_stopped", 100.0, [(t, 8) for t in range(0, 100, 10)], 400.0, 0.0),
    # (a capture of concurrent requests): over [the earliest, now]
    ("out_of_order_times_count_in_the_newest_bucket", 100.0, [(50, 4), (10, 4)], 60.0, 4 / 50),
]


@pytest.mark.parametrize(
    ("rate_window", "arrivals", "at", "expected"),
    [c[1:] for c in RATE_CASES],
    ids=[c[0] for c in RATE_CASES],
)
def test_samples_per_second(
    rate_window: float, arrivals: list[tuple[float, int]], at: float, expected: float
) -> None:
    active = new(rate_window=rate_window)
    for now, samples in arrivals:
        routed = share(("gpu", 0, samples))
        active.observe(routed.body, routed.index, float(now))
    rate = active.snapshot(at).names.get("gpu")
    assert (rate.samples_per_second if rate else 0.0) == pytest.approx(expected)
    assert active.samples == sum(n for _, n in arrivals)


def test_rates_do_not_depend_on_reads() -> None:
    read, unread = new(rate_window=60.0), new(rate_window=60.0)
    for t in range(0, 600, 7):
        routed = share(("gpu", 0, 3), ("net", 1, 1))
        read.observe(routed.body, routed.index, float(t))
        unread.observe(routed.body, routed.index, float(t))
        read.snapshot(float(t) + 1)
    assert read.snapshot(601.0) == unread.snapshot(601.0)


def test_a_long_metric_name_is_found_and_a_missing_one_is_never_routed() -> None:
    routed = share(("", 0, 1))  # no __name__: the routed share is empty (invalid)
    assert routed.series == 0
    active = new()
    for size in (200, 20_000, 100_000):  # a 2- and a 3-byte length
        long_name = "DCGM_FI_PROF_" + "X" * size
        routed = share((long_name, 0, 1), (long_name, 1, 1), ("short", 0, 1))
        active.observe(routed.body, routed.index, 0.0)
        assert counts(active.snapshot(1.0))[long_name] == 2


@pytest.mark.parametrize(
    ("window", "rate", "size"),
    [(0.0, 1.0, 1), (1.0, 0.0, 1), (1.0, 1.0, 0)],
    ids=["window", "rate_window", "max_series"],
)
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
    first, second = one.snapshot(10.0, keys=True), two.snapshot(20.0, keys=True)
    merged = merge([first, second])
    assert counts(merged) == {"gpu": 3, "net": 1}
    assert merged.names["gpu"].samples_per_second == pytest.approx(
        first.names["gpu"].samples_per_second + second.names["gpu"].samples_per_second
    )
    assert merged.names["gpu"].samples_per_second > 0
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
]


@pytest.mark.parametrize(
    ("samples", "tiers", "expected"), [c[1:] for c in COST_CASES], ids=[c[0] for c in COST_CASES]
)
def test_monthly_cost(samples: float, tiers: tuple[PriceTier, ...], expected: float) -> None:
    assert monthly_cost(samples, tiers) == pytest.approx(expected)


BOUNDED_LAST = (PriceTier(per_million=1, up_to_samples=5),)


@pytest.mark.parametrize(
    ("samples", "tiers"),
    [(-1.0, TIERS), (1.0, ()), (1.0, BOUNDED_LAST)],
    ids=["negative", "no_tiers", "bounded_last"],
)
def test_monthly_cost_rejects(samples: float, tiers: tuple[PriceTier, ...]) -> None:
    with pytest.raises(ValueError):
        monthly_cost(samples, tiers)


def test_a_month_is_730_hours() -> None:
    assert SECONDS_PER_MONTH == 2_628_000
    assert monthly_samples(1000.0) == 2.628e9


# ---------------------------------------------------------------------------------------------
# Report


def _report(top: int | None = None) -> Report:
    active = new(rate_window=20.0)  # buckets of 4 s
    a = share(*[("gpu", i, 1) for i in range(4)], ("net", 0, 8), ("net", 1, 8))
    active.observe(a.body, a.index, 0.0)
    active.observe(a.body, a.index, 4.0)
    snap = active.snapshot(4.0)  # gpu 1 sample/s, net 4 samples/s
    audit = AuditConfig(window=WINDOW, series_limit=100, price_tiers=TIERS)
    return build_report({"ws": snap}, audit=audit, shadow={"ws": True}, top=top)


def test_report_ranks_names_by_active_series_and_projects_cost() -> None:
    report = _report()
    json.dumps(report, allow_nan=False)
    (dest,) = report["destinations"]
    assert [m["name"] for m in dest["metrics"]] == ["gpu", "net"]
    assert (dest["active_series"], dest["series_limit_ratio"]) == (6, 0.06)
    assert dest["samples_per_second"] == pytest.approx(5.0)
    assert dest["monthly_samples"] == pytest.approx(5.0 * SECONDS_PER_MONTH)
    assert dest["monthly_cost"] == pytest.approx(monthly_cost(5.0 * SECONDS_PER_MONTH, TIERS))
    assert sum(m["monthly_cost"] for m in dest["metrics"]) == pytest.approx(dest["monthly_cost"])
    assert (dest["shadow"], dest["complete"], dest["capped"]) == (True, False, False)
    assert dest["metric_names"] == 2 and len(_report(top=1)["destinations"][0]["metrics"]) == 1


RANK_CASES = [
    ("series_then_samples", "series", ["b", "a", "c"]),
    ("samples_then_series", "samples", ["c", "b", "a"]),
]
METRICS = [
    {"name": "a", "active_series": 5, "samples_per_second": 1.0},
    {"name": "b", "active_series": 5, "samples_per_second": 2.0},
    {"name": "c", "active_series": 1, "samples_per_second": 9.0},
]


@pytest.mark.parametrize(
    ("by", "expected"), [c[1:] for c in RANK_CASES], ids=[c[0] for c in RANK_CASES]
)
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


def test_observed_counts_from_the_first_share_not_from_an_idle_start() -> None:
    active = new(window=20.0)
    assert active.snapshot(50.0).observed == 0.0  # nothing yet: nothing observed
    routed = share(("gpu", 0, 10))
    active.observe(routed.body, routed.index, 60.0)
    assert active.snapshot(65.0).observed == 5.0
    active.observe(routed.body, routed.index, 70.0)
    assert active.snapshot(75.0).observed == 15.0
    # No share for longer than the whole window (and its last generation): nothing is left,
    # and "observed" starts again from the next share.
    assert active.snapshot(200.0).observed == 0.0
    active.observe(routed.body, routed.index, 210.0)
    assert active.snapshot(212.0).observed == 2.0


@pytest.mark.parametrize(
    ("active", "limit", "text"),
    [
        (8, 50_000_000, "(<0.001% of"),
        (0, 10, "(0% of"),
        (4_194_304, 50_000_000, "(8.39% of"),
        (60, 50, "(120% of"),
        (1000, 100, "(1,000% of"),
    ],
    ids=["tiny_never_an_exponent", "zero", "some", "over", "ten_times"],
)
def test_table_percent_of_the_limit(active: int, limit: int, text: str) -> None:
    dest = {
        "name": "d",
        "shadow": False,
        "observed_seconds": 1.0,
        "complete": False,
        "capped": False,
        "active_series": active,
        "series_limit_ratio": active / limit,
        "samples_per_second": 0.0,
        "monthly_samples": 0.0,
        "monthly_cost": 0.0,
        "metric_names": 0,
        "metrics": [],
    }
    report = {
        **build_report({}, audit=AuditConfig(), shadow={}),
        "destinations": [dest],
        "series_limit": limit,
    }
    assert text in format_table(report)


# ---------------------------------------------------------------------------------------------
# Following a reload (rwrouter.audit.live.Audit.configure)

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
    ("audit_window_changed", "audit: {window: 1h}\n" + BASE, set()),
    (
        "only_prices_changed",
        "audit: {series_limit: 5, currency: EUR, price_tiers: [{per_million: 1}]}\n" + BASE,
        {"ws", "shadow"},
    ),
    (
        "global_rules_changed",
        "relabel_configs: [{action: labeldrop, regex: instance}]\n" + BASE,
        set(),
    ),
    ("no_longer_audited", BASE.replace("audit: true", "audit: false"), {"shadow"}),
]


@pytest.mark.parametrize(("text", "kept"), [c[1:] for c in RELOADS], ids=[c[0] for c in RELOADS])
def test_audit_keeps_counts_only_under_the_same_rules(text: str, kept: set[str]) -> None:
    from rwrouter.audit.live import Audit
    from rwrouter.config import parse_config

    audit = Audit(parse_config(BASE, env={}), now=0.0)
    routed = share(("gpu", 0, 1), ("gpu", 1, 1))
    audit.observe([("ws", routed), ("shadow", routed)], 0.0)
    audit.configure(parse_config(text, env={}), now=1.0)
    counted = {name: snap.active_series for name, snap in audit.snapshots(2.0).items()}
    assert {name for name, n in counted.items() if n} == kept
    assert set(counted) == set(audit.audited)


def test_memory_is_bounded_names_beyond_max_series_count_as_other() -> None:
    active = new(max_series=10, window=80.0, rate_window=10.0)  # generations of 10 s
    routed = share(*[(f"name_{i}", 0, 1) for i in range(25)])
    active.observe(routed.body, routed.index, 0.0)
    active.observe(routed.body, routed.index, 2.0)
    snap = active.snapshot(2.0)
    assert (snap.active_series, snap.capped) == (10, True)
    assert len(snap.names) == 11 and OTHER in snap.names  # 10 names, then the rest as one
    # OTHER counts samples (15 names over one 2 s bucket), never series: counting them
    # under OTHER and again under their own name later would count them twice.
    other = snap.names[OTHER]
    assert (other.active_series, other.keys) == (0, None)
    assert other.samples_per_second == pytest.approx(15 / 2)


@pytest.mark.parametrize("max_series", [10, 1000, 3000])
def test_names_are_reused_never_a_series_counted_twice(max_series: int) -> None:
    """Steady names plus waves of one-off names, more names than max_series: the ids of
    expired names are reused (OTHER only while names are full), the count is never above
    the series seen within the window."""
    active = new(max_series=max_series, window=80.0, rate_window=10.0)  # generations of 10 s
    steady = [(f"steady_{i}", 0, 1) for i in range(max_series // 2)]
    seen: dict[str, float] = {}
    for wave in range(12):
        now = wave * 50.0
        one_off = [(f"w{wave}_{i}", 0, 1) for i in range(max_series)]
        routed = share(*steady, *one_off)
        active.observe(routed.body, routed.index, now)
        for name, _, _ in (*steady, *one_off):
            seen[name] = now
        snap = active.snapshot(now)
        within = sum(now - t < 80.0 for t in seen.values())
        assert snap.active_series <= within
        assert snap.active_series >= len(steady)  # the steady ones always count
    assert len(active._names) <= max_series + 1  # names bounded (+ OTHER)


def test_names_without_series_or_recent_samples_are_forgotten() -> None:
    active = new(max_series=10_000, window=80.0, rate_window=10.0)
    for round_ in range(4):  # 3,000 new names a round; each round's expire before the next
        routed = share(*[(f"r{round_}_{i}", 0, 1) for i in range(3000)])
        active.observe(routed.body, routed.index, round_ * 200.0)
    assert len(active._names) == 3000  # the dead names of earlier rounds were forgotten
    snap = active.snapshot(601.0)
    assert snap.active_series == 3000 and set(snap.names) == {f"r3_{i}" for i in range(3000)}
    keyed = active.snapshot(601.0, keys=True)
    assert all(len(c.keys or ()) == 1 for c in keyed.names.values())  # renumbered consistently


NAME_CASES = [
    ("plain", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL"),
    ("terminal_escape", "evil\x1b[2Jname", "evil\\x1b[2Jname"),
    ("newline", "a\nb", "a\\nb"),
    ("huge", "N" * 18_000, "N" * 60 + "... (18,000 chars)"),
]


@pytest.mark.parametrize(
    ("name", "shown"), [c[1:] for c in NAME_CASES], ids=[c[0] for c in NAME_CASES]
)
def test_table_names_are_safe_for_a_terminal(name: str, shown: str) -> None:
    report = _report()
    report["destinations"][0]["metrics"][0]["name"] = name
    lines = format_table(report).splitlines()
    assert any(line.startswith(f"  {shown} ") for line in lines)
    assert all(c.isprintable() for line in lines for c in line)


def test_reranked_orders_then_cuts() -> None:
    from rwrouter.audit import reranked

    report = _report()
    by_samples = reranked(report, "samples", 1)["destinations"][0]["metrics"]
    assert [m["name"] for m in by_samples] == ["net"]
    assert [m["name"] for m in reranked(report, "series", 0)["destinations"][0]["metrics"]] == [
        "gpu",
        "net",
    ]


@pytest.mark.parametrize(
    ("workers", "expected", "line"),
    [
        (1, 1, None),
        (2, 2, "counted over 2 workers"),
        (1, 2, "only 1 of 2 workers answered: the counts are low"),
    ],
    ids=["one_process", "all_workers", "a_worker_missing"],
)
def test_table_says_how_many_workers_counted(workers: int, expected: int, line: str | None) -> None:
    report = build_report(
        {}, audit=AuditConfig(), shadow={}, workers=workers, workers_expected=expected
    )
    first = format_table(report).splitlines()[0]
    assert first.startswith(line) if line else first.startswith("no audited destination")


COUNT_CASES = [
    ("zero", 0, "0"),
    ("hundreds", 999, "999"),
    ("rounds_up_a_unit", 999_999, "1 M"),
    ("millions", 1234567, "1.23 M"),
    ("billions", 2e9, "2 B"),
    ("hundreds_of_billions", 252e9, "252 B"),
    ("rounds_to_billions", 999_999_999, "1 B"),
    ("trillions", 1.5e13, "15 T"),
]


@pytest.mark.parametrize(
    ("n", "text"), [c[1:] for c in COUNT_CASES], ids=[c[0] for c in COUNT_CASES]
)
def test_counts_never_in_exponent_form(n: float, text: str) -> None:
    from rwrouter.audit.report import _count

    assert _count(n) == text


# ---------------------------------------------------------------------------------------------
# the compiled count: the same counts and state as the reference loop

sighting_strategy = st.lists(
    st.tuples(
        st.floats(0, 3 * WINDOW),  # when
        st.lists(
            st.tuples(
                st.sampled_from(["gpu", "net", "mem", "", "cpu", "disk"]),
                st.integers(0, 9),
                st.integers(1, 3),
            ),
            max_size=12,
        ),
    ),
    max_size=8,
)


def _state(a: ActiveSeries) -> tuple[object, ...]:
    return (
        a._generations,
        a._ids,
        a._names,
        a._active,
        a._counted,
        a._other,
        a._held,
        a._samples,
        a._capped_until,
        len(a),
    )


@pytest.mark.skipif(compiled("count_share") is None, reason="accelerator not built")
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sightings=sighting_strategy, max_series=st.integers(1, 12))
def test_the_compiled_count_equals_the_reference(
    sightings: list[tuple[float, list[tuple[str, int, int]]]],
    max_series: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random shares, few enough series and names allowed that the bound and OTHER are met:
    the compiled loop leaves the same counts and state as the pure one, share by share."""
    shares = [(now, share(*series)) for now, series in sorted(sightings) if series]
    compiled_state, pure = new(max_series=max_series), new(max_series=max_series)
    for now, routed in shares:
        compiled_state.observe(routed.body, routed.index, now)
        with monkeypatch.context() as patched:
            patched.setattr(active_module, "count_share", count_module.count_share_py)
            pure.observe(routed.body, routed.index, now)
        assert _state(compiled_state) == _state(pure)
    end = 4 * WINDOW
    assert compiled_state.snapshot(end) == pure.snapshot(end)


@pytest.mark.skipif(compiled("count_share") is None, reason="accelerator not built")
def test_the_compiled_count_hands_an_index_past_its_body_to_the_reference() -> None:
    """An index whose frames run past the body (never a routed share): the reference answers,
    the same way."""
    routed = share(("gpu", 0, 1), ("net", 1, 2))
    count_share = compiled("count_share")
    assert count_share is not None

    def run(count: Any) -> tuple[object, ...]:
        added: list[bytes] = []

        def add_name(raw: bytes) -> tuple[int, None]:
            added.append(raw)
            return 0, None

        state: tuple[Any, ...] = ({b"gpu": 0}, {}, [], [0, 0], [0, 0], None, 0, 9)
        return count(routed.body[:-1], bytes(routed.index), *state, add_name), state, added

    assert run(count_share) == run(count_module.count_share_py)
