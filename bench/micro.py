"""In-process measurements with rwrouter's public Python API (``python -m bench micro``).

Only documented entry points are used, because the routing internals are being rewritten:
``rwrouter.wire.decompress``, ``rwrouter.routing.Router`` / ``Route`` (``router.route(data,
now=...)`` on the decompressed body, ``len(router)``, ``cached_bytes``; cache bounds
``cache_size``, ``cache_bytes``, ``cache_max_age``: the ``relabel_cache`` section's
``max_entries``, ``max_bytes``, ``max_age``), ``rwrouter.wire.accelerator.ACCELERATED``,
``rwrouter.relabel.parse_relabel_configs``, and the SigV4 signer
``rwrouter.auth.schemes.SigV4`` with a static-key ``rwrouter.auth.credentials.load_source``.

- (a) decode + route throughput (samples per CPU-second, ``time.process_time``) with 1, 10 and
  100 relabel rules per destination (K-1 no-op ``labeldrop`` rules, then A's keep; B is the
  fallback with the K-1 labeldrops), cache cold (a new Router: every label set is a miss) and
  warm (the same label sets again: every one a hit);
- (b) CPU cost of SigV4-signing one request body of typical size (microseconds per signature,
  static fake credentials: no network);
- (c) memory per cached label set (bytes; ``tracemalloc`` over N distinct label sets routed into
  a new Router, divided by ``len(router)``; RSS delta shown too);
- (d) churn: scrapes where a fraction of the nodes' training pods restart every scrape (new
  ``pod`` and ``UUID`` values), cache size and RSS (MiB) over time with a bounded cache;
- (e) the audit (``rwrouter.audit.ActiveSeries``, what a ``shadow: true`` or ``audit: true``
  destination costs): CPU per series counted (first sight, seen again) next to a warm route's,
  and memory per series remembered (``tracemalloc``);
- (f) a series budget (``rwrouter.routing.BudgetedRouter`` with a
  ``rwrouter.routing.budget.SeriesBudget``: ``series_limit`` on A, 90 % of A's series,
  ``on_series_limit: fallback``): CPU per series of routing alone (the bodies decompressed
  first) with and without it, cold (every label set new: a miss) and warm (scrape 1: hits),
  rounds alternated, medians.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import snappy  # type: ignore[import-untyped,unused-ignore]

from bench.workload import (
    A_REGEX,
    SeriesDef,
    encode_labels_pb,
    fleet_series,
    load_or_generate,
    scrape_bodies,
    sorted_labels,
)
from rwrouter.audit import ActiveSeries
from rwrouter.auth.credentials import load_source
from rwrouter.auth.schemes import SigV4
from rwrouter.config import OnSeriesLimit
from rwrouter.protocol import RW1_MESSAGE, request_headers
from rwrouter.relabel import RelabelConfig, parse_relabel_configs
from rwrouter.routing import BudgetedRouter, Route, Router
from rwrouter.routing.budget import SeriesBudget
from rwrouter.wire import decompress
from rwrouter.wire.accelerator import ACCELERATED

MAX_DECODED = 64 * 1024 * 1024  # bytes: rwrouter's default server.max_decoded_bytes


def rss_bytes() -> int:
    """Resident set size of this process (``VmRSS``), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def rules_for(k: int) -> tuple[tuple[RelabelConfig, ...], tuple[RelabelConfig, ...]]:
    """(A's rules, B's rules) for K rules per destination: K-1 no-op labeldrops, then A's keep
    (B is the fallback and has only the labeldrops)."""
    drops = [{"action": "labeldrop", "regex": f"bench_absent_label_{i}"} for i in range(k - 1)]
    keep = {"action": "keep", "source_labels": ["__name__"], "regex": A_REGEX}
    a = parse_relabel_configs([*drops, keep], "a")
    b = parse_relabel_configs(drops, "b")
    return a, b


def make_router(k: int, **cache: Any) -> Router:
    """A Router with destinations A (keep) and B (fallback), K rules each; ``cache``:
    ``cache_size``, ``cache_bytes``, ``cache_max_age`` (rwrouter's defaults otherwise)."""
    a, b = rules_for(k)
    routes = [Route(name="A", rules=a), Route(name="B", rules=b, fallback=True)]
    return Router(global_rules=(), routes=routes, **cache)


def route_one(router: Router, body: bytes, now: float) -> Any:
    """Decompress and route one compressed body (``Router.route`` takes the decompressed bytes
    and ``now``, seconds on a monotonic clock, for the cache's age bound)."""
    return router.route(decompress(body, max_decoded_bytes=MAX_DECODED), now=now)


