"""``rwrouter compare``: run the same PromQL against the self-hosted store and the workspace,
and report each store's latency and whether their results agree.

``rwrouter compare --config FILE --query 'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)' --range
24h --step 30s --repeat 5`` (or ``--queries FILE``: one query per line, ``#`` comment lines)
runs each query as a range query ``--repeat`` times on each store, one request at a time,
alternating which store goes first (:mod:`rwrouter.compare.client`). The stores are the
configuration's destinations (:mod:`rwrouter.compare.targets`): the workspace is the
``sigv4`` one, its queries signed with its own credentials; the self-hosted store the
``fallback: true`` one, else the only other one (``--workspace-name`` /
``--self-hosted-name`` pick others). Their query URLs are derived from the remote write
URLs (``.../api/v1/remote_write`` or ``.../api/v1/write``), or given as Prometheus API
bases: ``--self-hosted http://prometheus:9090``, ``--workspace
https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>``.

Per query: p50 and p95 of each store's latency (seconds until the whole answer is read),
the speed-up (self-hosted p50 / workspace p50), and the parity of the first answers: the
same series, every point's value equal within ``--tolerance`` (relative; default 1e-9, far
above the rounding of a sum taken in another order, far below any real difference), what
is missing where by family. A series of the self-hosted store that the configuration does
not send to the workspace (its rules, as ``rwrouter relabel`` shows them) is "not migrated",
not a difference; a series is looked for in the workspace under the labels the
configuration gives it there (escaped names included). A run that times out
(``--timeout``) or fails is reported, not raised. Then one summary line for a migration log.
``--json`` prints the same as one JSON document.

Exit 0: every query answered by both stores, same results; 1: some query's results differ;
3: no difference, but some run timed out or failed; 2: usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rwrouter.errors import ConfigError, InvariantError
from rwrouter.logs import escape

if TYPE_CHECKING:
    from rwrouter.compare.client import Store
    from rwrouter.compare.parity import Expected
    from rwrouter.compare.report import QueryReport
    from rwrouter.compare.targets import Window
    from rwrouter.config import Config


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rwrouter compare`` (:func:`cmd_compare`) and its options."""
    p = sub.add_parser(
        "compare",
        help="the same PromQL on the self-hosted store and the workspace: latency and parity",
        description="Run range queries against the self-hosted store and the workspace "
        "(signed with the destination's SigV4 credentials): p50/p95 latency on each side, "
        "their ratio, result parity (series, values within a tolerance) and a summary line. "
        "Exit 0 parity, 1 differences, 3 a run timed out or failed, 2 usage.",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="rwrouter's configuration")
    p.add_argument(
        "--query", action="append", default=[], metavar="PROMQL", help="a query (repeatable)"
    )
    p.add_argument(
        "--queries", metavar="FILE", help="a file of queries: one per line, # comment lines"
    )
    p.add_argument("--range", default="1h", help="how far back from --end (default 1h)")
    p.add_argument("--step", default=None, help="resolution (default: range/250, at least 1s)")
    p.add_argument(
        "--end",
        default=None,
        help="end of the range: RFC 3339 or unix seconds (default: now, down to a whole step)",
    )
    p.add_argument("--repeat", type=_positive, default=5, help="runs per store (default 5)")
    p.add_argument("--timeout", default="2m", help="per run (default 2m, Prometheus's own)")
    p.add_argument("--tolerance", type=_tolerance, default=1e-9, help="relative (default 1e-9)")
    p.add_argument(
        "--self-hosted",
        dest="self_hosted",
        metavar="URL",
        help="the self-hosted store's Prometheus API base, e.g. http://prometheus:9090 "
        "(default: from its remote write URL)",
    )
    p.add_argument(
        "--workspace",
        metavar="URL",
        help="the workspace's API base, https://aps-workspaces.<region>.amazonaws.com/"
        "workspaces/<id> (default: from its remote write URL)",
    )
    p.add_argument("--self-hosted-name", metavar="NAME", help="the self-hosted destination")
    p.add_argument("--workspace-name", metavar="NAME", help="the workspace destination")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_compare)


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return int(text)


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a relative tolerance in [0, 1), got {text!r}")
    return value


def _seconds(text: str, flag: str) -> float:
    from rwrouter.config import parse_duration

    return parse_duration(text, flag)


