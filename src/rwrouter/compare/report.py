"""The report of ``rwrouter compare`` (pure): latency per store, parity, summary line (the
JSON form: :mod:`rwrouter.compare.report_json`).

Each query is run ``repeat`` times against each store (:mod:`rwrouter.compare.client`); each
run is an :class:`Outcome` (seconds from sending the request to the whole answer read, or
why there is no answer: a timeout, an error). :func:`side_stats` gives p50 and p95 of the
answered runs; :class:`QueryReport` adds the speed-up (self-hosted p50 / workspace p50: above
1, the workspace is faster) and the parity (:mod:`rwrouter.compare.parity`) of the first
answer of each store: its :attr:`QueryReport.status` is ``parity``, ``differences``, ``no
data`` (nothing to compare: not parity) or ``not compared``. :func:`exit_code` is the
command's status.
"""

from __future__ import annotations

import datetime as dt
import shlex
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rwrouter.compare.external import labels_only_in_workspace
from rwrouter.compare.parity import NO_NAME, Parity
from rwrouter.config.values import format_duration
from rwrouter.relabel.series import format_labels

__all__ = [
    "EXIT_DIFFERENCES",
    "EXIT_NOT_COMPARED",
    "EXIT_PARITY",
    "EXIT_USAGE",
    "Outcome",
    "QueryReport",
    "SideStats",
    "exit_code",
    "format_report",
    "newest_only",
    "percentile",
    "side_stats",
    "stats_of",
    "summary_line",
]

EXIT_PARITY = 0  # every query answered by both stores, with the same result
EXIT_DIFFERENCES = 1  # some query's results differ (series missing, values), or has no data
EXIT_USAGE = 2  # a usage or configuration error, as for every rwrouter command; here also a
# query both stores refuse as bad_data (PromQL that does not parse, a bad matcher)
EXIT_NOT_COMPARED = 3  # no difference found, but some query failed or timed out on a store
#: How a store's error starts when it refuses the query itself (Prometheus HTTP API: 400,
#: ``errorType`` ``bad_data``).
BAD_QUERY = "HTTP 400: bad_data"

SIDES = ("self-hosted", "workspace")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run of a query on one store: ``seconds`` until the whole answer was read (None
    without an answer), ``timed_out``, ``error`` (one line: an HTTP status and the store's
    reason, a connection failure, an answer that is not a range query result)."""

    seconds: float | None
    timed_out: bool = False
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SideStats:
    """A store's runs of one query: how many, answered, timed out, failed (``error``: the
    first failure's text), p50 and p95 of the answered runs' seconds (None: none answered)."""

    runs: int
    answered: int
    timeouts: int
    errors: int
    error: str | None
    p50: float | None
    p95: float | None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated between the closest ranks
    (``statistics.quantiles(method="inclusive")``: numpy's default; one value is every
    percentile). Raises ValueError for no values or ``q`` outside 0-100."""
    if not values or not 0 <= q <= 100:
        raise ValueError("percentile of no values, or q outside 0-100")
    if len(values) == 1 or q == 100:
        return max(values)
    if q == 0:
        return min(values)
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def side_stats(outcomes: Sequence[Outcome]) -> SideStats:
    """Summarise a store's runs of one query (:class:`SideStats`)."""
    seconds = [o.seconds for o in outcomes if o.seconds is not None and o.error is None]
    failed = [o for o in outcomes if o.timed_out or o.error is not None]
    return SideStats(
        runs=len(outcomes),
        answered=len(seconds),
        timeouts=sum(o.timed_out for o in outcomes),
        errors=sum(o.error is not None and not o.timed_out for o in outcomes),
        error=next((o.error for o in failed if o.error), None),
        p50=percentile(seconds, 50) if seconds else None,
        p95=percentile(seconds, 95) if seconds else None,
    )


@dataclass(frozen=True, slots=True)
class QueryReport:
    """One query's report: its text, the window (unix seconds) and step (seconds), each
    store's stats (``self_hosted``, ``workspace``) and URL, and the ``parity`` of their first
    answers (None when a store never answered: ``not compared``)."""

    query: str
    start: float
    end: float
    step: float
    self_hosted: SideStats
    workspace: SideStats
    parity: Parity | None
    urls: Mapping[str, str]

    @property
    def speedup(self) -> float | None:
        """Self-hosted p50 / workspace p50 (above 1: the workspace is faster); None unless
        both answered."""
        a, b = self.self_hosted.p50, self.workspace.p50
        return a / b if a is not None and b is not None and b > 0 else None

    @property
    def status(self) -> str:
        """``parity``, ``differences``, ``no data`` (both answered, nothing to compare:
        :attr:`~rwrouter.compare.parity.Parity.no_data`), ``bad query`` (both stores refuse
        it as ``bad_data`` every run) or ``not compared``."""
        if self.parity is None:
            sides = (self.self_hosted, self.workspace)
            if all(not s.answered and (s.error or "").startswith(BAD_QUERY) for s in sides):
                return "bad query"
            return "not compared"
        if self.parity.no_data:
            return "no data"
        return "parity" if self.parity.equal else "differences"