def route_bodies(
    router: Router, bodies: Sequence[bytes], now: float | None = None
) -> tuple[int, int, int]:
    """Decode and route every body at ``now`` (default: ``time.monotonic()`` per body);
    (samples in, samples to A, samples to B)."""
    total = a = b = 0
    for body in bodies:
        out = route_one(router, body, time.monotonic() if now is None else now)
        total += out.samples_in
        a += out.shares[0].samples
        b += out.shares[1].samples
    return total, a, b


def bench_route(nodes: int, seed: int, ks: Sequence[int]) -> list[dict[str, Any]]:
    """(a): samples/CPU-s for each K, cold (scrape 0, new Router) and warm (scrape 1 again
    through the same Router)."""
    workload, _ = load_or_generate(seed, nodes, 2)
    half = len(workload.bodies) // 2
    cold_bodies, warm_bodies = workload.bodies[:half], workload.bodies[half:]
    rows = []
    for k in ks:
        router = make_router(k)
        t0 = time.process_time()
        n_cold, a, b = route_bodies(router, cold_bodies)
        cold = time.process_time() - t0
        t0 = time.process_time()
        n_warm, _, _ = route_bodies(router, warm_bodies)
        warm = time.process_time() - t0
        rows.append(
            {
                "rules": k,
                "series": n_cold,
                "cold_samples_per_cpu_s": n_cold / cold,
                "warm_samples_per_cpu_s": n_warm / warm,
                "cold_us_per_series": cold / n_cold * 1e6,
                "warm_us_per_series": warm / n_warm * 1e6,
                "to_a": a,
                "to_b": b,
            }
        )
    return rows


def bench_audit(nodes: int, seed: int) -> dict[str, Any]:
    """(e): every series of the workload routed to one destination (no rules: a shadow
    destination taking everything) and counted by an :class:`ActiveSeries`: us of CPU per
    series at first sight (scrape 0) and seen again (scrape 1), a warm route's us per series for
    comparison, and bytes per series remembered."""
    workload, _ = load_or_generate(seed, nodes, 2)
    half = len(workload.bodies) // 2
    router = Router(global_rules=(), routes=[Route(name="all")])
    shares = [route_one(router, body, 0.0).shares[0] for body in workload.bodies]
    t0 = time.process_time()
    for body in workload.bodies[half:]:  # warm: every label set cached
        route_one(router, body, 0.0)
    route = time.process_time() - t0
    audit = ActiveSeries(window=7200.0, max_series=10**8, rate_window=300.0, now=0.0)
    times = []
    for part in (shares[:half], shares[half:]):
        t0 = time.process_time()
        for share in part:
            audit.observe(share.body, share.index, 1.0)
        times.append(time.process_time() - t0)
    series = len(audit)
    gc.collect()
    tracemalloc.start()
    fresh = ActiveSeries(window=7200.0, max_series=10**8, rate_window=300.0, now=0.0)
    before = tracemalloc.get_traced_memory()[0]
    for share in shares[:half]:
        fresh.observe(share.body, share.index, 1.0)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {
        "series": series,
        "first_sight_us_per_series": times[0] / series * 1e6,
        "seen_again_us_per_series": times[1] / series * 1e6,
        "warm_route_us_per_series": route / series * 1e6,
        "bytes_per_series": held / series,
    }


def bench_budget(nodes: int, seed: int, rounds: int) -> dict[str, Any]:
    """(f): us of CPU per series routed (``Router.route`` on decompressed bodies), without a
    budget and with one on A (90 % of A's series, fallback to B), cold (scrape 0 through a new
    router) and warm (scrape 1 after it); ``rounds`` of both, alternated, medians."""
    workload, _ = load_or_generate(seed, nodes, 2)
    per = len(workload.bodies) // workload.scrapes
    scrapes = [
        [
            decompress(b, max_decoded_bytes=MAX_DECODED)
            for b in workload.bodies[i * per : (i + 1) * per]
        ]
        for i in range(2)
    ]
    series = workload.series_per_scrape
    probe = make_router(1)
    a_series = sum(probe.route(data, now=0.0).shares[0].series for data in scrapes[0])
    limit = a_series * 9 // 10

    def router(budgeted: bool) -> Router:
        plain = make_router(1)
        if not budgeted:
            return plain
        budget = SeriesBudget(limit=limit, window=7200.0, action=OnSeriesLimit.FALLBACK, now=0.0)
        return BudgetedRouter(budgets={"A": budget}, global_rules=(), routes=plain.routes)

    times: dict[str, list[float]] = {
        f"{k}_{p}": [] for k in ("plain", "budget") for p in ("cold", "warm")
    }
    for r in range(rounds):
        for kind in ("plain", "budget") if r % 2 == 0 else ("budget", "plain"):
            rt = router(kind == "budget")
            gc.collect()
            for phase, bodies in zip(("cold", "warm"), scrapes, strict=True):
                t0 = time.process_time()
                for data in bodies:
                    rt.route(data, now=1.0)
                times[f"{kind}_{phase}"].append((time.process_time() - t0) / series * 1e6)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {
        "series": series,
        "a_series": a_series,
        "series_limit": limit,
        "us_per_series": med,
        "rounds": times,
        "cold_ratio": med["plain_cold"] / med["budget_cold"],
        "warm_ratio": med["plain_warm"] / med["budget_warm"],
    }


