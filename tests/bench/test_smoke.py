"""The benchmark runner end to end in --smoke mode: every scenario, real vmagent, real rwrouter,
real sinks.

Asserts correctness only: every run of every scenario (warm, rw2, million, churn, audited,
budgeted) delivered exactly the expected samples to A and B as remote write 1.0, the same
samples by the sinks' digests (churn: vmagent's digests equal rwrouter's, after the 10 mixed
relabel rules; budgeted: A and B together); the primed runs measured their first scrape
apart; every RW 2.0 answer carried exact Written headers; vmagent sent remote write 1.0 from
its first request and retried nothing; the budgeted run held A to its series_limit and sent
the rest to B; the versions are recorded, every scenario has its section, its JSON entry and
its summary line, and the run exits cleanly. Never speed (the targets may be met or not).
The vmagent is the one scripts/build-peers built: without it the test skips locally and
fails when ``CI`` is
set (CI must not silently skip a real-peer test).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.peers import peer_binary, peers

REPO = Path(__file__).resolve().parents[2]
ROWS = (
    "samples per CPU-second",
    "CPU seconds",
    "wall seconds (load -> delivered)",
    "p50 latency ms",
    "p99 latency ms",
    "peak RSS MiB",
    "request bytes per sample (snappy)",
)
SCENARIOS = ["warm", "rw2", "million", "churn", "audited", "budgeted"]
SUMMARY = [
    "warm",
    "rw2",
    "million cold",
    "million steady",
    "churn",
    "audited",
    "audited (reference)",
    "budgeted",
    "budgeted (reference)",
]
RUNS = [
    "fleet/vmagent",
    "fleet/rwrouter",
    "fleet/rwrouter-rw2",
    "fleet/rwrouter-audit",
    "fleet/rwrouter-budget",
    "million/vmagent",
    "million/rwrouter",
    "churn/vmagent",
    "churn/rwrouter",
]
RW1_CONTENT_TYPE = "application/x-protobuf"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any], str]:
    """One ``python -m bench --smoke`` run: its stdout lines, its JSON, the vmagent path."""
    vmagent = peer_binary("vmagent")
    out = tmp_path_factory.mktemp("smoke") / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines(), json.loads(out.read_text()), vmagent


def check_run(name: str, m: dict[str, Any], requests: int) -> None:
    """What every run must show, whatever its scenario."""
    assert m["ok"], (name, m["error"], m["notes"])
    assert (m["delivered_a"], m["delivered_b"]) == (m["expected_a"], m["expected_b"]), name
    assert m["expected_a"] > 0 and m["expected_b"] > 0, name
    # The sinks' sample digests (budgeted: A's share depends on the arrival order; together
    # A and B hold every sample once).
    assert m["content"] == ("same (A+B)" if name.endswith("-budget") else "same"), name
    assert m["digests"] is not None, name
    assert m["sink_errors"] == 0, name
    assert set(m["sink_content_types"]) == {RW1_CONTENT_TYPE}, name  # A and B are RW 1.0
    assert m["driver"]["lost"] == 0, name
    assert m["driver"]["requests"] == requests, name
    assert m["driver"]["written_missing"] == m["driver"]["written_wrong"] == 0, name
    assert m["cpu_seconds"] > 0 and m["peak_rss_mib"] > 0, name
    assert m["exit_status"] is not None, name  # stopped, not left running


@pytest.mark.timeout(240)
def test_smoke_runs_every_scenario(smoke: tuple[list[str], dict[str, Any], str]) -> None:
    lines, report, vmagent = smoke
    assert report["scenario_names"] == SCENARIOS
    assert set(report["scenarios"]) == set(SCENARIOS)
    [runs] = report["rounds"]  # --smoke: one round
    assert sorted(runs) == sorted(RUNS)
    for name, m in runs.items():
        workload = report["workloads"][name.split("/")[0]]
        check_run(name, m, workload["requests"])
    for scenario in SCENARIOS:
        header = lines.index(next(ln for ln in lines if ln.startswith(f"== {scenario}: ")))
        table = lines[header:]
        columns = next(
            ln for ln in table if ln.split()[:1] == [report["scenarios"][scenario]["runs"][0]]
        )
        body = table[table.index(columns) + 1 :][: len(ROWS)]
        assert [ln[: len(label)] for ln, label in zip(body, ROWS, strict=True)] == list(ROWS)
    summary = lines[lines.index("== summary (issue 15's targets)") + 1 :]
    assert [ln.split("  ")[0].strip() for ln in summary[1 : 1 + len(SUMMARY)]] == SUMMARY
    assert [f["label"] for f in report["summary"]] == SUMMARY
    assert all(f["rate"] is not None for f in report["summary"])

    pinned = peers()["vmagent"].version
    assert report["peers"]["vmagent"]["path"] == vmagent
    assert pinned in report["peers"]["vmagent"]["version"]
    assert f"vmagent: {vmagent}: {report['peers']['vmagent']['version']}" in lines
    assert report["rwrouter_version"] and report["rwrouter_version"] != "unknown"
    for key in ("fleet/vmagent", "million/vmagent", "churn/vmagent"):
        own = runs[key]["router_metrics"]
        assert own["version"] == pinned  # vm_app_version of the process that ran
        assert set(own["requests_by_code"]) == {"2XX"}, own  # no zstd refused by a sink
        assert (own["retries"], own["packets_dropped"]) == (0, 0)


def test_smoke_rw2_and_primed_runs(smoke: tuple[list[str], dict[str, Any], str]) -> None:
    _, report, _ = smoke
    [runs] = report["rounds"]
    requests = report["workloads"]["fleet"]["requests"]
    rw2 = runs["fleet/rwrouter-rw2"]
    assert rw2["input"] == "rw2"
    assert rw2["driver"]["message"] == "io.prometheus.write.v2.Request"
    assert rw2["driver"]["written_exact"] == requests  # every answer counted its samples
    assert rw2["router_metrics"]["requests_by_protocol"] == {"2.0": requests}
    assert runs["fleet/rwrouter"]["router_metrics"]["requests_by_protocol"] == {"1.0": requests}
    for key in ("million/vmagent", "million/rwrouter", "churn/vmagent", "churn/rwrouter"):
        m = runs[key]
        workload = report["workloads"][key.split("/")[0]]
        per_scrape = workload["series_per_scrape"]
        assert m["prime_samples"] == per_scrape, key  # the first scrape, alone
        assert m["samples_sent"] == workload["samples_sent"] - per_scrape, key
        assert m["prime_cpu_seconds"] > 0 and m["prime_samples_per_cpu_second"] > 0, key
        assert [p["requests"] for p in m["driver"]["phases"]] == [
            workload["requests"] // workload["scrapes"],
            workload["requests"] - workload["requests"] // workload["scrapes"],
        ], key
    for key in ("fleet/vmagent", "fleet/rwrouter"):
        assert runs[key]["prime_samples"] == 0 and len(runs[key]["driver"]["phases"]) == 1


def test_smoke_churn_routers_deliver_the_same(smoke: tuple[list[str], dict[str, Any], str]) -> None:
    lines, report, _ = smoke
    [runs] = report["rounds"]
    vm, rw = runs["churn/vmagent"], runs["churn/rwrouter"]
    assert vm["digests"] == rw["digests"]  # the same series and samples after the 10 rules
    assert report["content_problems"] == []
    assert not any("MISMATCH" in line for line in lines)
    churned = report["workloads"]["churn"]
    assert 0.25 < churned["new_fraction"] < 0.42  # about a third new per scrape
    # B drops the kube-system series: fewer delivered than sent, both routers alike.
    assert rw["expected_a"] + rw["expected_b"] < churned["samples_sent"]
    cache = rw["router_metrics"]["cache_entries_by_worker"]
    assert sum(cache.values()) <= churned["distinct_label_sets"] // 2  # the bounded cache


def test_smoke_budget_holds_a_to_its_limit(smoke: tuple[list[str], dict[str, Any], str]) -> None:
    _, report, _ = smoke
    [runs] = report["rounds"]
    fleet = report["workloads"]["fleet"]
    plain, budget = runs["fleet/rwrouter"], runs["fleet/rwrouter-budget"]
    series_a = plain["expected_a"] // fleet["scrapes"]  # A's series without a budget
    limit = int(series_a * 0.9)
    assert budget["delivered_a"] == limit * fleet["scrapes"] < plain["delivered_a"]
    assert budget["delivered_a"] + budget["delivered_b"] == fleet["samples"]
    own = budget["router_metrics"]
    assert own["series_limited"] == {"A": series_a - limit}
    assert own["series_limit_samples"] == {"A": (series_a - limit) * fleet["scrapes"]}
    assert own["series_limit_active"] == {"A": limit}
    assert "series_limited" not in plain["router_metrics"]
