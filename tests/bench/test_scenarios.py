"""The scenarios of ``python -m bench`` without running a router: their selection and shared
runs, the summary's ratios and targets, churn's content comparison, the churning workload
(deterministic, a third new per scrape, what A and B get) and its rules in both routers'
configurations, the budgeted run's limit, expectation and checks."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from bench import churn, contenders, runner, scenarios
from bench.measure import digest_sum, expected_digests
from bench.report import Measurement
from bench.sink import DIGEST_MASK, sample_digest
from bench.workload import SERIES_PER_NODE, generate, is_destination_a
from rwrouter.config.load import load_config
from rwrouter.relabel import parse_relabel_configs
from rwrouter.wire import remote_pb2

SELECT_CASES = [
    ("all", "all", ["warm", "rw2", "million", "churn", "audited", "budgeted"]),
    ("two", "churn,warm", ["warm", "churn"]),
    ("spaces", "audited, rw2", ["rw2", "audited"]),
]


@pytest.mark.parametrize(
    ("text", "names"), [c[1:] for c in SELECT_CASES], ids=[c[0] for c in SELECT_CASES]
)
def test_select(text: str, names: list[str]) -> None:
    assert [s.name for s in scenarios.select(text)] == names


@pytest.mark.parametrize("text", ["warm,cold", "", ","], ids=["unknown", "empty", "comma"])
def test_select_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        scenarios.select(text)


RUNS_CASES = [
    (
        "warm-audited-share",
        "warm,audited",
        None,
        ["fleet/vmagent", "fleet/rwrouter", "fleet/rwrouter-audit"],
    ),
    ("rw2", "rw2", None, ["fleet/rwrouter", "fleet/rwrouter-rw2"]),
    (
        "budgeted-shares-plain",
        "budgeted,warm",
        None,
        ["fleet/vmagent", "fleet/rwrouter", "fleet/rwrouter-budget"],
    ),
    ("budgeted-only-rwrouter", "budgeted", "rwrouter", ["fleet/rwrouter", "fleet/rwrouter-budget"]),
    ("only-vmagent", "all", "vmagent", ["fleet/vmagent", "million/vmagent", "churn/vmagent"]),
    (
        "all",
        "all",
        None,
        [
            "fleet/vmagent",
            "fleet/rwrouter",
            "fleet/rwrouter-rw2",
            "million/vmagent",
            "million/rwrouter",
            "churn/vmagent",
            "churn/rwrouter",
            "fleet/rwrouter-audit",
            "fleet/rwrouter-budget",
        ],
    ),
]


@pytest.mark.parametrize(
    ("text", "only", "keys"), [c[1:] for c in RUNS_CASES], ids=[c[0] for c in RUNS_CASES]
)
def test_runs_of_each_once(text: str, only: str | None, keys: list[str]) -> None:
    assert scenarios.runs_of(scenarios.select(text), only) == keys


ARGS_CASES = [
    ("default", [], 5, "all"),
    ("smoke", ["--smoke"], 1, "all"),
    ("rounds", ["--smoke", "--rounds", "2", "--scenarios", "churn"], 2, "churn"),
]


@pytest.mark.parametrize(
    ("argv", "rounds", "text"), [c[1:] for c in ARGS_CASES], ids=[c[0] for c in ARGS_CASES]
)
def test_parse_args(argv: list[str], rounds: int, text: str) -> None:
    args = runner.parse_args(argv)
    assert args.rounds == rounds
    assert args.selected == scenarios.select(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["--scenarios", "cold"],
        ["--scenarios", "million", "--scrapes", "1"],
    ],
    ids=["unknown-scenario", "primed-needs-two-scrapes"],
)
def test_parse_args_refuses(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        runner.parse_args(argv)


def run(name: str, rate: float, p99: float = 10.0, rss: float = 100.0) -> Measurement:
    return Measurement(name, samples_per_cpu_second=rate, p99_ms=p99, peak_rss_mib=rss)


LINE = scenarios.SCENARIOS["warm"].lines[0]  # samples >= 1.5x, p99 <= 1x
TARGET_CASES = [
    ("met", [(1.0, 2.0), (1.0, 1.6), (1.0, 1.5)], 1.6, True),
    ("rate-below", [(1.0, 1.4), (1.0, 1.6), (1.0, 1.2)], 1.4, False),
]


@pytest.mark.parametrize(
    ("pairs", "rate", "met"), [c[1:] for c in TARGET_CASES], ids=[c[0] for c in TARGET_CASES]
)
def test_line_figures_median_of_round_ratios(
    pairs: list[tuple[float, float]], rate: float, met: bool
) -> None:
    rounds = [{LINE.den: run(LINE.den, v), LINE.num: run(LINE.num, r)} for v, r in pairs]
    figures = scenarios.line_figures(LINE, rounds)
    assert figures["rate"] == pytest.approx(rate)
    assert figures["p99"] == figures["rss"] == 1.0
    assert figures["met"] is met
    assert [t["target"] for t in figures["targets"]] == ["samples >= 1.5x", "p99 <= 1x"]
    table = scenarios.summary_table([figures]).splitlines()
    assert table[0].split()[:3] == ["scenario", "ratio", "samples/CPU-s"]
    assert table[1].split()[:3] == ["warm", "rwrouter/vmagent", f"{rate:.2f}"]
    assert table[1].endswith("met" if met else "NOT MET")


def test_million_cold_uses_the_first_scrape() -> None:
    cold = scenarios.SCENARIOS["million"].lines[0]
    rw = Measurement(cold.num, samples_per_cpu_second=9.0, prime_samples_per_cpu_second=3.0)
    vm = Measurement(cold.den, samples_per_cpu_second=1.0, prime_samples_per_cpu_second=2.0)
    assert scenarios.line_figures(cold, [{cold.num: rw, cold.den: vm}])["rate"] == 1.5


def churn_run(name: str, router: str, digests: tuple[str, str] | None) -> Measurement:
    return Measurement(name, ok=True, router=router, digests=digests)


CONTENT_CASES = [
    ("same", [("aa", "bb"), ("aa", "bb"), ("aa", "bb"), ("aa", "bb")], 0),
    ("rwrouter-differs", [("aa", "bb"), ("aa", "bc"), ("aa", "bb"), ("aa", "bb")], 1),
    ("missing", [("aa", "bb"), None, ("aa", "bb"), ("aa", "bb")], 1),
    ("second-round-vmagent", [("aa", "bb"), ("aa", "bb"), ("ab", "bb"), ("aa", "bb")], 1),
]


@pytest.mark.parametrize(
    ("digests", "mismatches"), [c[1:] for c in CONTENT_CASES], ids=[c[0] for c in CONTENT_CASES]
)
def test_churn_content_compares_vmagent_and_rwrouter(
    digests: list[tuple[str, str] | None], mismatches: int
) -> None:
    keys = [("churn/vmagent", "vmagent"), ("churn/rwrouter", "rwrouter")] * 2
    runs = [churn_run(k, router, d) for (k, router), d in zip(keys, digests, strict=True)]
    rounds = [{runs[0].name: runs[0], runs[1].name: runs[1]}, {r.name: r for r in runs[2:]}]
    problems = scenarios.check_churn_content(rounds)
    assert len(problems) == mismatches
    assert all(p.startswith("CHURN CONTENT MISMATCH") for p in problems)
    assert [m.content for m in runs].count("DIFFERENT") == mismatches
    assert all(m.ok == (m.content == "same") for m in runs)


def test_churn_is_deterministic_and_renews_a_third() -> None:
    one = churn.generate_churn(3, 10, 4)
    assert one.bodies == churn.generate_churn(3, 10, 4).bodies
    assert one.bodies != churn.generate_churn(4, 10, 4).bodies
    assert one.extra["new_fraction"] == pytest.approx(1 / 3, abs=0.05)
    assert one.extra["restart_probability"] == pytest.approx((1 / 3) / (272 / 730))
    scrapes = [set[tuple[tuple[str, str], ...]]() for _ in range(4)]
    per = one.requests_per_scrape
    for i, body in enumerate(one.bodies):
        request = remote_pb2.WriteRequest()
        request.ParseFromString(snappy.uncompress(body))
        for ts in request.timeseries:
            scrapes[i // per].add(tuple((lb.name, lb.value) for lb in ts.labels))
    assert all(len(s) == 10 * SERIES_PER_NODE for s in scrapes)
    new = [len(b - a) for a, b in itertools.pairwise(scrapes)]
    assert sum(new) / (3 * 10 * SERIES_PER_NODE) == pytest.approx(one.extra["new_fraction"])
    assert len(set().union(*scrapes)) == one.extra["distinct_label_sets"]
    # Only pod-labelled series change, and GPUs get a new UUID with their new pod.
    changed = {labels for s in scrapes[1:] for labels in s} - scrapes[0]
    assert all("pod" in dict(labels) for labels in changed)
    assert any("UUID" in dict(labels) for labels in changed)


def test_churn_expected_counts() -> None:
    one = churn.generate_churn(1, 2, 2)
    # Per node: A 64 (the allowlist), B 666 minus the 4 kube-system pods x 6 kubelet series.
    assert (one.samples_a, one.samples_b) == (2 * 2 * 64, 2 * 2 * (666 - 24))
    assert sum(one.samples_per_body) == 2 * 2 * SERIES_PER_NODE


@pytest.mark.parametrize("keep", [True, False], ids=["A-keep", "B-drop"])
def test_churn_rules_parse_in_rwrouter(keep: bool) -> None:
    rules = churn.rules(keep)
    assert len(rules) == 10
    assert {r["action"] for r in rules} == {
        "keep" if keep else "drop",
        "drop",
        "replace",
        "labeldrop",
    }
    assert len(parse_relabel_configs(rules, "write_relabel_configs")) == 10


def test_rwrouter_config_of_a_scenario(tmp_path: Path) -> None:
    options = contenders.RwrouterOptions(audit_a=True, cache_entries=123)
    config = contenders.rwrouter_config(
        1, tmp_path, ("http://a", "http://b"), churn.destinations(), 10_000, options
    )
    a, b = config["remote_write"]
    assert a["audit"] is True and "audit" not in b
    assert "fallback" not in b and b["write_relabel_configs"] == churn.rules(keep=False)
    assert config["relabel_cache"] == {"max_entries": 123}
    basic = contenders.rwrouter_config(
        1,
        tmp_path,
        ("http://a", "http://b"),
        contenders.basic_destinations(1),
        10_000,
        contenders.RwrouterOptions(),
    )
    assert basic["remote_write"][1]["fallback"] is True
    assert "relabel_cache" not in basic and "audit" not in basic["remote_write"][0]
    for cfg in (config, basic):  # rwrouter's own loader takes them (YAML: JSON text)
        path = tmp_path / "rwrouter.yaml"
        path.write_text(json.dumps(cfg))
        loaded = load_config(path)
        assert [d.name for d in loaded.remote_write] == ["A", "B"]


# The budgeted scenario: A's series_limit, what the sinks and rwrouter's /metrics must show.
A_PER_NODE = 64  # the allowlist's series per node (bench.workload.A_REGEX)
BUDGET_CASES = [
    # id, nodes, scrapes, limit (90 % of A's series, rounded down)
    ("smoke", 3, 2, 172),  # 192 series
    ("ten-nodes", 10, 3, 576),  # 640 series
    ("one-node", 1, 1, 57),  # 64 series
]


@pytest.mark.parametrize(
    ("nodes", "scrapes", "limit"), [c[1:] for c in BUDGET_CASES], ids=[c[0] for c in BUDGET_CASES]
)
def test_budget_expectation(nodes: int, scrapes: int, limit: int) -> None:
    workload = generate(1, nodes, scrapes)
    budget = scenarios.budget_expectation(workload)
    assert (budget.series, budget.limit) == (nodes * A_PER_NODE, limit)
    assert budget.over == nodes * A_PER_NODE - limit
    assert budget.samples_a == limit * scrapes
    assert budget.samples_a + budget.samples_b == nodes * SERIES_PER_NODE * scrapes
    assert scenarios.budget_keys(workload) == (budget.series, budget.series)


@pytest.mark.parametrize("copies", [1, 2], ids=["one-twin", "two-twins"])
def test_budget_keys_finds_series_counted_once(copies: int) -> None:
    """Two series of A with one metric name and crc32 would count once in the budget: the
    runner refuses such a workload (here: a series of A sent twice in the first scrape)."""
    workload = generate(1, 1, 1)
    request = remote_pb2.WriteRequest()
    request.ParseFromString(snappy.uncompress(workload.bodies[0]))
    names = [
        next(lb.value for lb in ts.labels if lb.name == "__name__") for ts in request.timeseries
    ]
    twins = [
        ts for ts, name in zip(request.timeseries, names, strict=True) if is_destination_a(name)
    ]
    for ts in twins[:copies]:
        request.timeseries.add().CopyFrom(ts)
    workload.bodies[0] = snappy.compress(request.SerializeToString())
    assert scenarios.budget_keys(workload) == (A_PER_NODE, A_PER_NODE + copies)


def test_budget_run_config_loads_in_rwrouter(tmp_path: Path) -> None:
    config = contenders.rwrouter_config(
        1,
        tmp_path,
        ("http://a", "http://b"),
        contenders.basic_destinations(3),
        10_000,
        contenders.RwrouterOptions(series_limit_a=172),
    )
    a, b = config["remote_write"]
    assert (a["series_limit"], a["on_series_limit"]) == (172, "fallback")
    assert b["fallback"] is True and "series_limit" not in b
    path = tmp_path / "rwrouter.yaml"
    path.write_text(json.dumps(config))
    loaded = load_config(path)  # rwrouter's own validation: fallback B, limit >= 1
    assert [d.series_limit for d in loaded.remote_write] == [172, None]


def test_check_for_budget_run(tmp_path: Path) -> None:
    workload = generate(1, 3, 2)
    setup = runner.Setup(
        runs=["fleet/rwrouter", "fleet/rwrouter-budget"],
        peer=None,
        rw_env=None,
        workers=None,
        inputs={"fleet": (workload, tmp_path / "w.pickle")},
        digests={"fleet": ("aa", "bb")},
        floor={},
        timeouts={},
    )
    plain = runner.check_for(setup, scenarios.RUNS["fleet/rwrouter"])
    budget = runner.check_for(setup, scenarios.RUNS["fleet/rwrouter-budget"])
    assert plain.expected == (workload.samples_a, workload.samples_b) and plain.split
    assert budget.expected == (172 * 2, workload.samples - 172 * 2)
    assert not budget.split and budget.digests == ("aa", "bb")  # A + B must hold both


METRICS_CASES = [
    # id, series_limited, its samples, active series (A), ok
    ("exact", 20, 40, 172, True),
    ("one-more-over", 21, 42, 171, False),
    ("samples-elsewhere", 20, 38, 172, False),
    ("one-process-counts-each-once", 40, 40, 172, False),
    ("not-exposed", None, None, None, False),
]


@pytest.mark.parametrize(
    ("limited", "samples", "active", "ok"),
    [c[1:] for c in METRICS_CASES],
    ids=[c[0] for c in METRICS_CASES],
)
def test_check_budget_reads_rwrouters_metrics(
    limited: int | None, samples: int | None, active: int | None, ok: bool
) -> None:
    workload = generate(1, 3, 2)  # 192 series of A, limit 172, 2 scrapes
    own = {"series_limited": limited, "series_limit_samples": samples}
    own["series_limit_active"] = active
    m = Measurement("fleet/rwrouter-budget", ok=True)
    m.router_metrics = {k: {"A": v} for k, v in own.items() if v is not None}
    runner.check_budget(m, workload)
    assert m.ok is ok
    assert len(m.notes) == (0 if ok else 1)


def _two_workers(
    limited: tuple[int, int], samples: tuple[int, int], active: tuple[int, int]
) -> str:
    """rwrouter's /metrics with --workers 2 (merged: a worker label on every sample)."""
    lines = ["# TYPE rwrouter_worker_up gauge"]
    lines += [f'rwrouter_worker_up{{worker="{w}"}} 1.0' for w in (0, 1)]
    lines.append("# TYPE rwrouter_series_limited counter")
    lines += [
        f'rwrouter_series_limited_total{{action="fallback",destination="A",worker="{w}"}} {v}'
        for w, v in enumerate(limited)
    ]
    lines.append("# TYPE rwrouter_samples_dropped counter")
    lines += [
        f'rwrouter_samples_dropped_total{{destination="A",reason="series_limit",worker="{w}"}} {v}'
        for w, v in enumerate(samples)
    ]
    lines.append("# TYPE rwrouter_series_limit_active_series gauge")
    lines += [
        f'rwrouter_series_limit_active_series{{destination="A",worker="{w}"}} {v}'
        for w, v in enumerate(active)
    ]
    return "\n".join(lines) + "\n"