def bench_sigv4(body: bytes, iterations: int) -> dict[str, Any]:
    """(b): microseconds of CPU per SigV4 signature of ``body`` (static fake keys)."""
    source = load_source(
        region="us-east-1", access_key="AKIDEXAMPLE", secret_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCY"
    )
    signer = SigV4(source)
    url = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-bench/api/v1/remote_write"

    async def loop() -> float:
        await signer.headers(url=url, body=body, base=request_headers(RW1_MESSAGE))  # warm up
        t0 = time.process_time()
        for _ in range(iterations):
            await signer.headers(url=url, body=body, base=request_headers(RW1_MESSAGE))
        return time.process_time() - t0

    cpu = asyncio.run(loop())
    return {
        "body_bytes": len(body),
        "iterations": iterations,
        "us_per_signature": cpu / iterations * 1e6,
        "signatures_per_cpu_s": iterations / cpu,
    }


def bench_cache_memory(nodes: int, seed: int) -> dict[str, Any]:
    """(c): bytes per cached label set (tracemalloc) and RSS delta, routing one scrape of
    ``nodes`` nodes into a new Router (1 rule per destination)."""
    workload, _ = load_or_generate(seed, nodes, 1)
    router = make_router(1)
    gc.collect()
    rss0 = rss_bytes()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    route_bodies(router, workload.bodies)  # parsed requests and outputs are dropped after
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    rss1 = rss_bytes()
    n = len(router)
    return {
        "label_sets": n,
        "tracemalloc_bytes_per_set": (after - before) / n,
        "rss_delta_bytes_per_set": (rss1 - rss0) / n,
        "cached_bytes_per_set": router.cached_bytes / n,
        "note": "RSS delta includes tracemalloc's own overhead; cached_bytes is the Router's "
        "own accounting (raw and encoded labels, outcomes) that max_bytes bounds",
    }


def restarted(s: SeriesDef, gen: int) -> SeriesDef | None:
    """Series ``s`` after its node's training pods restarted for the ``gen``-th time (new
    ``pod`` and ``UUID`` values), or None when it does not belong to a training pod."""
    labels = dict(s.labels)
    if not labels.get("pod", "").startswith("llm-pretrain-"):
        return None
    labels["pod"] = f"{labels['pod']}-r{gen}"
    if "UUID" in labels:
        labels["UUID"] = f"{labels['UUID'][:-6]}{gen:06x}"
    return SeriesDef(sorted_labels(labels), s.counter, s.target)


SCRAPE_INTERVAL = 30.0  # seconds between scrapes (workload.md): the churn run's clock


