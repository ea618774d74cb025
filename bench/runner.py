"""The router comparison: every scenario of :mod:`bench.scenarios` in one run, vmagent and
rwrouter on the same requests and the same sinks.

``python -m bench`` runs them all (``--scenarios all``); ``--scenarios warm,churn`` some.
Each round runs every run the chosen scenarios need once (:func:`bench.scenarios.runs_of`),
one after the other (never two at once), the order reversed every other round (ABBA: drift
on a shared machine hits all of them); each run is measured by :func:`bench.measure.measure`
(see its module for the steps, the CPU and the checks). The report (:mod:`bench.output`):
per scenario a table of its runs (each run the round with its median samples per
CPU-second) and its ratios by round, then one summary table of every scenario's median ratios
against the issue's targets.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from bench import churn, procs
from bench.contenders import (
    DEFAULT_BATCH,
    Contender,
    RwrouterOptions,
    basic_destinations,
    export_rwrouter,
    rwrouter_contender,
    rwrouter_supports_workers,
    vmagent_contender,
    vmagent_peer,
)
from bench.measure import Check, Sink, expected_digests, floor_in_child, measure, start_sink
from bench.output import print_report, write_json
from bench.report import Measurement
from bench.rw2 import as_rw2, sizes_line
from bench.scenarios import (
    RUNS,
    WORKLOADS,
    RunSpec,
    budget_expectation,
    budget_keys,
    runs_of,
    select,
)
from bench.workload import Workload, load_or_generate, save

ROUTERS = ("vmagent", "rwrouter")
INPUTS = ("rw1", "rw2")
#: rwrouter's queue_config.batch_send_deadline with --smoke (default 5s: a tiny run would
#: wait that long for every partial batch, twice in a primed run).
SMOKE_DEADLINE = "1s"
DEFAULT_ROUNDS = 5


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command line of ``python -m bench``."""
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="rwrouter vs vmagent, every scenario in one run "
        "(`python -m bench micro --help`: in-process measurements).",
    )
    p.add_argument(
        "--scenarios",
        default="all",
        help="all (default) or some of warm,rw2,million,churn,audited,budgeted separated by commas",
    )
    p.add_argument("--nodes", type=int, default=None, help="override every scenario's nodes")
    p.add_argument("--scrapes", type=int, default=None, help="override every scenario's scrapes")
    p.add_argument("--senders", type=int, default=4, help="driver connections (default 4)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=None, help="rwrouter run --workers N")
    p.add_argument(
        "--rules", type=int, default=1, help="relabel rules per destination (K; not churn)"
    )
    p.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help="samples per request each router sends, both the same (vmagent "
        f"-remoteWrite.maxRowsPerBlock, rwrouter max_samples_per_send; default "
        f"{DEFAULT_BATCH}, vmagent's default)",
    )
    p.add_argument(
        "--rounds", type=int, default=None, help="rounds, alternating (default 5; 1 with --smoke)"
    )
    p.add_argument("--only", choices=ROUTERS, default=None, help="the runs of one router")
    p.add_argument(
        "--input",
        choices=[*INPUTS, "both"],
        default="both",
        help="the runs fed rw1 (remote write 1.0), rw2 (2.0, rwrouter only) or both (default)",
    )
    p.add_argument(
        "--rw2-metadata",
        action="store_true",
        help="RW 2.0 input with a type and help per series (Prometheus 3 with "
        "metadata-wal-records); default none, as Prometheus 3 sends by default",
    )
    p.add_argument(
        "--check-content",
        action="store_true",
        help="the sinks hash every sample and must hold exactly the workload's samples "
        "(on with --smoke; always on in churn; ~2 us per sample in the sinks)",
    )
    p.add_argument("--vmagent", type=Path, default=None, help="the vmagent binary")
    p.add_argument("--smoke", action="store_true", help="every scenario tiny, content checked")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--timeout", type=float, default=None, help="seconds per run")
    p.add_argument("--keep-workdir", action="store_true", help="keep logs and configs")
    p.add_argument("--rwrouter-ref", default=None, help="run rwrouter's src/ of this git ref")
    p.add_argument(
        "--rwrouter-src", type=Path, default=None, help="run rwrouter from this directory"
    )
    args = p.parse_args(argv)
    try:
        args.selected = select(args.scenarios)
    except ValueError as exc:
        p.error(str(exc))
    if args.rwrouter_ref and args.rwrouter_src:
        p.error("--rwrouter-ref and --rwrouter-src exclude each other")
    if args.rounds is None:
        args.rounds = 1 if args.smoke else DEFAULT_ROUNDS
    for flag in ("rules", "batch", "rounds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be >= 1")
    args.check_content = args.check_content or args.smoke
    if not run_keys(args):
        p.error("no run left: vmagent cannot take remote write 2.0 (--only vmagent --input rw2)")
    primed = {RUNS[k].workload for k in run_keys(args) if WORKLOADS[RUNS[k].workload].primed}
    if primed and args.scrapes is not None and args.scrapes < 2:
        p.error(f"--scrapes must be >= 2 for {', '.join(sorted(primed))} (primed)")
    return args