WORKERS_CASES = [
    # 192 series of A, limit 172 (20 over), 2 scrapes; per worker: series over the budget it
    # decided, the samples it sent to B for them, the shared active count it read
    pytest.param((12, 8), (24, 16), (172, 172), True, id="split-between-workers"),
    pytest.param((20, 20), (24, 16), (172, 172), True, id="every-series-over-in-both"),
    pytest.param((20, 0), (40, 0), (172, 172), True, id="all-in-one-worker"),
    pytest.param((12, 7), (24, 16), (172, 172), False, id="a-series-over-counted-nowhere"),
    pytest.param((21, 20), (24, 16), (172, 172), False, id="more-than-twice-over"),
    pytest.param((12, 8), (24, 18), (172, 172), False, id="samples-not-exact"),
    pytest.param((12, 8), (24, 16), (172, 171), True, id="a-worker-read-it-a-second-ago"),
    pytest.param((12, 8), (24, 16), (171, 171), False, id="shared-count-below-the-limit"),
    pytest.param((12, 8), (24, 16), (173, 172), False, id="over-the-limit"),
]


@pytest.mark.parametrize(("limited", "samples", "active", "ok"), WORKERS_CASES)
def test_check_budget_with_workers_reads_the_merged_metrics(
    limited: tuple[int, int], samples: tuple[int, int], active: tuple[int, int], ok: bool
) -> None:
    """With --workers the exposition is merged over the workers: the samples over the budget
    are summed (exact), the active series are the one shared count each worker exposes (the
    largest, not the sum), and a series over the budget counts once per worker that met it."""
    workload = generate(1, 3, 2)
    m = Measurement("fleet/rwrouter-budget", ok=True)
    m.router_metrics = contenders.parse_router_metrics(_two_workers(limited, samples, active))
    assert m.router_metrics["series_limit_active"] == {"A": max(active)}
    runner.check_budget(m, workload, 2)
    assert m.ok is ok, m.notes
    assert len(m.notes) == (0 if ok else 1)


