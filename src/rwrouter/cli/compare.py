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

Exit status (:data:`EXIT_HELP`): 0 every query answered by both stores, same results; 1
some query's results differ or have no data (nothing to compare: check the query), and only
then; 2 a usage or configuration error, found before any query is sent: a bad flag value
(``--end`` not a time in 1970-9999, a range or step under 1 ms or over Prometheus's 11,000
steps, ``--timeout 0s``, ...), a bad URL (``user:password@``, a query string, not http(s)),
an unreadable or oversized ``--queries`` file, no AWS credentials, an unreadable TLS file —
or a query both stores refuse as ``bad_data`` (status ``bad query``); 3 no difference found,
but some run timed out or failed (no answer, an error answer, a redirect, an answer over
``--max-answer-bytes`` or not a range query result) — or the command was interrupted or hit
a bug in rwrouter (its traceback is printed; 1 is never a crash). Every expected failure is
one line, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rwrouter.errors import ConfigError, CredentialsError, InvariantError
from rwrouter.logs import escape

if TYPE_CHECKING:
    from rwrouter.compare.client import Store
    from rwrouter.compare.parity import Expected
    from rwrouter.compare.report import QueryReport
    from rwrouter.compare.targets import Window
    from rwrouter.config import Config
    from rwrouter.config.model import DestinationConfig

EXIT_HELP = (
    "Exit 0 parity, 1 results differ or no data, 2 usage or configuration error (flags, URLs, "
    "credentials, files, a query both stores refuse), 3 a run timed out or failed (or an "
    "internal error)."
)
#: The largest ``--queries`` file read (bytes): some thousand queries.
MAX_QUERIES_BYTES = 1 << 20
#: The most runs per store and query (``--repeat``).
MAX_REPEAT = 1000
#: The longest ``--timeout`` (seconds): a day.
MAX_TIMEOUT_S = 86_400.0
#: ``--max-answer-bytes`` bounds (bytes): 1 KiB to 4 GiB.
ANSWER_BYTES_RANGE = (1 << 10, 4 << 30)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rwrouter compare`` (:func:`cmd_compare`) and its options."""
    p = sub.add_parser(
        "compare",
        help="the same PromQL on the self-hosted store and the workspace: latency and parity",
        description="Run range queries against the self-hosted store and the workspace "
        "(signed with the destination's SigV4 credentials): p50/p95 latency on each side, "
        "their ratio, result parity (series, values within a tolerance) and a summary line. "
        "Queries are POSTed (form body); redirects are not followed. " + EXIT_HELP,
    )
    p.add_argument("--config", required=True, metavar="FILE", help="rwrouter's configuration")
    p.add_argument(
        "--query", action="append", default=[], metavar="PROMQL", help="a query (repeatable)"
    )
    p.add_argument(
        "--queries",
        metavar="FILE",
        help="a file of queries: one per line, # comment lines (a regular UTF-8 file of at "
        "most 1 MiB)",
    )
    p.add_argument("--range", default="1h", help="how far back from --end (default 1h)")
    p.add_argument(
        "--step",
        default=None,
        help="resolution (default: about range/250, rounded up to 1s, 2s, 5s, 10s, 15s, 30s, "
        "1m, ...)",
    )
    p.add_argument(
        "--end",
        default=None,
        help="end of the range: RFC 3339 or unix seconds, in 1970-9999 (default: 30s ago); "
        "start and end are rounded down to multiples of the step",
    )
    _add_limits(p)
    _add_stores(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_compare)


def _add_stores(p: argparse.ArgumentParser) -> None:
    """Where the stores are, which destinations they are, and the sender's external labels."""
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
    p.add_argument(
        "--external-label",
        dest="external_labels",
        action="append",
        default=[],
        type=_external_label,
        metavar="NAME=VALUE",
        help="an external label of the sender (repeatable): when --self-hosted is the sender "
        "itself, its TSDB lacks the external labels its remote write adds; series are "
        "compared as the sender sends them, without these labels",
    )
    p.add_argument("--self-hosted-name", metavar="NAME", help="the self-hosted destination")
    p.add_argument("--workspace-name", metavar="NAME", help="the workspace destination")


def _add_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--repeat", type=_positive, default=5, help=f"runs per store, 1-{MAX_REPEAT} (default 5)"
    )
    p.add_argument(
        "--timeout", default="2m", help="per run, over 0 and at most 1d (default 2m, Prometheus's)"
    )
    p.add_argument(
        "--tolerance", type=_tolerance, default=1e-9, help="relative, in [0, 1) (default 1e-9)"
    )
    p.add_argument(
        "--max-answer-bytes",
        default="64MiB",
        metavar="SIZE",
        help="the largest answer read, e.g. 64MiB (default; 1KiB-4GiB): a parsed answer takes "
        "about 14 times its size; a larger answer fails its run",
    )


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 0 < int(text) <= MAX_REPEAT):
        raise argparse.ArgumentTypeError(f"expected a whole number 1-{MAX_REPEAT}, got {text!r}")
    return int(text)


