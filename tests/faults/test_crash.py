"""``kill -9`` of rwrouter mid-stream while the workspace is down, then a restart on the same
configuration and storage (README "Guarantees": nothing acknowledged is lost; duplicates only
for blocks not confirmed at the crash).

Duplicates are counted by the taps in front of both stores (deliveries the store acknowledged,
per sample key). Right after the kill the disk queues are read from their committed positions:
that is what the restarted router sends again. A sample may arrive twice only if it is in those
blocks, or if the ledger itself sent it twice (its request got no answer because of the kill,
and the router may have kept the first copy). The kill waits until the self-hosted store has
stored a batch whose answer its tap still holds, so a block in flight at the crash is certain,
not a matter of timing.

It runs once with remote write 1.0 input and once with 2.0 (ids ``rw1``, ``rw2``; every RW 2.0
answer is checked for its Written headers): the router's queues and its sends to the stores
are the same either way, and so are the guarantees.
"""

from __future__ import annotations

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
from tests.faults.queue_files import queue_dir, queue_records
from tests.support.ledger import (
    Ledger,
    SampleKey,
    by_name,
    make_streams,
    prometheus_keys,
    workspace_keys,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

TAG = "crash"
#: Seconds the self-hosted store's answers are held by its tap (a slow way back).
ANSWER_DELAY_S = 0.3


class AcknowledgedSamplesLost(AssertionError):
    """Acknowledged samples never reached a store."""


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=PROTOCOL_IDS)
def test_kill_9_while_workspace_down_then_restart_every_acknowledged_sample_arrives(
    protocol: Protocol,
    workspace: Workspace,
    self_hosted: SelfHosted,
    routers: Routers,
    report: Report,
) -> None:
    tag = protocol.tag(TAG)
    critical_names, bulk_names = f"critical_{tag}_.*", f"bulk_{tag}_.*"
    double = workspace.double
    double.down()
    router = routers.start(workspace=workspace, self_hosted=self_hosted)
    ledger = Ledger(
        router.url,
        streams=make_streams(tag, streams=3, series=40),
        interval_s=0.02,
        message=protocol.message,
    ).start()
    self_hosted.tap.answer_delay_s = ANSWER_DELAY_S
    try:
        wait_for(
            lambda: len(self_hosted.tap.deliveries(bulk_names)) > 3000,
            timeout_s=20,
            what="bulk samples flowing to the self-hosted store",
        )
        wait_for(
            lambda: self_hosted.tap.answers_pending,
            timeout_s=10,
            interval_s=0.01,
            what="a delivery to the self-hosted store not yet confirmed",
        )
        acked_before_kill = len(ledger.acknowledged)
        assert router.kill() == -9
        unconfirmed = _unconfirmed(routers)
        router.restart()
        router.wait_ready(timeout_s=20)
        wait_for(
            lambda: _acknowledged(ledger) > acked_before_kill + 5000,
            timeout_s=20,
            what="traffic acknowledged after the restart",
        )
        double.up()
    finally:
        self_hosted.tap.answer_delay_s = 0.0
        ledger.stop(timeout_s=20)
    assert ledger.written_errors == []
    assert ledger.refused == [] and ledger.unacknowledged == set()
    read_as = received_by_protocol(router)  # since the restart
    assert read_as[protocol.name] > 0 and sum(read_as.values()) == read_as[protocol.name]
    wait_drained(router, timeout_s=30)
    acked = ledger.acknowledged
    critical, bulk = by_name(acked, critical_names), by_name(acked, bulk_names)
    at_workspace = workspace_keys(double, name=critical_names)
    at_self_hosted = prometheus_keys(self_hosted.prom, f'{{__name__=~"{bulk_names}"}}')
    delivered_ws, delivered_sh = (
        workspace.tap.deliveries(critical_names),
        self_hosted.tap.deliveries(bulk_names),
    )
    dup_ws, dup_ws_keys = duplicates(delivered_ws)
    dup_sh, dup_sh_keys = duplicates(delivered_sh)
    lost_sh = bulk - at_self_hosted
    report(
        {
            "protocol": protocol.name,
            "samples_acknowledged": len(acked),
            "samples_lost_workspace": len(critical - at_workspace),
            "samples_lost_self_hosted": len(lost_sh),
            "duplicates_workspace": dup_ws,
            "duplicates_self_hosted": dup_sh,
            "duplicate_keys_resent_by_sender": len((dup_ws_keys | dup_sh_keys) & ledger.ambiguous),
            "unconfirmed_at_crash_workspace": len(unconfirmed["workspace"]),
            "unconfirmed_at_crash_self_hosted": len(unconfirmed["self-hosted"]),
            "sender_requests_without_answer": ledger.statuses().get("none", 0),
            "corrupt_records_after_restart": router.metric_value(
                "rwrouter_queue_corrupt_records_total"
            ),
            "dropped_4xx_self_hosted_after_restart": router.metric_value(
                "rwrouter_samples_dropped_total", destination="self-hosted", reason="4xx"
            ),
        }
    )
    assert ledger.statuses().get("none", 0) > 0, "the kill did not interrupt the stream"
    assert at_workspace == critical  # the workspace's whole queue survived the crash
    assert at_self_hosted <= bulk  # nothing that was not acknowledged
    # Duplicates only for blocks not confirmed at the crash (or sent twice by the sender).
    router_dups = (dup_ws_keys | dup_sh_keys) - ledger.ambiguous
    assert router_dups <= unconfirmed["workspace"] | unconfirmed["self-hosted"]
    if lost_sh:
        raise AcknowledgedSamplesLost(
            f"{len(lost_sh)} acknowledged samples missing in the self-hosted Prometheus, "
            f"{len(lost_sh & unconfirmed['self-hosted'])} of them in blocks not confirmed at "
            f"the crash, {sum(1 for k in lost_sh if delivered_sh[k])} ever delivered"
        )


def _acknowledged(ledger: Ledger) -> int:
    """How many samples were acknowledged; fails at once on an answer that broke the RW 2.0
    Written headers (its samples are never acknowledged: no wait would end)."""
    assert ledger.written_errors == []
    return len(ledger.acknowledged)


def _unconfirmed(routers: Routers) -> dict[str, set[SampleKey]]:
    """Per destination, the keys of the blocks from the committed position on (what the
    restart sends again)."""
    return {
        name: set().union(*(r.keys for r in queue_records(queue_dir(routers.storage, name))))
        for name in ("workspace", "self-hosted")
    }