def run_keys(args: argparse.Namespace) -> list[str]:
    """The runs of the chosen scenarios, filtered by ``--only`` and ``--input``."""
    keys = runs_of(args.selected, args.only)
    return [k for k in keys if args.input in ("both", RUNS[k].input)]


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP raise KeyboardInterrupt, so cleanup runs (children are stopped)."""
    import signal

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class Setup:
    """What every round shares: the runs, the vmagent peer (None without vmagent), the
    rwrouter environment and ``--workers``, the bodies per input (``fleet``, ``fleet-rw2``,
    ``million``, ``churn``: (workload, cache path)), the expected sample digests per workload
    (``--check-content``; churn has none: its runs are compared with each other), the floor
    (of the first workload) and the timeout per workload."""

    runs: list[str]
    peer: dict[str, Any] | None
    rw_env: dict[str, str] | None
    workers: int | None
    inputs: dict[str, tuple[Workload, Path]]
    digests: dict[str, tuple[str, str]]
    floor: dict[str, float]
    timeouts: dict[str, float]
    notes: list[str] = field(default_factory=list)

    def input_of(self, run: RunSpec) -> tuple[Workload, Path]:
        """The bodies ``run`` is fed."""
        return self.inputs[run.workload + ("-rw2" if run.input == "rw2" else "")]


def _size(args: argparse.Namespace, name: str) -> tuple[int, int]:
    spec = WORKLOADS[name]
    nodes = args.nodes or (spec.smoke_nodes if args.smoke else spec.nodes)
    scrapes = args.scrapes or (spec.smoke_scrapes if args.smoke else spec.scrapes)
    return nodes, scrapes


def load_inputs(
    args: argparse.Namespace, runs: list[str], workdir: Path
) -> tuple[dict[str, tuple[Workload, Path]], list[str]]:
    """The bodies of every workload the runs need (generated and cached first when missing;
    RW 2.0 bodies encoded into ``workdir``), and one line per workload for the report."""
    inputs: dict[str, tuple[Workload, Path]] = {}
    lines: list[str] = []
    for name in dict.fromkeys(RUNS[k].workload for k in runs):
        nodes, scrapes = _size(args, name)
        if WORKLOADS[name].churn:
            workload, path = churn.load_or_generate_churn(args.seed, nodes, scrapes)
        else:
            workload, path = load_or_generate(args.seed, nodes, scrapes)
        inputs[name] = (workload, path)
        lines.append(f"{name}: {workload.summary()}")
        print(lines[-1], flush=True)
    if any(RUNS[k].input == "rw2" for k in runs):
        rw1 = inputs["fleet"][0]
        rw2 = as_rw2(rw1, metadata=args.rw2_metadata)
        save(rw2, workdir / "workload-rw2.pickle")
        inputs["fleet-rw2"] = (rw2, workdir / "workload-rw2.pickle")
        lines.append(
            f"fleet RW 2.0 bodies ({'with' if args.rw2_metadata else 'no'} metadata) encoded "
            f"in {rw2.generate_seconds:.1f} s; {sizes_line(rw1, rw2)}"
        )
        print(lines[-1], flush=True)
    return inputs, lines


def prepare(args: argparse.Namespace, workdir: Path) -> Setup:
    """Load the workloads, the rwrouter of ``--rwrouter-ref``/``--rwrouter-src``, the floor;
    print what was prepared."""
    runs = run_keys(args)
    rw_env = None
    rwrouters = [k for k in runs if RUNS[k].router == "rwrouter"]
    if args.rwrouter_ref and rwrouters:
        rw_env = export_rwrouter(args.rwrouter_ref, workdir / "rwrouter-src")
        print(f"rwrouter from git ref {args.rwrouter_ref}", flush=True)
    elif args.rwrouter_src and rwrouters:
        rw_env = {**os.environ, "PYTHONPATH": str(args.rwrouter_src.resolve())}
        print(f"rwrouter from {args.rwrouter_src}", flush=True)
    workers = args.workers
    if workers is not None and rwrouters and not rwrouter_supports_workers(rw_env):
        print("rwrouter run --help has no --workers yet: running without it", file=sys.stderr)
        workers = None
    inputs, notes = load_inputs(args, runs, workdir)
    for name in dict.fromkeys(RUNS[k].workload for k in runs if RUNS[k].budget):
        distinct, series = budget_keys(inputs[name][0])
        if distinct != series:  # the budget would count some twice-seen keys once
            raise SystemExit(
                f"budgeted: {series - distinct} of A's {series:,} series share a metric name "
                "and crc32 with another, so what A must hold is not known: pick another --seed"
            )
        budget = budget_expectation(inputs[name][0])
        notes.append(
            f"budgeted: series_limit {budget.limit:,} on A ({budget.limit / series:.0%} of its "
            f"{series:,} series), {budget.over:,} series to the fallback B; expected at the "
            f"sinks A {budget.samples_a:,}, B {budget.samples_b:,} samples"
        )
        print(notes[-1], flush=True)
    digests = {}
    if args.check_content:
        digests = {n: expected_digests(w) for n, (w, _) in inputs.items() if n in WORKLOADS}
        digests.pop("churn", None)
    first = next(iter(inputs.values()))
    return Setup(
        runs=runs,
        peer=None,
        rw_env=rw_env,
        workers=workers,
        inputs=inputs,
        digests=digests,
        floor=floor_in_child(first[1]),
        timeouts={n: args.timeout or 120 + w.samples / 5_000 for n, (w, _) in inputs.items()},
        notes=notes,
    )


def contender_for(
    args: argparse.Namespace, setup: Setup, run: RunSpec, sub: Path, sinks: tuple[Sink, Sink]
) -> Contender:
    """The contender of ``run`` in the work directory ``sub``."""
    a, b = sinks
    churning = WORKLOADS[run.workload].churn
    dests = churn.destinations() if churning else basic_destinations(args.rules)
    if run.router == "vmagent":
        assert setup.peer is not None
        return vmagent_contender(
            sub,
            a.url,
            b.url,
            dests,
            args.batch,
            binary=Path(setup.peer["path"]),
            flags=setup.peer["flags"],
            name=run.key,
        )
    workload = setup.input_of(run)[0]
    options = RwrouterOptions(
        audit_a=run.audit,
        series_limit_a=budget_expectation(workload).limit if run.budget else None,
        cache_entries=int(workload.extra["distinct_label_sets"]) // 2 if churning else None,
        batch_send_deadline=SMOKE_DEADLINE if args.smoke else None,
    )
    return rwrouter_contender(
        sub,
        a.url,
        b.url,
        dests,
        setup.workers,
        setup.rw_env,
        args.batch,
        name=run.key,
        input=run.input,
        options=options,
    )


def check_for(setup: Setup, run: RunSpec) -> Check:
    """What the sinks must hold after ``run`` (see :class:`bench.measure.Check`)."""
    workload = setup.input_of(run)[0]
    spec = WORKLOADS[run.workload]
    prime = None
    if spec.primed:
        prime = (workload.samples_a // workload.scrapes, workload.samples_b // workload.scrapes)
    digests = setup.digests.get(run.workload)
    expected = (workload.samples_a, workload.samples_b)
    if run.budget:
        budget = budget_expectation(workload)
        expected = (budget.samples_a, budget.samples_b)
    return Check(
        expected,
        prime=prime,
        digests=digests,
        hashing=digests is not None or spec.churn,
        split=not run.budget,
    )


def check_budget(m: Measurement, workload: Workload, workers: int | None = None) -> None:
    """The ``budgeted`` run's own figures (rwrouter's ``/metrics``, read after delivery, with
    ``--workers`` merged over the workers: :func:`bench.contenders.parse_router_metrics`): A
    must count its series over the budget (``rwrouter_series_limited_total``), their samples
    sent to the fallback (``rwrouter_samples_dropped_total{reason="series_limit"}``, exactly)
    and ``limit`` active series (the workers' one shared count); else ``m`` is not ok, with a
    note saying what differed. One process counts each series over the budget once; each of
    ``workers`` counts those it decided itself, so a series that reached two workers counts
    twice: the sum is then from the series over the budget to ``workers`` times them, and
    every worker must have answered (``rwrouter_worker_up``)."""
    budget = budget_expectation(workload)
    rm = m.router_metrics
    got = tuple(
        int(rm.get(key, {}).get("A", -1))
        for key in ("series_limited", "series_limit_samples", "series_limit_active")
    )
    want = (budget.over, budget.over * workload.scrapes, budget.limit)
    count = workers or 1
    limited_ok = budget.over <= got[0] <= count * budget.over
    if not limited_ok or got[1:] != want[1:]:
        m.ok = False
        over = f"{budget.over}" if count == 1 else f"{budget.over}..{count * budget.over}"
        m.notes.append(
            "series budget of A: series over it, their samples, active series "
            f"{got}, expected ({over}, {want[1]}, {want[2]}) "
            f"(limit {budget.limit:,} of {budget.series:,} series)"
        )
    up = rm.get("worker_up", {})
    if count > 1 and (len(up) != count or not all(v == 1 for v in up.values())):
        m.ok = False
        m.notes.append(f"series budget of A: not every worker's /metrics answered: {up}")


def run_rounds(
    args: argparse.Namespace, setup: Setup, workdir: Path, sinks: tuple[Sink, Sink]
) -> list[dict[str, Measurement]]:
    """``--rounds`` rounds of every run, alternating (the order reversed every other
    round)."""
    rounds: list[dict[str, Measurement]] = []
    for number in range(args.rounds):
        rounds.append({})
        order = setup.runs if number % 2 == 0 else setup.runs[::-1]
        for key in order:
            run = RUNS[key]
            sub = workdir / f"{key.replace('/', '-')}-{number + 1}"
            sub.mkdir()
            c = contender_for(args, setup, run, sub, sinks)
            label = f"{key} (round {number + 1})"
            print(f"running {label} ...", flush=True)
            workload, path = setup.input_of(run)
            timeout = setup.timeouts[run.workload]
            m = measure(
                c, workload, path, sinks, args.senders, sub, timeout, check=check_for(setup, run)
            )
            if run.budget and m.ok:
                check_budget(m, workload, setup.workers)
            rounds[-1][key] = m
            status = "ok" if m.ok else f"FAILED {m.error or ''}"
            print(
                f"  {label}: {status} in {m.prime_wall_seconds + m.wall_seconds:.1f} s", flush=True
            )
    return rounds


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scenarios; exit status 0 when every run delivered exactly the expected samples
    to A and B (and everything else :func:`bench.measure.measure` checks held, and churn's
    runs delivered the same content), whether or not the targets were met."""
    args = parse_args(argv)
    peer: dict[str, Any] | None = None
    if any(RUNS[k].router == "vmagent" for k in run_keys(args)):
        peer = vmagent_peer(args.vmagent)
        if "error" in peer:
            print(peer["error"], file=sys.stderr)
            return 2
        print(f"vmagent: {peer['path']}: {peer['version'] or '(prints no version)'}", flush=True)
    t_start = time.monotonic()
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(
            f"warning: 1-minute load average {load_before[0]:.2f} before the run: other "
            "processes compete for the CPUs; figures may be off",
            file=sys.stderr,
        )
    workdir = Path(tempfile.mkdtemp(prefix="rwrouter-bench-"))
    sinks: list[Sink] = []
    with _terminate_as_interrupt():
        try:
            setup = prepare(args, workdir)
            setup.peer = peer
            sinks = [start_sink(n, workdir, digest=False) for n in ("A", "B")]
            rounds = run_rounds(args, setup, workdir, (sinks[0], sinks[1]))
        except KeyboardInterrupt as exc:
            print(f"interrupted ({exc or 'Ctrl-C'}): children stopped", file=sys.stderr)
            return 130
        finally:
            for sink in sinks:
                procs.stop(sink.proc, timeout=10)
            if not args.keep_workdir:
                subprocess.run(["rm", "-rf", str(workdir)], check=False)
    load_after = os.getloadavg()
    report = print_report(args, setup, rounds, (load_before, load_after))
    total = time.monotonic() - t_start
    print(
        f"total time {total:.1f} s"
        + (f"; work directory kept: {workdir}" if args.keep_workdir else "")
    )
    if args.json:
        write_json(args.json, report, total=total, load=(load_before, load_after))
    return 0 if rounds and all(m.ok for r in rounds for m in r.values()) else 1