def test_check_budget_with_workers_needs_every_worker() -> None:
    workload = generate(1, 3, 2)
    m = Measurement("fleet/rwrouter-budget", ok=True)
    text = _two_workers((12, 8), (24, 16), (172, 172)).replace(
        'rwrouter_worker_up{worker="1"} 1.0', 'rwrouter_worker_up{worker="1"} 0.0'
    )
    m.router_metrics = contenders.parse_router_metrics(text)
    runner.check_budget(m, workload, 2)
    assert not m.ok and m.notes == [
        "series budget of A: not every worker's /metrics answered: {'0': 1.0, '1': 0.0}"
    ]


def test_budgeted_runs_with_workers() -> None:
    """The runner takes the budgeted scenario with --workers (the workers share one budget)."""
    args = runner.parse_args(["--scenarios", "budgeted", "--workers", "2", "--only", "rwrouter"])
    assert (args.workers, runner.run_keys(args)) == (2, ["fleet/rwrouter", "fleet/rwrouter-budget"])


def test_digest_sum_is_every_sample_once() -> None:
    workload = generate(1, 3, 2)
    total = 0
    for body in workload.bodies:
        request = remote_pb2.WriteRequest()
        request.ParseFromString(snappy.uncompress(body))
        total += sum(sample_digest(ts) for ts in request.timeseries)
    a, b = expected_digests(workload)
    assert digest_sum((a, b)) == f"{total & DIGEST_MASK:016x}" != a
    assert digest_sum((b, a)) == digest_sum((a, b))


def test_budgeted_summary_line_is_measured() -> None:
    line = scenarios.SCENARIOS["budgeted"].lines[0]
    rounds = [{line.den: run(line.den, r), line.num: run(line.num, 0.9 * r)} for r in (1.0, 2.0)]
    figures = scenarios.line_figures(line, rounds)
    assert (line.num, line.den) == ("fleet/rwrouter-budget", "fleet/rwrouter")
    assert figures["rate"] == pytest.approx(0.9) and figures["met"] is None
    row = scenarios.summary_table([figures]).splitlines()[1]
    assert row.split()[:3] == ["budgeted", "budget/plain", "0.90"]
    assert row.endswith("(issue 16: measured)  -")
