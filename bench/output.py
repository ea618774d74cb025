"""The runner's report: per scenario its table and ratios by round, every run's own figures,
the summary table against the issue's targets, the versions and the load; and the same as
JSON (``--json``)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import vmagent as vm
from bench.contenders import VMAGENT_FLAGS, metrics_summary
from bench.net import REPO
from bench.report import Measurement, median_round, rounds_summary, table
from bench.scenarios import (
    RUNS,
    WORKLOADS,
    Scenario,
    budget_expectation,
    check_churn_content,
    line_figures,
    summary_table,
)
from bench.workload import Workload

if TYPE_CHECKING:
    from bench.runner import Setup

Load = tuple[tuple[float, ...], tuple[float, ...]]  # 1/5/15-min load averages, before and after


def scenario_section(
    scenario: Scenario, setup: Setup, rounds: list[dict[str, Measurement]]
) -> tuple[list[str], dict[str, Any]]:
    """The text lines and the JSON entry of one scenario (only the runs that ran)."""
    names = [k for k in scenario.runs if k in setup.runs]
    results = median_round(rounds, names)
    lines = [f"== {scenario.name}: {scenario.title}"]
    workloads = dict.fromkeys(k.split("/")[0] for k in names)
    for name in workloads:
        workload = setup.inputs[name][0]
        lines.append(f"{name}: {workload.summary()}")
        if workload.extra:
            lines.append(f"{name}: " + _extra_line(workload))
        if WORKLOADS[name].primed:
            lines.append(
                f"{name}: primed: the first scrape alone (cold: rows), then the "
                f"{workload.scrapes - 1} after it (the other rows); peak RSS over both"
            )
    for key in (k for k in names if RUNS[k].budget):
        budget = budget_expectation(setup.input_of(RUNS[key])[0])
        lines.append(
            f"{key}: series_limit {budget.limit:,} on A ({budget.limit / budget.series:.0%} of "
            f"its {budget.series:,} series; on_series_limit: fallback), {budget.over:,} series "
            f"over it to B; expected at the sinks A {budget.samples_a:,}, B "
            f"{budget.samples_b:,} samples"
        )
    figures = [line_figures(ln, rounds) for ln in scenario.lines]
    if results:
        lines.append(table(results, setup.floor["samples_per_cpu_second"], scenario.ratio_specs))
        lines.append(rounds_summary(rounds, (), names))
    for f in figures:
        for key, what in (("rate", "samples/CPU-s"), ("p99", "p99"), ("rss", "peak RSS")):
            values = f[f"{key}_by_round"]
            if values:
                lines.append(
                    f"{f['label']}: {f['ratio']} {what} by round: "
                    + ", ".join(f"{v:.2f}" for v in values)
                    + f" (median {f[key]:.2f})"
                )
    entry = {
        "title": scenario.title,
        "runs": names,
        "workloads": {n: _workload_json(setup.inputs[n][0]) for n in workloads},
        "contenders": {n: asdict(m) for n, m in results.items()},
        "lines": figures,
    }
    return lines, entry


def _extra_line(workload: Workload) -> str:
    e = workload.extra
    return (
        f"new series per scrape (scrapes 2-{workload.scrapes}) {e['new_fraction']:.1%} "
        f"(restart probability {e['restart_probability']:.3f} per GPU and pod); "
        f"{e['distinct_label_sets']:,.0f} distinct label sets over the run; rwrouter "
        f"relabel_cache.max_entries {int(e['distinct_label_sets']) // 2:,}; expected at the "
        "sinks after the rules: A "
        f"{workload.samples_a:,}, B {workload.samples_b:,} of "
        f"{sum(workload.samples_per_body):,} samples sent"
    )


def print_report(
    args: argparse.Namespace, setup: Setup, rounds: list[dict[str, Measurement]], load: Load
) -> dict[str, Any]:
    """Print every scenario's section, each run's own figures and notes, the summary table,
    the versions and the load average (before, after); return the JSON report (without the
    total time and load, :func:`write_json` adds them)."""
    problems = check_churn_content(rounds)
    scenarios: dict[str, Any] = {}
    summary: list[dict[str, Any]] = []
    for scenario in args.selected:
        lines, entry = scenario_section(scenario, setup, rounds)
        print()
        print("\n".join(lines))
        scenarios[scenario.name] = entry
        summary += [f for f in entry["lines"] if f["rate"] is not None or f["p99"] is not None]
    print()
    results = median_round(rounds)
    for m in results.values():
        own = vm.metrics_summary if m.router == "vmagent" else metrics_summary
        for line in own(m.router_metrics):
            print(f"{m.name}: {line}")
    for r in rounds:
        for m in r.values():
            for note in m.notes:
                print(f"note: {m.name}: {note}")
            if m.error:
                print(f"error: {m.name}: {m.error}")
    for line in problems:
        print(line)
    print()
    print("== summary (issue 15's targets)")
    print(summary_table(summary))
    print(
        "floor (snappy decompress + compress of the first workload's RW 1.0 bodies): "
        f"{setup.floor['samples_per_cpu_second']:,.0f} samples per CPU-second; without page "
        f"faults {setup.floor['no_page_faults_samples_per_cpu_second']:,.0f}"
    )
    version = _print_versions(args, setup, results)
    before, after = load
    print(
        "load average 1/5/15 min: before "
        + " ".join(f"{v:.2f}" for v in before)
        + ", after "
        + " ".join(f"{v:.2f}" for v in after)
        + f" ({os.cpu_count()} CPUs)"
    )
    report = json_report(args, setup, rounds, scenarios)
    report.update(summary=summary, content_problems=problems, rwrouter_version=version)
    return report


def _print_versions(
    args: argparse.Namespace, setup: Setup, results: dict[str, Measurement]
) -> str | None:
    """Print the rwrouter's and vmagent's versions; return rwrouter's."""
    rw = next((m for m in results.values() if m.router == "rwrouter"), None)
    version: str | None = None
    if rw is not None:
        version = rw.router_metrics.get("version", "?")
        if args.rwrouter_src:
            print(f"rwrouter {version}: from {args.rwrouter_src} (PYTHONPATH)")
        else:
            commit = (_commit(args.rwrouter_ref or "HEAD") or "?")[:8]
            where = f"git ref {args.rwrouter_ref}" if args.rwrouter_ref else "working tree"
            diff = None if args.rwrouter_ref else _src_diff_sha1()
            print(
                f"rwrouter {version}: {where}, commit {commit}"
                + (f", uncommitted src/ changes (diff sha1 {diff})" if diff else "")
            )
    if setup.peer is not None:
        print(
            f"vmagent: {setup.peer['path']}: {setup.peer['version'] or '(prints no version)'}; "
            "flags " + " ".join(setup.peer["flags"])
        )
    return version