def _end(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError("--end", f"expected RFC 3339 or unix seconds, got {text!r}") from None
    if moment.tzinfo is None:
        raise ConfigError("--end", f"give a time zone (e.g. Z): {text!r}")
    return moment.timestamp()


def _queries(args: argparse.Namespace) -> list[str]:
    from rwrouter.compare.targets import parse_queries

    queries = [q for q in args.query if q.strip()]
    if args.queries is not None:
        try:
            with open(args.queries, encoding="utf-8") as file:
                queries += parse_queries(file.read())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError("--queries", f"{args.queries}: {exc}") from None
    if not queries:
        raise ConfigError("compare", "give --query PROMQL or --queries FILE")
    return queries


def expected_in_workspace(config: Config, workspace: str) -> Expected:
    """How the workspace holds a self-hosted series: the labels the router sends it with
    (its rules and name escaping: :func:`rwrouter.routing.explain.explain`), None when the
    router does not send it there. A series without ``__name__`` (an aggregation's result)
    is expected under its own labels."""
    from rwrouter.routing import Router, build_router
    from rwrouter.routing.explain import SENT, explain

    built = build_router(config)
    router = Router(
        global_rules=built.global_rules, routes=built.routes, cache_size=1, cache_bytes=1
    )
    memo: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...] | None] = {}

    def expected(labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...] | None:
        if "__name__" not in dict(labels):
            return labels
        if labels not in memo:
            try:
                found = explain(labels, router.global_rules, router.routes, router=router)
            except InvariantError:
                memo[labels] = labels
            else:
                mine = next(d for d in found.decisions if d.name == workspace)
                memo[labels] = tuple(sorted(mine.labels or ())) if mine.outcome == SENT else None
        return memo[labels]

    return expected


async def _compare(
    args: argparse.Namespace, config: Config, window: Window, queries: Sequence[str]
) -> list[QueryReport]:
    from rwrouter.compare.client import open_store, run_queries
    from rwrouter.compare.parity import compare
    from rwrouter.compare.report import QueryReport, side_stats
    from rwrouter.compare.targets import choose_destinations, store_url

    ws, sh = choose_destinations(
        config, workspace=args.workspace_name, self_hosted=args.self_hosted_name
    )
    index = {d.name: i for i, d in enumerate(config.remote_write)}
    stores: tuple[Store, Store] = (
        await open_store(
            "self-hosted",
            store_url(sh, args.self_hosted, "--self-hosted"),
            sh,
            index=index[sh.name],
        ),
        await open_store(
            "workspace", store_url(ws, args.workspace, "--workspace"), ws, index=index[ws.name]
        ),
    )
    expected = expected_in_workspace(config, ws.name)
    timeout = _seconds(args.timeout, "--timeout")
    reports: list[QueryReport] = []
    queried = run_queries(stores, queries, window, repeat=args.repeat, timeout=timeout)
    async for runs in queried:
        query = queries[len(reports)]
        (sh_runs, sh_first), (ws_runs, ws_first) = runs["self-hosted"], runs["workspace"]
        parity = None
        if sh_first is not None and ws_first is not None:
            parity = compare(sh_first, ws_first, tolerance=args.tolerance, expected=expected)
        reports.append(
            QueryReport(
                query=query,
                start=window.start,
                end=window.end,
                step=window.step,
                self_hosted=side_stats(sh_runs),
                workspace=side_stats(ws_runs),
                parity=parity,
                urls={s.role: s.base for s in stores},
            )
        )
    return reports


def cmd_compare(args: argparse.Namespace) -> int:
    """``rwrouter compare``: print the report; the exit code of
    :func:`rwrouter.compare.report.exit_code` (2 for usage/configuration errors, raised as
    ConfigError)."""
    from rwrouter.compare.report import exit_code, format_report, summary_line, to_json
    from rwrouter.compare.targets import window
    from rwrouter.config import load_config

    config = load_config(args.config)
    queries = _queries(args)
    step = None if args.step is None else _seconds(args.step, "--step")
    try:
        span = window(
            now=time.time(),
            range_s=_seconds(args.range, "--range"),
            step_s=step,
            end=_end(args.end),
        )
    except ValueError as exc:
        raise ConfigError("--range/--step", str(exc)) from None
    reports = asyncio.run(_compare(args, config, span, queries))
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary = summary_line(reports, when=when)
    if args.json:
        print(json.dumps(to_json(reports, tolerance=args.tolerance, summary=summary), indent=2))
    else:
        text = format_report(reports, tolerance=args.tolerance, summary=summary)
        print("\n".join(map(escape, text.split("\n"))))  # queries and labels: outside data
    return exit_code(reports)
