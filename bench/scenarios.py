"""The scenarios of ``python -m bench`` (issue 15): what each one runs, its ratios and targets.

A scenario names *runs* (one router fed one workload, :class:`RunSpec`) and the ratios of
two of them it reports (:class:`Line`), each against its target. Scenarios share runs: the
GPU-fleet runs ``fleet/vmagent`` and ``fleet/rwrouter`` serve ``warm``, ``rw2`` and
``audited``, so a round runs each needed run once (all of them one after the other, never two
at once; the order reversed every other round) and every ratio compares runs of the same
round.

- ``warm``: the GPU fleet (:mod:`bench.workload`, 280 nodes x 20 scrapes), RW 1.0 in:
  rwrouter / vmagent.
- ``rw2``: rwrouter fed the same scrapes as RW 2.0 (:mod:`bench.rw2`) / rwrouter fed RW 1.0.
- ``million``: 1 M active series (1370 nodes x 4 scrapes), primed: the first scrape (every
  series new, ``cold``) is measured alone, then the 3 after it (``steady``); peak RSS over
  both.
- ``churn``: :mod:`bench.churn` (280 nodes x 10 scrapes, a third of the series new every
  scrape from the second on), 10 relabel rules of mixed actions per destination written the
  same for both routers, rwrouter's ``relabel_cache.max_entries`` half the distinct label
  sets of the run; primed (measured after the first scrape was delivered). The sinks hash
  every sample and vmagent's digests must equal rwrouter's (:func:`check_churn_content`).
- ``audited``: rwrouter with ``audit: true`` on destination A / the same without it.
- ``budgeted`` (issue 16): rwrouter with a ``series_limit`` on destination A of
  :data:`BUDGET_FRACTION` of A's series (:func:`budget_limit`), the rest over it going to the
  fallback B / the same without it. What the sinks must hold: :func:`budget_expectation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import snappy  # type: ignore[import-untyped,unused-ignore]

from bench.report import Measurement, median, ratio_by_round
from bench.workload import Workload, is_destination_a
from rwrouter.routing import shard_hash
from rwrouter.wire import remote_pb2, types_pb2


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload the scenarios run: its size (full run and ``--smoke``), whether it is the
    churning one and whether its runs are primed (first scrape measured apart)."""

    name: str
    nodes: int
    scrapes: int
    smoke_nodes: int
    smoke_scrapes: int
    churn: bool = False
    primed: bool = False


WORKLOADS = {
    w.name: w
    for w in (
        WorkloadSpec("fleet", 280, 20, 3, 2),
        WorkloadSpec("million", 1370, 4, 3, 3, primed=True),
        WorkloadSpec("churn", 280, 10, 3, 3, churn=True, primed=True),
    )
}


@dataclass(frozen=True)
class RunSpec:
    """One router fed one workload: ``key`` ``<workload>/<contender>``, the router
    (``vmagent`` or ``rwrouter``), the input (``rw1``, ``rw2``), ``audit: true`` on A,
    ``budget``: a ``series_limit`` on A (:func:`budget_limit`)."""

    key: str
    router: str
    input: str = "rw1"
    audit: bool = False
    budget: bool = False

    @property
    def workload(self) -> str:
        """The :data:`WORKLOADS` name."""
        return self.key.split("/")[0]


RUNS = {
    r.key: r
    for r in (
        RunSpec("fleet/vmagent", "vmagent"),
        RunSpec("fleet/rwrouter", "rwrouter"),
        RunSpec("fleet/rwrouter-rw2", "rwrouter", input="rw2"),
        RunSpec("fleet/rwrouter-audit", "rwrouter", audit=True),
        RunSpec("fleet/rwrouter-budget", "rwrouter", budget=True),
        RunSpec("million/vmagent", "vmagent"),
        RunSpec("million/rwrouter", "rwrouter"),
        RunSpec("churn/vmagent", "vmagent"),
        RunSpec("churn/rwrouter", "rwrouter"),
    )
}


@dataclass(frozen=True)
class Target:
    """A bound on the median ratio of one figure: ``rate`` (samples per CPU-second), ``p99``
    or ``rss``; ``at_least``: ratio >= ``bound``, else ratio <= ``bound``."""

    figure: str
    bound: float
    at_least: bool

    def text(self) -> str:
        """E.g. ``samples >= 1.5x``."""
        name = {"rate": "samples", "p99": "p99", "rss": "RSS"}[self.figure]
        return f"{name} {'>=' if self.at_least else '<='} {self.bound:g}x"

    def met(self, value: float | None) -> bool:
        """Whether ``value`` (a median ratio) meets the bound."""
        if value is None:
            return False
        return value >= self.bound if self.at_least else value <= self.bound


@dataclass(frozen=True)
class Line:
    """One line of the summary: ``num`` / ``den`` (run keys) of samples per CPU-second (the
    Measurement attribute ``rate``), p99 (``p99``) and peak RSS, against ``targets``."""

    label: str
    ratio: str  # e.g. "rwrouter/vmagent"
    num: str
    den: str
    targets: tuple[Target, ...] = ()
    rate: str = "samples_per_cpu_second"
    p99: str = "p99_ms"
    note: str = "(reference)"  # the target column of a line without a target

    def figures(self) -> dict[str, str]:
        """Figure name -> Measurement attribute."""
        return {"rate": self.rate, "p99": self.p99, "rss": "peak_rss_mib"}


