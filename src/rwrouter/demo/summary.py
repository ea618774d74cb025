"""What the demo prints: where the series went (the workspace double, the self-hosted
Prometheus) and rwrouter's own counters, as compact readable text.

Gathering is synchronous and bounded (HTTP timeouts of a few seconds); a store that does not
answer shows up as an error line instead of stopping the demo.
"""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

#: PromQL for "series per metric name" (instant query, 5 min lookback).
SERIES_BY_NAME = 'count by (__name__) ({__name__=~".+"})'


@dataclass(frozen=True)
class RouterCounters:
    """rwrouter's ``/metrics``: received samples, sent per destination, dropped per
    (destination, reason)."""

    received: float = 0.0
    sent: Mapping[str, float] = field(default_factory=dict)
    dropped: Mapping[tuple[str, str], float] = field(default_factory=dict)
    error: str = ""
    requests_by_protocol: Mapping[str, float] = field(default_factory=dict)
    """Write requests received per remote write version (``1.0``, ``2.0``)."""
    protocol_in_use: Mapping[str, str] = field(default_factory=dict)
    """Per destination the protobuf message its samples go out in now."""


@dataclass(frozen=True)
class Summary:
    """One picture of the pipeline. ``*_by_name``: series per metric name."""

    elapsed_s: float
    workspace_by_name: Mapping[str, int]
    workspace_samples: int
    verified_signatures: int
    requests: int
    rejections: Mapping[str, int]
    self_hosted_by_name: Mapping[str, int]
    self_hosted_error: str
    router: RouterCounters
    queries: int = 0
    """Requests to the workspace's query API (not write requests: never counted as refused)."""
    query_rejections: Mapping[str, int] = field(default_factory=dict)
    other_requests: int = 0
    """Requests to a path that is neither remote write nor the query API (e.g. a probe of
    ``/api/v1/status/buildinfo``): answered 403 as the workspace does, never counted as
    write requests or refused writes."""


def series_by_name(result: list[dict[str, object]]) -> dict[str, int]:
    """``count by (__name__)`` query result -> {name: series}."""
    counts: dict[str, int] = {}
    for row in result:
        metric, value = row["metric"], row["value"]
        if not isinstance(metric, dict) or not isinstance(value, list):
            raise ValueError(f"not a vector query result row: {row!r}")
        counts[str(metric.get("__name__", ""))] = int(float(value[1]))
    return counts


def names_of(series_keys: Iterable[tuple[tuple[str, str], ...]]) -> dict[str, int]:
    """Label-set keys ((name, value) pairs) -> {metric name: series}."""
    counter: Counter[str] = Counter()
    for key in series_keys:
        counter[dict(key).get("__name__", "")] += 1
    return dict(counter)


def router_counters(metrics_url: str, *, timeout_s: float = 3.0) -> RouterCounters:
    """Read rwrouter's ``/metrics``; an unreachable router gives ``error``."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout_s) as response:
            text = response.read().decode()
    except OSError as exc:
        return RouterCounters(error=str(exc))
    received = 0.0
    sent: dict[str, float] = {}
    dropped: dict[tuple[str, str], float] = {}
    protocols: dict[str, float] = {}
    in_use: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "rwrouter_received_samples_total":
                received += sample.value
            elif sample.name == "rwrouter_sent_samples_total":
                sent[labels["destination"]] = sample.value
            elif sample.name == "rwrouter_samples_dropped_total" and sample.value:
                dropped[(labels["destination"], labels["reason"])] = sample.value
            elif sample.name == "rwrouter_received_protocol_requests_total":
                protocols[labels["protocol"]] = sample.value
            elif sample.name == "rwrouter_destination_protocol" and sample.value == 1:
                in_use[labels["destination"]] = labels["protobuf_message"]
    return RouterCounters(
        received=received,
        sent=sent,
        dropped=dropped,
        requests_by_protocol=protocols,
        protocol_in_use=in_use,
    )


def format_summary(summary: Summary, *, top: int = 10) -> str:
    """Readable multi-line text of ``summary``."""
    rejected = ", ".join(f"{r}={n}" for r, n in sorted(summary.rejections.items())) or "none"
    lines = [
        f"── rwrouter demo, t={summary.elapsed_s:.0f}s ──",
        f"workspace double: {sum(summary.workspace_by_name.values()):,} series, "
        f"{summary.workspace_samples:,} samples, {summary.requests:,} requests, "
        f"{summary.verified_signatures:,} signatures verified, rejected: {rejected}"
        + _queries(summary),
        *_by_name(summary.workspace_by_name, top),
    ]
    if summary.self_hosted_error:
        lines.append(f"self-hosted Prometheus: query failed: {summary.self_hosted_error}")
    else:
        total = sum(summary.self_hosted_by_name.values())
        lines.append(
            f"self-hosted Prometheus: {total:,} series in "
            f"{len(summary.self_hosted_by_name)} metric names (top {top}):"
        )
        lines += _by_name(summary.self_hosted_by_name, top)
    lines.append(_router_line(summary.router))
    return "\n".join(lines)


def _queries(summary: Summary) -> str:
    """``; queries: N (refused: ...)`` and ``; other requests: N (...)``, each when any."""
    text = ""
    if summary.queries:
        refused = ", ".join(f"{r}={n}" for r, n in sorted(summary.query_rejections.items()))
        text += f"; queries: {summary.queries:,}" + (f" (refused: {refused})" if refused else "")
    if summary.other_requests:
        text += (
            f"; other requests: {summary.other_requests:,} (neither remote write nor the "
            "query API: 403)"
        )
    return text


def _by_name(counts: Mapping[str, int], top: int) -> list[str]:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    width = max((len(name) for name, _ in ranked), default=0)
    rows = [f"    {name:<{width}} {count:>6,}" for name, count in ranked]
    if len(counts) > top:
        rest = sum(counts.values()) - sum(count for _, count in ranked)
        rows.append(f"    {'... ' + str(len(counts) - top) + ' more names':<{width}} {rest:>6,}")
    return rows


def _router_line(router: RouterCounters) -> str:
    if router.error:
        return f"rwrouter: /metrics unreachable: {router.error}"
    sent = ", ".join(f"{d}={n:,.0f}" for d, n in sorted(router.sent.items())) or "none"
    # reason "relabel" is routing, not loss: a destination's rules kept those series out.
    kept_out = ", ".join(
        f"{d}={n:,.0f}" for (d, r), n in sorted(router.dropped.items()) if r == "relabel"
    )
    lost = ", ".join(
        f"{d}/{r}={n:,.0f}" for (d, r), n in sorted(router.dropped.items()) if r != "relabel"
    )
    line = f"rwrouter: received {router.received:,.0f} samples; sent {sent}"
    line += f"; kept out by rules {kept_out}" if kept_out else ""
    line += f"; not delivered: {lost or 'none'}"
    received = ", ".join(
        f"{v}: {n:,.0f}" for v, n in sorted(router.requests_by_protocol.items()) if n
    )
    in_use = sorted(router.protocol_in_use.items())
    out = ", ".join(f"{d}: {_VERSIONS.get(m, m)}" for d, m in in_use)
    if received or out:
        line += f"\nrwrouter: write requests received by remote write version ({received or '-'})"
        line += f"; sending {out}" if out else ""
    return line


_VERSIONS = {
    "prometheus.WriteRequest": "remote write 1.0",
    "io.prometheus.write.v2.Request": "remote write 2.0",
}