def newest_only(report: QueryReport) -> bool:
    """Whether the only findings of ``report`` are points that differ at the window's newest
    two timestamps (``end - step`` and ``end``: one store not caught up yet, most likely)."""
    p = report.parity
    if p is None or p.first_difference_ms is None or p.missing_in_workspace:
        return False
    if p.missing_in_self_hosted or p.unexpected_in_workspace or p.collisions:
        return False
    return p.first_difference_ms >= round((report.end - report.step) * 1000)


def exit_code(reports: Sequence[QueryReport]) -> int:
    """:data:`EXIT_USAGE` if both stores refuse a query (``bad query``), else
    :data:`EXIT_DIFFERENCES` if any query differs or has no data (a query that finds
    nothing proves nothing: a typo looks like that), else :data:`EXIT_NOT_COMPARED` if any
    was not compared (a store timed out or failed every run) or a run failed, else
    :data:`EXIT_PARITY`."""
    if any(r.status == "bad query" for r in reports):
        return EXIT_USAGE
    if any(r.status in ("differences", "no data") for r in reports):
        return EXIT_DIFFERENCES
    failed = any(s.answered < s.runs for r in reports for s in (r.self_hosted, r.workspace))
    if failed or any(r.status == "not compared" for r in reports):
        return EXIT_NOT_COMPARED
    return EXIT_PARITY