@dataclass(frozen=True)
class Scenario:
    """A scenario: its runs (keys of :data:`RUNS`) and summary lines."""

    name: str
    title: str
    runs: tuple[str, ...]
    lines: tuple[Line, ...]

    @property
    def ratio_specs(self) -> tuple[tuple[str, str, str], ...]:
        """(label, numerator, denominator) of its table's ratio columns."""
        return tuple(dict.fromkeys((ln.ratio, ln.num, ln.den) for ln in self.lines))


def _at_least(figure: str, bound: float) -> Target:
    return Target(figure, bound, at_least=True)


def _at_most(figure: str, bound: float) -> Target:
    return Target(figure, bound, at_least=False)


_RV = "rwrouter/vmagent"
SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "warm",
            "the GPU fleet, RW 1.0 in",
            ("fleet/vmagent", "fleet/rwrouter"),
            (
                Line(
                    "warm",
                    _RV,
                    "fleet/rwrouter",
                    "fleet/vmagent",
                    (_at_least("rate", 1.5), _at_most("p99", 1.0)),
                ),
            ),
        ),
        Scenario(
            "rw2",
            "rwrouter fed the same scrapes as RW 2.0, against its RW 1.0 figure",
            ("fleet/rwrouter", "fleet/rwrouter-rw2"),
            (
                Line(
                    "rw2",
                    "rw2/rw1",
                    "fleet/rwrouter-rw2",
                    "fleet/rwrouter",
                    (_at_least("rate", 1.0),),
                ),
            ),
        ),
        Scenario(
            "million",
            "1 M active series: the cold first scrape, then the steady ones",
            ("million/vmagent", "million/rwrouter"),
            (
                Line(
                    "million cold",
                    _RV,
                    "million/rwrouter",
                    "million/vmagent",
                    (_at_least("rate", 1.0), _at_most("rss", 1.5)),
                    rate="prime_samples_per_cpu_second",
                    p99="prime_p99_ms",
                ),
                Line(
                    "million steady",
                    _RV,
                    "million/rwrouter",
                    "million/vmagent",
                    (_at_least("rate", 1.0), _at_most("rss", 1.5)),
                ),
            ),
        ),
        Scenario(
            "churn",
            "a third of the series new every scrape, 10 mixed relabel rules, bounded cache",
            ("churn/vmagent", "churn/rwrouter"),
            (Line("churn", _RV, "churn/rwrouter", "churn/vmagent", (_at_least("rate", 1.0),)),),
        ),
        Scenario(
            "audited",
            "rwrouter with audit: true on destination A, against the same without it",
            ("fleet/vmagent", "fleet/rwrouter", "fleet/rwrouter-audit"),
            (
                Line(
                    "audited",
                    "audit/plain",
                    "fleet/rwrouter-audit",
                    "fleet/rwrouter",
                    (_at_least("rate", 0.9),),
                ),
                Line("audited (reference)", _RV, "fleet/rwrouter-audit", "fleet/vmagent"),
            ),
        ),
        Scenario(
            "budgeted",
            "rwrouter with series_limit on destination A (90 % of its series fit, the rest "
            "to the fallback B), against the same without it",
            ("fleet/vmagent", "fleet/rwrouter", "fleet/rwrouter-budget"),
            (
                Line(
                    "budgeted",
                    "budget/plain",
                    "fleet/rwrouter-budget",
                    "fleet/rwrouter",
                    note="(issue 16: measured)",
                ),
                Line("budgeted (reference)", _RV, "fleet/rwrouter-budget", "fleet/vmagent"),
            ),
        ),
    )
}

#: The ``budgeted`` run's ``series_limit`` on destination A, as a fraction of A's series.
BUDGET_FRACTION = 0.9


def budget_limit(series_a: int) -> int:
    """The ``series_limit`` of destination A in the ``budgeted`` run: :data:`BUDGET_FRACTION`
    of ``series_a`` (A's series per scrape), rounded down, at least 1."""
    return max(1, int(series_a * BUDGET_FRACTION))


@dataclass(frozen=True)
class BudgetExpectation:
    """What the ``budgeted`` run must deliver: A's ``limit`` (series), A's ``series`` per
    scrape without a budget, and the samples at A and B over the run: A holds ``limit``
    series for every scrape (the first ``limit`` it decided, in arrival order: which ones
    depends on the senders' order, how many does not), B the rest. ``over``: A's series over
    the budget (what ``rwrouter_series_limited_total{destination="A"}`` must count)."""

    limit: int
    series: int
    samples_a: int
    samples_b: int

    @property
    def over(self) -> int:
        """Series of A over the budget (sent to the fallback B)."""
        return self.series - self.limit