def _external_label(text: str) -> tuple[str, str]:
    from rwrouter.compare.external import parse_external_label

    try:
        return parse_external_label(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:  # NaN is refused too: every comparison with it is false
        raise argparse.ArgumentTypeError(f"expected a relative tolerance in [0, 1), got {text!r}")
    return value


def _seconds(text: str, flag: str) -> float:
    from rwrouter.config import parse_duration

    return parse_duration(text, flag)


def _timeout(text: str) -> float:
    seconds = _seconds(text, "--timeout")
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise ConfigError("--timeout", f"expected a duration over 0 and at most 1d, got {text!r}")
    return seconds


def _answer_bytes(text: str) -> int:
    from rwrouter.config import parse_size

    size = parse_size(text, "--max-answer-bytes")
    low, high = ANSWER_BYTES_RANGE
    if not low <= size <= high:
        raise ConfigError("--max-answer-bytes", f"expected 1KiB to 4GiB, got {text!r}")
    return size


def _end(text: str | None) -> float | None:
    """``--end`` in unix seconds (its range is :func:`~rwrouter.compare.targets.window`'s)."""
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
    try:
        return moment.timestamp()
    except (OverflowError, ValueError):  # a time zone pushing it out of datetime's range
        raise ConfigError("--end", f"expected a time in 1970-9999, got {text!r}") from None


def _queries(args: argparse.Namespace) -> list[str]:
    from rwrouter.compare.targets import parse_queries
    from rwrouter.config.files import read_regular

    queries = [q for q in args.query if q.strip()]
    if args.queries is not None:
        try:
            text = read_regular(args.queries, MAX_QUERIES_BYTES).decode("utf-8")
            queries += parse_queries(text)
        except OSError as exc:
            raise ConfigError("--queries", f"{args.queries}: {exc.strerror}") from None
        except ValueError as exc:  # not a regular file, too large, not UTF-8, no query
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


async def _open(role: str, dest: DestinationConfig, base: str, *, index: int) -> Store:
    """:func:`~rwrouter.compare.client.open_store`, its failures as ConfigError (exit 2): no
    usable credentials, a TLS file that cannot be used."""
    from rwrouter.compare.client import open_store

    path = f"remote_write[{index}]"
    try:
        return await open_store(role, base, dest, index=index)
    except CredentialsError as exc:
        raise ConfigError(path + (".sigv4" if dest.sigv4 else ""), str(exc)) from None


async def _compare(
    args: argparse.Namespace,
    config: Config,
    window: Window,
    queries: Sequence[str],
    limits: tuple[float, int],
) -> list[QueryReport]:
    from rwrouter.compare.client import run_queries
    from rwrouter.compare.external import ExternalLabels
    from rwrouter.compare.parity import Matrix, Parity, compare
    from rwrouter.compare.report import QueryReport, side_stats
    from rwrouter.compare.targets import choose_destinations, store_url

    external = ExternalLabels(tuple(args.external_labels))
    names = [name for name, _ in external.pairs]
    if len(set(names)) < len(names):
        raise ConfigError("--external-label", f"a label name given twice: {names}")
    ws, sh = choose_destinations(
        config, workspace=args.workspace_name, self_hosted=args.self_hosted_name
    )
    sh_base = store_url(sh, args.self_hosted, "--self-hosted")
    ws_base = store_url(ws, args.workspace, "--workspace")
    index = {d.name: i for i, d in enumerate(config.remote_write)}
    stores: tuple[Store, Store] = (
        await _open("self-hosted", sh, sh_base, index=index[sh.name]),
        await _open("workspace", ws, ws_base, index=index[ws.name]),
    )
    expected = external.expected(expected_in_workspace(config, ws.name))
    timeout, max_bytes = limits
    reports: list[QueryReport] = []

    def judge(self_hosted: Matrix, workspace: Matrix) -> Parity:
        sh_series, ws_series = external.keyed(self_hosted), external.keyed(workspace)
        return compare(sh_series, ws_series, tolerance=args.tolerance, expected=expected)

    queried = run_queries(
        stores,
        queries,
        window,
        judge,
        repeat=args.repeat,
        timeout=timeout,
        max_answer_bytes=max_bytes,
    )
    async for runs, parity in queried:
        query = queries[len(reports)]
        sh_runs, ws_runs = runs["self-hosted"], runs["workspace"]
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
    """``rwrouter compare``: print the report; the exit status of
    :func:`rwrouter.compare.report.exit_code` (0, 1, 3), 2 for a usage or configuration
    error (raised as ConfigError, printed by :func:`rwrouter.cli.main`), 3 when interrupted
    or for a bug (its traceback printed): never 1, which says the results differ."""
    from rwrouter.compare.report import EXIT_NOT_COMPARED

    try:
        return _cmd_compare(args)
    except ConfigError:
        raise
    except KeyboardInterrupt:
        print("rwrouter compare: interrupted", file=sys.stderr)
        return EXIT_NOT_COMPARED
    except Exception:  # a bug in rwrouter: say so, with its traceback, but never exit 1
        print("rwrouter compare: internal error (a bug in rwrouter):", file=sys.stderr)
        traceback.print_exc()
        return EXIT_NOT_COMPARED


def _cmd_compare(args: argparse.Namespace) -> int:
    from rwrouter.compare.report import exit_code, format_report, summary_line
    from rwrouter.compare.report_json import to_json
    from rwrouter.compare.targets import window
    from rwrouter.config import load_config

    config = load_config(args.config)
    queries = _queries(args)
    step = None if args.step is None else _seconds(args.step, "--step")
    span = window(
        now=time.time(), range_s=_seconds(args.range, "--range"), step_s=step, end=_end(args.end)
    )
    limits = (_timeout(args.timeout), _answer_bytes(args.max_answer_bytes))
    reports = asyncio.run(_compare(args, config, span, queries, limits))
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary = summary_line(reports, when=when)
    if args.json:
        document = to_json(reports, tolerance=args.tolerance, summary=summary)
        print(json.dumps(document, indent=2, allow_nan=False))
    else:
        text = format_report(reports, tolerance=args.tolerance, summary=summary)
        print("\n".join(map(escape, text.split("\n"))))  # queries and labels: outside data
    return exit_code(reports)