def _utc(unix_s: float) -> str:
    """RFC 3339 in UTC, to the second (a conversion of the value given: no clock read)."""
    return dt.datetime.fromtimestamp(unix_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _side_line(name: str, stats: SideStats) -> str:
    line = f"  {name:<12} {_seconds(stats.p50):>10} {_seconds(stats.p95):>10}"
    line += f"  {stats.answered}/{stats.runs}"
    if stats.timeouts:
        line += f", {stats.timeouts} timed out"
    if stats.errors:
        line += f", {stats.errors} failed"
    return line + (f" ({stats.error})" if stats.error else "")


def _missing(what: str, series: Sequence[Any], limit: int) -> list[str]:
    if not series:
        return []
    by_family: dict[str, int] = {}
    for labels in series:
        name = dict(labels).get("__name__", NO_NAME)
        by_family[name] = by_family.get(name, 0) + 1
    families = ", ".join(f"{name} {n:,}" for name, n in sorted(by_family.items()))
    lines = [f"  {len(series):,} series {what} (by family: {families})"]
    lines += [f"    {format_labels(labels)}" for labels in series[:limit]]
    if len(series) > limit:
        lines.append(f"    ... {len(series) - limit:,} more")
    return lines


def _no_data_line(parity: Parity) -> str:
    if parity.not_migrated:
        return (
            f"  parity: NO DATA: the {len(parity.not_migrated):,} self-hosted series are not "
            "migrated (the configuration does not send them to the workspace) and the "
            "workspace has none: nothing compared; query a migrated family"
        )
    return (
        "  parity: NO DATA: neither store has a series for this query in the range: nothing "
        "compared; check the query (metric name, label values) and --range/--end (--end "
        "defaults to 30 s ago: fresh data is not in the range yet)"
    )


def _parity_lines(parity: Parity | None, tolerance: float, limit: int) -> list[str]:
    if parity is None:
        return ["  parity: not compared (a store gave no answer)"]
    if parity.no_data:
        return [_no_data_line(parity)]
    verdict = "equal" if parity.equal else "DIFFERENT"
    lines = [
        f"  parity: {verdict}: {parity.series_compared:,} series in both stores, "
        f"{parity.points_compared:,} points, tolerance {tolerance:g} (relative)"
    ]
    if parity.not_migrated:
        lines.append(
            f"  {len(parity.not_migrated):,} self-hosted series not migrated (the "
            "configuration does not send them to the workspace): not compared"
        )
    lines += _missing("missing in the workspace", parity.missing_in_workspace, limit)
    lines += _missing("missing in the self-hosted store", parity.missing_in_self_hosted, limit)
    extra = labels_only_in_workspace(parity.missing_in_self_hosted, parity.missing_in_workspace)
    if extra:
        pairs = [f"{n}={v}" for n, v in extra]
        flags = (  # a label that does not print (a newline) is not pasted into a command
            " ".join(f"--external-label {shlex.quote(p)}" for p in pairs)
            if all(p.isprintable() for p in pairs)
            else "--external-label NAME=VALUE for each"
        )
        lines.append(
            f"  hint: the workspace's series carry {format_labels(extra)} that the self-hosted "
            f"ones lack: the sender's external labels? compare with {flags}"
        )
    lines += _missing(
        "in the workspace but not routed there by the rules (unexpected)",
        parity.unexpected_in_workspace,
        limit,
    )
    if parity.collisions:
        merged = sum(len(c.self_hosted) for c in parity.collisions)
        lines.append(
            f"  {len(parity.collisions):,} workspace series each made of several self-hosted "
            f"series ({merged:,} in all: the rules give them one label set, their samples "
            "collide there), e.g.:"
        )
        lines += [f"    {c.text()}" for c in parity.collisions[:limit]]
    if parity.differing_series:
        lines.append(
            f"  {parity.differing_series:,} series with differing points "
            f"({parity.differing_points:,} points), e.g.:"
        )
        lines += [f"    {d.text()}" for d in parity.differences[:limit]]
    return lines


def format_report(
    reports: Sequence[QueryReport], *, tolerance: float, summary: str, limit: int = 5
) -> str:
    """The text report: per query its window, a latency table (p50, p95, runs answered) per
    store, the speed-up, parity and what differs (``limit`` examples each); then ``summary``."""
    lines = []
    for i, r in enumerate(reports, 1):
        lines.append(f"query {i}: {r.query}")
        lines.append(
            f"  range {format_duration(r.end - r.start)} ending at {_utc(r.end)}, "
            f"step {format_duration(r.step)}"
        )
        lines.append(f"  {'store':<12} {'p50':>10} {'p95':>10}  answered")
        lines.append(_side_line("self-hosted", r.self_hosted))
        lines.append(_side_line("workspace", r.workspace))
        if r.speedup is not None:
            lines.append(f"  speed-up: {r.speedup:.2f}x (self-hosted p50 / workspace p50)")
        if r.status == "bad query":
            lines.append("  parity: not compared: both stores refuse the query: fix it")
        else:
            lines += _parity_lines(r.parity, tolerance, limit)
        if newest_only(r):
            lines.append(
                "  hint: every difference is at the window's newest two timestamps: a store may be "
                "behind still (remote write and ingestion take seconds); give an --end "
                "further back"
            )
        lines.append("")
    lines.append(summary)
    return "\n".join(lines)


def summary_line(reports: Sequence[QueryReport], *, when: str) -> str:
    """One line for a migration log: when (``when``, e.g. an RFC 3339 time), queries, the
    median speed-up, each store's median p50, parity counts and the failures."""
    kinds = ("parity", "differences", "no data", "bad query")
    count = {s: sum(r.status == s for r in reports) for s in kinds}
    speedups = [r.speedup for r in reports if r.speedup is not None]
    p50 = {
        side: [s.p50 for r in reports if (s := stats_of(r, side)).p50 is not None] for side in SIDES
    }
    parts = [f"rwrouter compare {when}: {_queries(len(reports))}"]
    if speedups:
        parts.append(
            f"workspace p50 {_seconds(statistics.median(p50['workspace']))} vs self-hosted "
            f"{_seconds(statistics.median(p50['self-hosted']))}, median speed-up "
            f"{statistics.median(speedups):.2f}x"
        )
    parts.append(f"parity {count['parity']}/{len(reports)}, differences {count['differences']}")
    for kind in ("no data", "bad query"):
        if count[kind]:
            parts[-1] += f", {kind} {count[kind]}"
    others = [r for r in reports if r.status != "bad query"]  # those are counted above
    for side in SIDES:
        timeouts = sum(stats_of(r, side).timeouts > 0 for r in others)
        errors = sum(stats_of(r, side).errors > 0 for r in others)
        failures = [
            f"{what} on {_queries(n)}"
            for what, n in (("timed out", timeouts), ("failed", errors))
            if n
        ]
        if failures:
            parts.append(f"{side} {' and '.join(failures)}")
    return "; ".join(parts)


def _queries(n: int) -> str:
    return f"{n} query" if n == 1 else f"{n} queries"


def stats_of(report: QueryReport, side: str) -> SideStats:
    """``report``'s stats of ``side`` (one of :data:`SIDES`)."""
    return report.self_hosted if side == "self-hosted" else report.workspace