def budget_expectation(workload: Workload) -> BudgetExpectation:
    """The :class:`BudgetExpectation` of ``workload`` (one sample per series per scrape; no
    series leaves the 2 h window in a run, so the same ``limit`` series stay at A). Exact
    when A's series are distinct by metric name and crc32 of their labels, as the budget
    counts them (:func:`budget_keys` checks it)."""
    series = workload.samples_a // workload.scrapes
    limit = budget_limit(series)
    a = limit * workload.scrapes
    return BudgetExpectation(limit, series, a, workload.samples - a)


def budget_keys(workload: Workload) -> tuple[int, int]:
    """(distinct budget keys, series) of destination A in the first scrape of ``workload``:
    a budget counts a series by its metric name and the crc32 of its encoded output labels
    (:func:`rwrouter.routing.shard_hash`; A's keep rule leaves the labels as they came), so
    two of A's series with the same key would count once and :func:`budget_expectation`
    would be one series short at A. Parses the RW 1.0 bodies (about 0.3 s at 280 nodes)."""
    keys: set[tuple[str, int]] = set()
    series = 0
    for body in workload.bodies[: workload.requests_per_scrape]:
        request = remote_pb2.WriteRequest()
        request.ParseFromString(snappy.uncompress(body))
        for ts in request.timeseries:
            name = next(label.value for label in ts.labels if label.name == "__name__")
            if is_destination_a(name):
                series += 1
                labels = types_pb2.TimeSeries(labels=ts.labels).SerializeToString()
                keys.add((name, shard_hash(labels)))
    return len(keys), series


def select(text: str) -> list[Scenario]:
    """The scenarios of ``--scenarios`` (``all`` or names separated by commas), in
    :data:`SCENARIOS` order. Raises ValueError naming an unknown one."""
    names = list(SCENARIOS) if text == "all" else [n.strip() for n in text.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise ValueError(
            f"unknown scenario {', '.join(unknown) or text!r}: pick from all, "
            + ", ".join(SCENARIOS)
        )
    return [s for s in SCENARIOS.values() if s.name in names]


def runs_of(scenarios: list[Scenario], only: str | None = None) -> list[str]:
    """The run keys the scenarios need, each once, in order; ``only``: those of one router."""
    keys = dict.fromkeys(k for s in scenarios for k in s.runs)
    return [k for k in keys if only is None or RUNS[k].router == only]


def line_figures(line: Line, rounds: list[dict[str, Measurement]]) -> dict[str, Any]:
    """A summary line's figures: per figure (rate, p99, rss) the ratio in each round and
    their median (None without a round holding both runs); ``met`` per target and overall
    (None when the line has no target)."""
    out: dict[str, Any] = {"label": line.label, "ratio": line.ratio, "num": line.num}
    out["den"] = line.den
    for figure, attr in line.figures().items():
        values = ratio_by_round(rounds, line.num, line.den, attr)
        out[f"{figure}_by_round"] = values
        out[figure] = median(values) if values else None
    out["targets"] = [{"target": t.text(), "met": t.met(out[t.figure])} for t in line.targets]
    out["met"] = all(t["met"] for t in out["targets"]) if line.targets else None
    out["note"] = line.note
    return out


def summary_table(lines: list[dict[str, Any]]) -> str:
    """The final table: per summary line (:func:`line_figures`) the median ratios of samples
    per CPU-second, p99 and peak RSS, the issue's target and whether it is met."""

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    rows = [
        (
            ln["label"],
            ln["ratio"],
            cell(ln["rate"]),
            cell(ln["p99"]),
            cell(ln["rss"]),
            ", ".join(t["target"] for t in ln["targets"]) or ln.get("note", "(reference)"),
            {True: "met", False: "NOT MET", None: "-"}[ln["met"]],
        )
        for ln in lines
    ]
    head = ("scenario", "ratio", "samples/CPU-s", "p99", "peak RSS", "target", "")
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    out = []
    for r in (head, *rows):
        cells = [
            f"{c:<{w}}" if i in (0, 1, 5) else f"{c:>{w}}"
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    out.append(
        "ratios: median over the rounds of each round's ratio; cold = the first scrape "
        "alone, steady and churn = the scrapes after it"
    )
    return "\n".join(out)


def check_churn_content(rounds: list[dict[str, Measurement]]) -> list[str]:
    """Compare the sinks' sample digests of every churn run with those of the first
    ``churn/vmagent`` run (the same input: every run must deliver the same series and
    samples): ``content`` becomes ``same`` or ``DIFFERENT`` (and the run not ok). Returns
    one loud line per mismatch."""
    runs = [
        (n, r[k])
        for n, r in enumerate(rounds, 1)
        for k in ("churn/vmagent", "churn/rwrouter")
        if k in r
    ]
    reference = next((m.digests for _, m in runs if m.router == "vmagent"), None)
    if reference is None:
        reference = next((m.digests for _, m in runs), None)
    problems = []
    for number, m in runs:
        if m.digests is not None and m.digests == reference:
            m.content = "same"
            continue
        m.content, m.ok = "DIFFERENT", False
        problems.append(
            f"CHURN CONTENT MISMATCH: {m.name} (round {number}) delivered sample digests A/B "
            f"{m.digests}, vmagent {reference}: the routers did not deliver the same series"
        )
    return problems