def bench_churn(
    nodes: int, seed: int, scrapes: int, fraction: float, every: int, **cache: Any
) -> list[dict[str, Any]]:
    """(d): route ``scrapes`` scrapes where ``fraction`` of the nodes restart their training
    pods each scrape (a node keeps its new pods until it restarts again), through one Router
    with the ``cache`` bounds (``cache_size``, ``cache_max_age``, ...), on a simulated clock
    (``now`` = scrape x 30 s, so ``max_age`` takes effect without waiting); the distinct label
    sets seen so far, the Router's cache size and bytes and this process's RSS every ``every``
    scrapes. The generator's own memory stays constant (one encoded label set per live
    series)."""
    base = fleet_series(seed, nodes)
    per_node = len(base) // nodes
    series = list(base)
    encoded = [encode_labels_pb(s.labels) for s in series]
    rng = random.Random(f"churn:{seed}")
    router = make_router(1, **cache)
    generation = dict.fromkeys(range(nodes), 0)
    values = [0.0] * len(base)
    distinct = len(base)
    rows = []
    for scrape in range(scrapes):
        if scrape:
            for node in rng.sample(range(nodes), max(1, round(fraction * nodes))):
                generation[node] += 1
                for i in range(node * per_node, (node + 1) * per_node):
                    new = restarted(base[i], generation[node])
                    if new is not None:
                        series[i], encoded[i] = new, encode_labels_pb(new.labels)
                        distinct += 1
        bodies = [
            snappy.compress(b)
            for b, _ in scrape_bodies(encoded, series, values, rng, scrape, (0, 0, 0))
        ]
        route_bodies(router, bodies, now=scrape * SCRAPE_INTERVAL)
        del bodies
        if scrape % every == 0 or scrape == scrapes - 1:
            gc.collect()
            rows.append(
                {
                    "scrape": scrape,
                    "seconds": scrape * SCRAPE_INTERVAL,
                    "distinct_label_sets_seen": distinct,
                    "live_series": len(base),
                    "cache_size": len(router),
                    "cache_bytes": router.cached_bytes,
                    "rss_mib": rss_bytes() / 2**20,
                }
            )
    return rows


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench micro``: run (a)-(d) and print the tables."""
    p = argparse.ArgumentParser(
        prog="python -m bench micro",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--route-nodes", type=int, default=10, help="(a) nodes (730 series each)")
    p.add_argument("--rules", type=int, nargs="+", default=[1, 10, 100], help="(a) K values")
    p.add_argument("--sign-iterations", type=int, default=2000, help="(b)")
    p.add_argument("--memory-nodes", type=int, default=140, help="(c) nodes")
    p.add_argument("--churn-nodes", type=int, default=40, help="(d) nodes")
    p.add_argument("--churn-scrapes", type=int, default=60, help="(d) scrapes")
    p.add_argument("--churn-fraction", type=float, default=0.25, help="(d) nodes restarting")
    p.add_argument(
        "--churn-cache-size",
        type=int,
        default=100_000,
        help="(d) Router cache_size (label sets; max_entries) of the first churn "
        "run; the second has 10x that and --churn-max-age",
    )
    p.add_argument(
        "--churn-max-age",
        type=float,
        default=600.0,
        help="(d) cache_max_age seconds (max_age) of the second churn run",
    )
    p.add_argument("--audit-nodes", type=int, default=140, help="(e) nodes")
    p.add_argument("--budget-nodes", type=int, default=280, help="(f) nodes")
    p.add_argument("--budget-rounds", type=int, default=5, help="(f) rounds")
    p.add_argument(
        "--only", choices=["route", "sigv4", "memory", "churn", "audit", "budget"], nargs="+"
    )
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args(argv)
    parts = set(args.only or ["route", "sigv4", "memory", "churn", "audit", "budget"])
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "accelerated": ACCELERATED,
    }
    print(f"rwrouter accelerator: {'on' if ACCELERATED else 'off (pure Python)'}")

    if "route" in parts:
        rows = bench_route(args.route_nodes, args.seed, args.rules)
        report["route"] = rows
        print(
            f"(a) decode + route, {rows[0]['series']:,} series per pass "
            "(samples per CPU-second; us per series)"
        )
        print(
            _table(
                ["rules/dest", "cold samples/CPU-s", "warm samples/CPU-s", "cold us", "warm us"],
                [
                    [
                        str(r["rules"]),
                        f"{r['cold_samples_per_cpu_s']:,.0f}",
                        f"{r['warm_samples_per_cpu_s']:,.0f}",
                        f"{r['cold_us_per_series']:.2f}",
                        f"{r['warm_us_per_series']:.2f}",
                    ]
                    for r in rows
                ],
            )
        )
        print()
    if "sigv4" in parts:
        workload, _ = load_or_generate(args.seed, args.route_nodes, 2)
        body = workload.bodies[0]
        sig = bench_sigv4(body, args.sign_iterations)
        report["sigv4"] = sig
        print(
            f"(b) SigV4 signing of one {sig['body_bytes']:,}-byte body: "
            f"{sig['us_per_signature']:.1f} us CPU per signature "
            f"({sig['signatures_per_cpu_s']:,.0f} per CPU-second)"
        )
        print()
    if "memory" in parts:
        mem = bench_cache_memory(args.memory_nodes, args.seed)
        report["memory"] = mem
        print(
            f"(c) cache memory: {mem['label_sets']:,} label sets, "
            f"{mem['tracemalloc_bytes_per_set']:.0f} bytes per set (tracemalloc), "
            f"{mem['rss_delta_bytes_per_set']:.0f} bytes per set (RSS delta, "
            "with tracemalloc overhead), "
            f"{mem['cached_bytes_per_set']:.0f} bytes per set (Router.cached_bytes)"
        )
        print()
    if "churn" in parts:
        every = max(1, args.churn_scrapes // 10)
        report["churn"] = {}
        # By max_entries (max_age out of reach), then by max_age (max_entries out of reach).
        modes = {
            "max_entries": {"cache_size": args.churn_cache_size, "cache_max_age": 86_400.0},
            "max_age": {
                "cache_size": 10 * args.churn_cache_size,
                "cache_max_age": args.churn_max_age,
            },
        }
        for mode, cache in modes.items():
            rows = bench_churn(
                args.churn_nodes, args.seed, args.churn_scrapes, args.churn_fraction, every, **cache
            )
            print(
                f"(d) churn bounded by {mode}: {args.churn_nodes} nodes "
                f"({rows[0]['live_series']:,} live series), {args.churn_fraction:.0%} restart "
                f"their training pods every scrape, scrapes {SCRAPE_INTERVAL:.0f} s apart "
                f"(simulated clock); Router cache_size={cache['cache_size']:,} "
                f"cache_max_age={cache['cache_max_age']:,.0f} s"
            )
            print(
                _table(
                    [
                        "scrape",
                        "t s",
                        "distinct label sets seen",
                        "cache size",
                        "cache MiB",
                        "RSS MiB",
                    ],
                    [
                        [
                            str(r["scrape"]),
                            f"{r['seconds']:.0f}",
                            f"{r['distinct_label_sets_seen']:,}",
                            f"{r['cache_size']:,}",
                            f"{r['cache_bytes'] / 2**20:.1f}",
                            f"{r['rss_mib']:.1f}",
                        ]
                        for r in rows
                    ],
                )
            )
            if mode == "max_entries":
                bounded = all(r["cache_size"] <= cache["cache_size"] for r in rows)
                print(
                    f"cache bounded by cache_size ({cache['cache_size']:,}): "
                    f"{'yes' if bounded else 'NO'}"
                )
            else:
                # Seen within max_age: the live set plus the label sets of pods that restarted
                # within the last max_age seconds; two generations keep at most 1 x max_age of
                # history (rotation every max_age / 2, a dropped old generation is >= max_age/2
                # old), so the bound is the distinct sets of the last max_age + one rotation.
                per_scrape = (rows[-1]["distinct_label_sets_seen"] - rows[0]["live_series"]) / max(
                    1, rows[-1]["scrape"]
                )
                window = cache["cache_max_age"] / SCRAPE_INTERVAL
                limit = rows[0]["live_series"] + per_scrape * window
                late = [r for r in rows if r["seconds"] >= cache["cache_max_age"]]
                bounded = all(r["cache_size"] <= limit for r in rows) and bool(late)
                print(
                    f"cache bounded by max_age: {'yes' if bounded else 'NO'} (at most "
                    f"{limit:,.0f} = live set + {window:.0f} scrapes of new label sets "
                    f"at {per_scrape:,.0f} per scrape"
                    + ("" if late else "; run longer than max_age to see it")
                    + ")"
                )
            report["churn"][mode] = {"cache": cache, "rows": rows, "bounded": bounded}
            print()
    if "audit" in parts:
        audit = bench_audit(args.audit_nodes, args.seed)
        report["audit"] = audit
        print(
            f"(e) audit of a destination taking every series ({audit['series']:,} series): "
            f"{audit['first_sight_us_per_series']:.2f} us CPU per series at first sight, "
            f"{audit['seen_again_us_per_series']:.2f} us seen again (a warm route: "
            f"{audit['warm_route_us_per_series']:.2f} us), "
            f"{audit['bytes_per_series']:.0f} bytes per series remembered"
        )
        print()
    if "budget" in parts:
        budget = bench_budget(args.budget_nodes, args.seed, args.budget_rounds)
        report["budget"] = budget
        us = budget["us_per_series"]
        print(
            f"(f) series budget on A ({budget['series_limit']:,} of A's {budget['a_series']:,} "
            f"series; {budget['series']:,} series a scrape), us CPU per series routed, "
            f"median of {args.budget_rounds} rounds: cold {us['plain_cold']:.3f} without, "
            f"{us['budget_cold']:.3f} with (plain/budgeted {budget['cold_ratio']:.2f}); warm "
            f"{us['plain_warm']:.3f} without, {us['budget_warm']:.3f} with "
            f"({budget['warm_ratio']:.2f})"
        )
        print()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0
