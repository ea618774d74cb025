"""An outage of the workspace while traffic flows (README "Guarantees": each destination on its
own; nothing acknowledged is lost).

    ledger (2 streams x 20 series, 40 requests/s) -> rwrouter (subprocess)
        critical_* -> tap -> workspace double (503 for 60 s, then normal service)
        bulk_*     -> tap -> self-hosted Prometheus (fallback)

It runs with remote write 1.0 input (id ``rw1``) and again with 2.0 (``rw2``, every answer
checked for its Written headers), each with a 20 s outage: twenty times the router's longest
backoff (1 s here), so every retry after the first seconds is at the longest backoff, the same
steady state a longer outage holds (the 60 s ``rw1`` ran before cost CI 40 s more and showed
nothing else).

During the outage the self-hosted Prometheus must keep receiving every acknowledged sample
(checked at intervals while the workspace is still down) and the router's answer time must not
grow; after it, the workspace must hold every acknowledged critical sample.

Latency bound: p99 during <= max(2 x p99 before, p99 before + 50 ms). The receive side only
appends to the disk queues: a destination that fails should change nothing there. Doubling
leaves room for the noise of a shared 2-core machine; the 50 ms floor keeps a p99 of a few
milliseconds from failing on one scheduler hiccup, while a receive side that waited on the
failing destination (its retries back off up to 1 s) would still fail it.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.harness import (
    PROTOCOL_IDS,
    PROTOCOLS,
    Protocol,
    Report,
    Routers,
    SelfHosted,
    Workspace,
    duplicates,
    received_by_protocol,
    wait_drained,
    wait_for,
)
from tests.support.ledger import (
    Ledger,
    SampleKey,
    by_name,
    make_streams,
    p99,
    percentile,
    prometheus_keys,
    workspace_keys,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(150)]

TAG = "outage"
OUTAGE_S = {"rw1": 20.0, "rw2": 20.0}  # per protocol (test id)
BEFORE_S = 12.0  # steady traffic measured before the outage
AFTER_S = 3.0  # traffic that goes on after it
CHECK_EVERY_S = 10.0  # self-hosted completeness checks during the outage


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=PROTOCOL_IDS)
def test_workspace_503_window_under_load_self_hosted_unaffected_then_workspace_gets_everything(
    protocol: Protocol,
    workspace: Workspace,
    self_hosted: SelfHosted,
    routers: Routers,
    report: Report,
) -> None:
    tag, outage_s = protocol.tag(TAG), OUTAGE_S[protocol.name]
    critical_names, bulk_names = f"critical_{tag}_.*", f"bulk_{tag}_.*"
    double = workspace.double
    router = routers.start(workspace=workspace, self_hosted=self_hosted)
    ledger = Ledger(
        router.url, streams=make_streams(tag, streams=2, series=20), message=protocol.message
    ).start()
    try:
        wait_for(
            lambda: workspace_keys(double, name=critical_names),
            timeout_s=10,
            what="first samples at the workspace",
        )
        before_start = time.monotonic()
        time.sleep(BEFORE_S)  # a phase of steady traffic, not a wait for a condition
        double.down(outage_s)
        outage_start = time.monotonic()
        outage_end = outage_start + outage_s
        lags = _self_hosted_keeps_up(ledger, self_hosted, bulk_names, until=outage_end - 6)
        time.sleep(max(0.0, outage_end - time.monotonic()) + AFTER_S)
    finally:
        ledger.stop(timeout_s=20)
    assert ledger.written_errors == []
    assert ledger.refused == [] and ledger.unacknowledged == set()
    wait_drained(router, timeout_s=30)
    acked = ledger.acknowledged
    critical, bulk = by_name(acked, critical_names), by_name(acked, bulk_names)
    at_workspace = workspace_keys(double, name=critical_names)
    at_self_hosted = _keys(self_hosted, bulk_names)
    assert at_workspace == critical  # nothing lost, nothing that was not acknowledged
    assert at_self_hosted == bulk

    first_fault, last_fault, faults = double.fault_window()
    assert last_fault - first_fault >= outage_s - 2, "the outage did not last"
    assert double.accepted_during(first_fault, last_fault) == 0, "the outage had holes"
    assert router.metric_value("rwrouter_retries_total", destination="workspace", reason="503") > 0
    assert router.metric_value("rwrouter_received_requests_total", code="503") == 0
    answered = sum(1 for a in ledger.attempts if a.status is not None)
    read_as = received_by_protocol(router)
    assert read_as[protocol.name] >= answered and sum(read_as.values()) == read_as[protocol.name]

    before = ledger.latencies(since=before_start, until=outage_start)
    during = ledger.latencies(since=outage_start, until=outage_end)
    p99_before, p99_during = p99(before), p99(during)
    dup_ws, _ = duplicates(workspace.tap.deliveries(critical_names))
    dup_sh, _ = duplicates(self_hosted.tap.deliveries(bulk_names))
    report(
        {
            "protocol": protocol.name,
            "outage_s": round(last_fault - first_fault, 1),
            "workspace_503_answers": faults,
            "samples_acknowledged": len(acked),
            "samples_lost": len(critical - at_workspace) + len(bulk - at_self_hosted),
            "duplicates_workspace": dup_ws,
            "duplicates_self_hosted": dup_sh,
            "requests_before": len(before),
            "requests_during": len(during),
            "p50_before_ms": round(percentile(before, 50) * 1000, 1),
            "p50_during_ms": round(percentile(during, 50) * 1000, 1),
            "p99_before_ms": round(p99_before * 1000, 1),
            "p99_during_ms": round(p99_during * 1000, 1),
            "self_hosted_max_lag_during_outage_s": round(max(lags), 2),
        }
    )
    # 40 requests/s nominal; at least 25/s in each phase
    assert len(before) > 25 * BEFORE_S and len(during) > 25 * outage_s, (len(before), len(during))
    assert p99_during <= max(2 * p99_before, p99_before + 0.050), (p99_before, p99_during)


def _keys(self_hosted: SelfHosted, names: str) -> set[SampleKey]:
    """The self-hosted store's samples of the series whose names fully match ``names``."""
    return prometheus_keys(self_hosted.prom, f'{{__name__=~"{names}"}}')


def _self_hosted_keeps_up(
    ledger: Ledger, self_hosted: SelfHosted, names: str, *, until: float
) -> list[float]:
    """Every :data:`CHECK_EVERY_S` until ``until``: what was acknowledged for the self-hosted
    store so far (series named ``names``) must be in it within 5 s, while the workspace is
    still down. Returns how long each check took to be met (seconds)."""
    lags = []
    while time.monotonic() < until:
        snapshot = by_name(ledger.acknowledged, names)
        checked_at = time.monotonic()
        what = "acknowledged bulk samples in the self-hosted store, outage ongoing"

        def caught_up(s: set[SampleKey] = snapshot) -> bool:
            return _keys(self_hosted, names) >= s

        wait_for(caught_up, timeout_s=5, interval_s=0.5, what=what)
        lags.append(time.monotonic() - checked_at)
        time.sleep(max(0.0, min(CHECK_EVERY_S - lags[-1], until - time.monotonic())))
    return lags
