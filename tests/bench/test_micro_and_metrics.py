"""bench micro on a tiny workload, and the runner's reading of rwrouter's /metrics.

Correctness only (the figures exist, A/B counts match the workload, the cache stays bounded);
never speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import contenders, micro, report
from bench.workload import load_or_generate


@pytest.mark.timeout(120)
def test_micro_tiny_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "micro.json"
    status = micro.main(
        [
            "--route-nodes",
            "1",
            "--rules",
            "1",
            "3",
            "--sign-iterations",
            "5",
            "--memory-nodes",
            "1",
            "--churn-nodes",
            "4",
            "--churn-scrapes",
            "25",
            "--churn-cache-size",
            "8000",
            "--churn-max-age",
            "300",
            "--audit-nodes",
            "1",
            "--json",
            str(out),
        ]
    )
    assert status == 0
    text = capsys.readouterr().out
    assert text.startswith("rwrouter accelerator: ")
    report = json.loads(out.read_text())
    workload, _ = load_or_generate(1, 1, 2)
    half = len(workload.bodies) // 2
    for row in report["route"]:
        assert row["series"] == workload.series_per_scrape
        assert row["to_a"] + row["to_b"] == row["series"]
        # scrape 1 of the workload: A's expected share is half of the two scrapes'
        assert row["to_a"] == workload.samples_a // 2, row
        assert row["cold_samples_per_cpu_s"] > 0 and row["warm_samples_per_cpu_s"] > 0
    assert half > 0
    assert report["sigv4"]["us_per_signature"] > 0
    assert report["memory"]["label_sets"] == workload.series_per_scrape
    audit = report["audit"]
    assert audit["series"] == workload.series_per_scrape  # the same series both scrapes
    assert audit["first_sight_us_per_series"] > 0 and audit["bytes_per_series"] > 0
    assert report["memory"]["cached_bytes_per_set"] > 0
    by_entries = report["churn"]["max_entries"]
    assert by_entries["bounded"]
    assert all(r["cache_size"] <= 8000 for r in by_entries["rows"])
    by_age = report["churn"]["max_age"]
    assert by_age["bounded"]
    last = by_age["rows"][-1]
    assert last["distinct_label_sets_seen"] > last["cache_size"]  # old pods were forgotten


EXPOSITION_TWO_WORKERS = """\
# HELP rwrouter_build_info Build information.
# TYPE rwrouter_build_info gauge
rwrouter_build_info{accelerated="true",version="0.3.0",worker="0"} 1.0
rwrouter_build_info{accelerated="true",version="0.3.0",worker="1"} 1.0
# HELP rwrouter_received_requests_total Remote write requests received.
# TYPE rwrouter_received_requests_total counter
rwrouter_received_requests_total{code="204",worker="0"} 600.0
rwrouter_received_requests_total{code="503",worker="0"} 2.0
rwrouter_received_requests_total{code="204",worker="1"} 1460.0
# HELP rwrouter_received_samples_total Samples received.
# TYPE rwrouter_received_samples_total counter
rwrouter_received_samples_total{worker="0"} 1200000.0
rwrouter_received_samples_total{worker="1"} 2888000.0
# HELP rwrouter_relabel_cache_entries Label sets cached.
# TYPE rwrouter_relabel_cache_entries gauge
rwrouter_relabel_cache_entries{worker="0"} 204400.0
rwrouter_relabel_cache_entries{worker="1"} 204400.0
# HELP rwrouter_relabel_cache_lookups_total Lookups.
# TYPE rwrouter_relabel_cache_lookups_total counter
rwrouter_relabel_cache_lookups_total{result="hit",worker="0"} 10.0
rwrouter_relabel_cache_lookups_total{result="miss",worker="0"} 5.0
rwrouter_relabel_cache_lookups_total{result="hit",worker="1"} 20.0
# HELP rwrouter_worker_up Worker answered.
# TYPE rwrouter_worker_up gauge
rwrouter_worker_up{worker="0"} 1.0
rwrouter_worker_up{worker="1"} 1.0
"""


def test_parse_router_metrics_per_worker() -> None:
    rm = contenders.parse_router_metrics(EXPOSITION_TWO_WORKERS)
    assert rm["accelerated"] == {"0": "true", "1": "true"}
    assert rm["requests_by_worker"] == {"0": 602, "1": 1460}
    assert rm["requests_by_code"] == {"204": 2060, "503": 2}
    assert rm["samples_by_worker"] == {"0": 1_200_000, "1": 2_888_000}
    assert rm["cache_lookups"] == {"hit": 30, "miss": 5}
    lines = contenders.metrics_summary(rm)
    assert lines[0] == "accelerated (rwrouter_build_info): 0=true, 1=true"
    assert lines[1].startswith("write requests received per worker: 0: 602 (29%)")


def test_parse_router_metrics_single_process_pure_path() -> None:
    text = (
        "# TYPE rwrouter_build_info gauge\n"
        'rwrouter_build_info{accelerated="false",version="0.3.0"} 1.0\n'
        "# TYPE rwrouter_received_requests_total counter\n"
        'rwrouter_received_requests_total{code="204"} 7.0\n'
    )
    rm = contenders.parse_router_metrics(text)
    assert rm["accelerated"] == {"all": "false"}
    assert rm["requests_by_worker"] == {"all": 7}
    assert contenders.metrics_summary(rm)[0] == "accelerated (rwrouter_build_info): false"


def test_parse_router_metrics_series_budget() -> None:
    text = (
        "# TYPE rwrouter_series_limited counter\n"
        'rwrouter_series_limited_total{destination="A",action="fallback"} 20.0\n'
        "# TYPE rwrouter_samples_dropped counter\n"
        'rwrouter_samples_dropped_total{destination="A",reason="series_limit"} 40.0\n'
        'rwrouter_samples_dropped_total{destination="A",reason="relabel"} 3996.0\n'
        "# TYPE rwrouter_series_limit_active_series gauge\n"
        'rwrouter_series_limit_active_series{destination="A"} 172.0\n'
    )
    rm = contenders.parse_router_metrics(text)
    assert rm["series_limited"] == {"A": 20}
    assert rm["series_limit_samples"] == {"A": 40}  # not the relabel drops
    assert rm["series_limit_active"] == {"A": 172}
    assert contenders.metrics_summary(rm) == [
        "accelerated: not exposed by this rwrouter",
        "series budget: A: 172 active, 20 series over it (40 samples)",
    ]


ROUND_CASES = [
    # id, (vmagent, rwrouter) samples per CPU-second by round, medians, ratio line
    ("one_round", [(1.0, 2.0)], (1.0, 2.0), "rwrouter/vmagent by round: 2.00 (median 2.00)"),
    (
        "three_rounds",
        [(1.0, 1.5), (2.0, 2.0), (1.5, 3.0)],
        (1.5, 2.0),
        "rwrouter/vmagent by round: 1.50, 1.00, 2.00 (median 1.50)",
    ),
    (
        "even_count_takes_the_lower_middle",
        [(4.0, 1.0), (3.0, 2.0)],
        (3.0, 1.0),
        "rwrouter/vmagent by round: 0.25, 0.67 (median 0.25)",
    ),
]


@pytest.mark.parametrize(
    ("rates", "medians", "ratio_line"),
    [c[1:] for c in ROUND_CASES],
    ids=[c[0] for c in ROUND_CASES],
)
def test_rounds_median_run_and_ratio_per_round(
    rates: list[tuple[float, float]], medians: tuple[float, float], ratio_line: str
) -> None:
    rounds = [
        {
            "vmagent": report.Measurement("vmagent", samples_per_cpu_second=v),
            "rwrouter": report.Measurement("rwrouter", samples_per_cpu_second=r),
        }
        for v, r in rates
    ]
    chosen = report.median_round(rounds)
    assert (
        chosen["vmagent"].samples_per_cpu_second,
        chosen["rwrouter"].samples_per_cpu_second,
    ) == medians
    assert any(r["vmagent"] is chosen["vmagent"] for r in rounds)  # a real run, not a mix
    assert report.rounds_summary(rounds).splitlines()[-1] == ratio_line
