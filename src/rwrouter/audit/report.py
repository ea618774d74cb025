"""The audit report (pure): what ``GET /-/audit``, ``rwrouter audit`` and the status page show.

Per audited destination: its metric names ranked by active series (then samples per second),
its total active series against the workspace limit (``audit.series_limit``), and the
projected monthly samples and ingestion cost (:mod:`rwrouter.audit.cost`). A name's cost is
its share of the destination's samples times the destination's cost (tiers make the price of
one more sample depend on all the others).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rwrouter.audit.active import NameCount, Snapshot
from rwrouter.audit.cost import SECONDS_PER_MONTH, monthly_cost, monthly_samples
from rwrouter.config.model import AuditConfig

__all__ = ["SORT_KEYS", "build_report", "format_table", "rank", "reranked"]

SORT_KEYS = ("series", "samples")
Report = dict[str, Any]  # JSON: see build_report


def rank(metrics: Sequence[Mapping[str, Any]], by: str = "series") -> list[Mapping[str, Any]]:
    """Metric entries (``name``, ``active_series``, ``samples_per_second``) largest first:
    ``by`` ``series`` (then samples/s) or ``samples`` (then series); ties by name. Raises
    ValueError for another ``by``."""
    if by not in SORT_KEYS:
        raise ValueError(f"sort by one of {', '.join(SORT_KEYS)}, not {by!r}")
    first, second = (
        ("active_series", "samples_per_second")
        if by == "series"
        else ("samples_per_second", "active_series")
    )
    return sorted(metrics, key=lambda m: (-m[first], -m[second], m["name"]))


def reranked(report: Mapping[str, Any], by: str, top: int) -> Report:
    """A copy of ``report`` whose destinations list their ``top`` metric names (0: all)
    ranked by ``by`` (:func:`rank`) among those the report lists."""
    destinations = []
    for dest in report["destinations"]:
        metrics = rank(dest["metrics"], by)
        destinations.append({**dest, "metrics": metrics[:top] if top else metrics})
    return {**report, "destinations": destinations}


def build_report(
    snapshots: Mapping[str, Snapshot],
    *,
    audit: AuditConfig,
    shadow: Mapping[str, bool],
    top: int | None = None,
    by: str = "series",
    workers: int = 1,
    workers_expected: int | None = None,
) -> Report:
    """The report of each destination's :class:`Snapshot` (in the mapping's order): a dict
    that ``json.dumps`` accepts (no NaN). ``shadow``: per destination name; ``top``: metric
    names listed per destination (None: all; ``metric_names`` always counts them all): only
    those are built (a partial sort: a large destination costs its names once, not a dict
    each); ``by``: their order (:func:`rank`'s; ValueError for another).

    Shape: ``window_seconds``, ``series_limit``, ``currency``, ``price_tiers``
    (``up_to_samples`` or null, ``per_million``), ``seconds_per_month``, ``workers`` (whose
    counts are in it) and ``workers_expected`` (``rwrouter run --workers``: how many run), and
    ``destinations``: per destination ``name``, ``shadow``, ``observed_seconds``,
    ``complete`` (observed for a whole window), ``capped`` (counts are lower bounds),
    ``active_series``, ``series_limit_ratio``, ``samples_per_second``, ``monthly_samples``,
    ``monthly_cost``, ``metric_names`` and ``metrics`` (``name``, ``active_series``,
    ``samples_per_second``, ``monthly_samples``, ``monthly_cost``; ranked by ``by``).
    """
    if by not in SORT_KEYS:
        raise ValueError(f"sort by one of {', '.join(SORT_KEYS)}, not {by!r}")
    destinations = [
        _destination(name, snap, audit=audit, shadow=bool(shadow.get(name, False)), top=top, by=by)
        for name, snap in snapshots.items()
    ]
    return {
        "window_seconds": audit.window,
        "series_limit": audit.series_limit,
        "currency": audit.currency,
        "price_tiers": [
            {"up_to_samples": t.up_to_samples, "per_million": t.per_million}
            for t in audit.price_tiers
        ],
        "seconds_per_month": SECONDS_PER_MONTH,
        "workers": workers,
        "workers_expected": workers if workers_expected is None else workers_expected,
        "destinations": destinations,
    }


def _destination(
    name: str, snap: Snapshot, *, audit: AuditConfig, shadow: bool, top: int | None, by: str
) -> dict[str, Any]:
    """One destination's entry of :func:`build_report`."""
    rate = snap.samples_per_second
    samples = monthly_samples(rate)
    cost = monthly_cost(samples, audit.price_tiers)
    metrics = [
        {
            "name": metric,
            "active_series": count.active_series,
            "samples_per_second": _finite(count.samples_per_second),
            "monthly_samples": _finite(monthly_samples(count.samples_per_second)),
            "monthly_cost": _finite(cost * count.samples_per_second / rate if rate else 0.0),
        }
        for metric, count in _ranked(snap.names, by=by, top=top)
    ]
    return {
        "name": name,
        "shadow": shadow,
        "observed_seconds": _finite(snap.observed),
        "complete": snap.observed >= audit.window,
        "capped": snap.capped,
        "active_series": snap.active_series,
        "series_limit_ratio": snap.active_series / audit.series_limit,
        "samples_per_second": _finite(rate),
        "monthly_samples": _finite(samples),
        "monthly_cost": _finite(cost),
        "metric_names": len(snap.names),
        "metrics": metrics,
    }


def _ranked(
    names: Mapping[str, NameCount], *, by: str, top: int | None
) -> list[tuple[str, NameCount]]:
    """The ``top`` names (None: all) of ``names`` in :func:`rank`'s order ``by``."""

    def key(item: tuple[str, NameCount]) -> tuple[float, float, str]:
        series, rate = item[1].active_series, _finite(item[1].samples_per_second)
        return (-series, -rate, item[0]) if by == "series" else (-rate, -series, item[0])

    if top is None or top >= len(names):
        return sorted(names.items(), key=key)
    return heapq.nsmallest(top, names.items(), key=key)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def format_table(report: Mapping[str, Any], *, sort: str = "series", top: int = 20) -> str:
    """``report`` (:func:`build_report`'s shape, e.g. read back from JSON) as text: per
    destination a summary and its ``top`` metric names sorted by ``sort`` (:data:`SORT_KEYS`;
    0: all listed). Ends with a newline. Raises ValueError for an unknown ``sort``."""
    lines = _workers_note(report)
    if not report["destinations"]:
        lines.append(
            "no audited destination: set `shadow: true` or `audit: true` on a remote_write entry"
        )
    for dest in report["destinations"]:
        lines += _summary_lines(dest, report)
        lines += _metric_lines(dest, currency=report["currency"], sort=sort, top=top)
        lines.append("")
    lines.append(_price_line(report))
    return "\n".join(lines) + "\n"


def _workers_note(report: Mapping[str, Any]) -> list[str]:
    """The lines that open the table when the counts are not one worker's alone: how many
    workers they were counted over, or that some did not answer (a blank line after it)."""
    workers, expected = report.get("workers", 1), report.get("workers_expected", 1)
    if expected > workers:
        return [f"only {workers} of {expected} workers answered: the counts are low", ""]
    if workers > 1:
        return [f"counted over {workers} workers (a series seen by several counts once)", ""]
    return []


def _summary_lines(dest: Mapping[str, Any], report: Mapping[str, Any]) -> list[str]:
    """One destination's summary: how long it was observed against the window, its active
    series against the limit, its samples per second and its projected month."""
    currency = report["currency"]
    role = " (shadow: counted, not sent)" if dest["shadow"] else ""
    seen = _duration(dest["observed_seconds"])
    window = _duration(report["window_seconds"])
    state = (
        f"observed {seen} (a whole {window} window)"
        if dest["complete"]
        else f"observed {seen} of the {window} window: series that come less often may be missing"
    )
    bound = "at least " if dest["capped"] else ""
    lines = [
        f"destination {dest['name']}{role}: {state}",
        f"  active series     {bound}{dest['active_series']:,}"
        f" ({_percent(dest['series_limit_ratio'])} of the {report['series_limit']:,} limit)",
        f"  samples/s         {dest['samples_per_second']:,.1f}",
        f"  per month         {_count(dest['monthly_samples'])} samples,"
        f" {currency} {dest['monthly_cost']:,.2f} projected",
    ]
    if dest["capped"]:
        lines.append("  (audit.max_series reached: counts are lower bounds)")
    return lines


def _metric_lines(dest: Mapping[str, Any], *, currency: str, sort: str, top: int) -> list[str]:
    """One destination's metric names table: a header, its ``top`` names (0: all listed)
    sorted by ``sort`` (:func:`rank`), and how many names it does not show."""
    metrics = rank(dest["metrics"], sort)
    shown = metrics if top == 0 else metrics[:top]
    names = [_printable(m["name"]) for m in shown]
    width = max([len("METRIC NAME"), *(len(name) for name in names)])
    lines = [
        f"  {'METRIC NAME':<{width}}  {'ACTIVE SERIES':>13}  {'SAMPLES/S':>12}"
        f"  {currency + '/MONTH':>12}"
    ]
    for m, name in zip(shown, names, strict=True):
        series, cost = m["active_series"], m["monthly_cost"]
        lines.append(
            f"  {name:<{width}}  {series:>13,}  {m['samples_per_second']:>12,.1f}  {cost:>12,.2f}"
        )
    hidden = dest["metric_names"] - len(shown)
    if hidden > 0:
        lines.append(f"  ... and {hidden:,} more metric names")
    return lines


def _price_line(report: Mapping[str, Any]) -> str:
    """The price tiers the costs were projected with, in one line."""
    tiers = ", ".join(
        f"{t['per_million']:g} per million"
        + (f" up to {_count(t['up_to_samples'])}" if t["up_to_samples"] is not None else " beyond")
        for t in report["price_tiers"]
    )
    return f"price ({report['currency']}, samples a month): {tiers}; a month is 730 h"


NAME_WIDTH = 80  # characters of a metric name the table shows


def _printable(name: str) -> str:
    """A metric name for a terminal: control characters escaped (``\\x1b``), at most
    :data:`NAME_WIDTH` characters (the JSON has it whole)."""
    if not name:
        return "(no name)"
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
    if len(text) > NAME_WIDTH:
        text = f"{text[: NAME_WIDTH - 20]}... ({len(name):,} chars)"
    return text


def _percent(ratio: float) -> str:
    """0.0839 -> 8.39%; below 0.001 % -> <0.001% (never an exponent)."""
    percent = ratio * 100
    if 0 < percent < 0.001:
        return "<0.001%"
    return f"{percent:.3g}%" if percent < 100 else f"{percent:,.0f}%"


def _count(n: float) -> str:
    """1234567 -> 1.23 M; 2e9 -> 2 B (the unit AWS pricing pages use); 999999 -> 1 M (3
    significant digits first, then the unit: never an exponent)."""
    rounded = float(f"{n:.3g}")
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(rounded) >= size:
            return f"{rounded / size:,.4g} {unit}"
    return f"{rounded:,.0f}"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