def _workload_json(workload: Workload) -> dict[str, Any]:
    return {
        "seed": workload.seed,
        "nodes": workload.nodes,
        "scrapes": workload.scrapes,
        "series_per_scrape": workload.series_per_scrape,
        "requests": len(workload.bodies),
        "samples_sent": sum(workload.samples_per_body),
        "samples": workload.samples,
        "samples_a": workload.samples_a,
        "samples_b": workload.samples_b,
        "raw_bytes_per_series": workload.raw_bytes_per_series,
        "compressed_bytes_per_series": workload.compressed_bytes_per_series,
        **workload.extra,
    }


def json_report(
    args: argparse.Namespace,
    setup: Setup,
    rounds: list[dict[str, Measurement]],
    scenarios: dict[str, Any],
) -> dict[str, Any]:
    """What ``--json`` writes (see :func:`print_report`)."""
    elsewhere = args.rwrouter_ref or args.rwrouter_src
    skip = {"selected"}
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "args": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in skip
        },
        "scenario_names": [s.name for s in args.selected],
        "workers": setup.workers,
        "rwrouter_ref": args.rwrouter_ref,
        "rwrouter_src": str(args.rwrouter_src) if args.rwrouter_src else None,
        "rwrouter_commit": None if args.rwrouter_src else _commit(args.rwrouter_ref or "HEAD"),
        "rwrouter_worktree_dirty": None if elsewhere else _dirty_src(),
        "rwrouter_src_diff_sha1": None if elsewhere else _src_diff_sha1(),
        "workloads": {n: _workload_json(w) for n, (w, _) in setup.inputs.items()},
        "rw2_metadata": args.rw2_metadata,
        "expected_digests": setup.digests,
        "vmagent_flags": setup.peer["flags"] if setup.peer else [flag for flag, _ in VMAGENT_FLAGS],
        "peers": {"vmagent": setup.peer} if setup.peer else {},
        "floor": setup.floor,
        "scenarios": scenarios,
        "rounds": [{n: asdict(m) for n, m in r.items()} for r in rounds],
        "cpus": os.cpu_count(),
    }


def write_json(path: Path, report: dict[str, Any], *, total: float, load: Load) -> None:
    """Write ``report`` with the total seconds and the load averages (before, after)."""
    report.update(total_seconds=total, loadavg_before=load[0], loadavg_after=load[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def _commit(ref: str) -> str | None:
    """The commit id of ``ref``, or None."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", ref], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or None


def _src_diff_sha1() -> str | None:
    """SHA-1 of ``git diff HEAD -- src`` (uncommitted changes of the measured code), or None
    when there are none."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "diff", "HEAD", "--", "src"], capture_output=True, check=False
    )
    return hashlib.sha1(out.stdout).hexdigest()[:12] if out.stdout else None


def _dirty_src() -> bool | None:
    """Whether src/ has uncommitted changes (the measured code is then not HEAD)."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
        capture_output=True,
        text=True,
        check=False,
    )
    return bool(out.stdout.strip()) if out.returncode == 0 else None
