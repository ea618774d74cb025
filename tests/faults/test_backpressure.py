"""A full disk queue with ``on_full: backpressure``, a real Prometheus as the sender (README
"Guarantees": nothing acknowledged is lost while the queue has room; when it has none the sender
is told 503 and keeps the data in its WAL).

    exporter (1 synthetic GPU node, 735 series, scraped every second)
      -> sender Prometheus (remote_write, its own retries)
      -> rwrouter: DCGM_* -> workspace double (down, then back; queue bounded at 64 KiB)
                   the rest -> self-hosted Prometheus (fallback)

While the workspace is down its queue fills and rwrouter answers 503 to every request (each
carries DCGM series): nothing of them is kept anywhere. When the workspace is back, the sender
catches up from its WAL. End to end, every sample the sender's TSDB holds in the window must be
in exactly the store its name routes it to (compared through both Prometheus query APIs and the
double's inspection API; staleness markers, which queries never return, are left out).

Two senders (ids): ``rw1``, Debian's Prometheus 2 sending remote write 1.0; ``rw2``, Prometheus 3
(the peers cache's) sending 2.0 (``protobuf_message: io.prometheus.write.v2.Request``). Prometheus
3 counts a 2xx without the Written headers, or with fewer written than it sent, as failed
samples (queue_manager.go): its failed counter staying 0 also checks rwrouter's headers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
import yaml

from rwrouter.demo.exporter import ExporterFleet
from rwrouter.doubles.router import RouterProcess
from rwrouter.protocol import RW1_MESSAGE
from tests.faults.harness import (
    PROTOCOL_IDS,
    PROTOCOLS,
    Protocol,
    Report,
    Routers,
    SelfHosted,
    Workspace,
    received_by_protocol,
    wait_for,
)
from tests.support.ledger import SampleKey, by_name, prometheus_keys, workspace_keys
from tests.support.peers import peer_binary
from tests.support.prometheus import PrometheusProcess

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

#: The sender's external label ``sender``, per protocol (:meth:`Protocol.tag`): each run's
#: samples apart in the self-hosted Prometheus, which the package's tests share.
SENDER = "fault-backpressure"
KEEP = "DCGM_.*"
#: Small enough to fill within seconds (200 DCGM samples/s), larger than any one request's
#: share (the sender sends at most 200 samples a request), or that request would get 413.
WORKSPACE_QUEUE = {"max_disk_bytes": "64KiB", "on_full": "backpressure"}
HOLD_503_S = 5.0  # how long the router keeps answering 503 before the workspace comes back
SCRAPE_TIMEOUT_S = 1.0


def sender_config(*, target: str, router_url: str, message: str, sender: str) -> str:
    """The sender's configuration: scrape ``target`` every second, external label
    ``sender="<sender>"``, remote-write ``message`` (RW 1.0 leaves ``protobuf_message`` out:
    Prometheus 2 does not know the key)."""
    queue = {
        "max_samples_per_send": 200,
        "batch_send_deadline": "1s",
        "min_backoff": "50ms",
        "max_backoff": "1s",
    }
    remote: dict[str, object] = {"url": f"{router_url}/api/v1/write", "queue_config": queue}
    if message != RW1_MESSAGE:
        remote["protobuf_message"] = message
    config = {
        "global": {
            "scrape_interval": "1s",
            "scrape_timeout": f"{SCRAPE_TIMEOUT_S:g}s",
            "external_labels": {"sender": sender},
        },
        "scrape_configs": [{"job_name": "gpu-node", "static_configs": [{"targets": [target]}]}],
        "remote_write": [remote],
    }
    return yaml.safe_dump(config, sort_keys=False)


@pytest.fixture
def fleet() -> Iterator[ExporterFleet]:
    exporters = ExporterFleet(nodes=1, seed=3, cluster="fault-backpressure")
    exporters.start()
    yield exporters
    exporters.stop()


def start_sender(protocol: Protocol, config: str) -> PrometheusProcess:
    """Debian's Prometheus 2 for RW 1.0, the peers cache's Prometheus 3 for the others."""
    if protocol.message == RW1_MESSAGE:
        return PrometheusProcess.start(config)
    return PrometheusProcess.start(config, binary=peer_binary("prometheus"))


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=PROTOCOL_IDS)
def test_queue_full_backpressure_real_prometheus_sender_loses_nothing(
    protocol: Protocol,
    workspace: Workspace,
    self_hosted: SelfHosted,
    routers: Routers,
    fleet: ExporterFleet,
    report: Report,
) -> None:
    double, sender_label = workspace.double, ("sender", protocol.tag(SENDER))
    router = routers.start(
        workspace=workspace, self_hosted=self_hosted, keep=KEEP, workspace_queue=WORKSPACE_QUEUE
    )
    started_s = time.time()
    config = sender_config(
        target=fleet.targets[0],
        router_url=router.url,
        message=protocol.message,
        sender=sender_label[1],
    )
    with start_sender(protocol, config) as sender:
        wait_for(
            lambda: workspace_keys(double, name=KEEP),
            timeout_s=20,
            what="DCGM samples at the workspace",
        )
        double.down()
        down_at = time.monotonic()
        wait_for(lambda: _refused(router), timeout_s=40, what="rwrouter answering 503")
        full_at = time.monotonic()
        wait_for(
            lambda: time.monotonic() - full_at > HOLD_503_S or None,
            timeout_s=HOLD_503_S + 1,
            what="a few seconds of 503 answers",
        )
        refused_requests = _refused(router)
        double.up()
        up_at = time.monotonic()
        cut_s = time.time() + 2  # the window ends two scrapes after the recovery
        # A scrape is stamped when it starts and appended when it ends: read the sender's
        # TSDB once every scrape stamped up to the cut has ended (at most the scrape timeout).
        settled_s = cut_s + SCRAPE_TIMEOUT_S + 0.5
        wait_for(
            lambda: time.time() > settled_s or None,
            timeout_s=8,
            what="the window's end and its last scrape",
        )
        range_s = math.ceil(cut_s - started_s) + 5
        scraped = _sender_keys(sender, sender_label, at_s=cut_s, range_s=range_s)

        def stored() -> tuple[set[SampleKey], set[SampleKey]] | None:
            ws = {k for k in workspace_keys(double, name=KEEP) if k[1] <= cut_s * 1000}
            sh = prometheus_keys(
                self_hosted.prom, f'{{sender="{sender_label[1]}"}}', at_s=cut_s, range_s=range_s
            )
            return (ws, sh) if ws | sh >= scraped else None

        at_workspace, at_self_hosted = wait_for(
            stored,
            timeout_s=45,
            interval_s=1,
            what="every sample of the sender's TSDB in the stores",
        )
        caught_up_at = time.monotonic()
        failed = sender.metric_value("prometheus_remote_storage_samples_failed_total")
        retried = sender.metric_value("prometheus_remote_storage_samples_retried_total")
        version = next(
            m.labels["version"] for m in sender.metrics() if m.name == "prometheus_build_info"
        )
    critical = by_name(scraped, KEEP)
    report(
        {
            "protocol": protocol.name,
            "sender": f"Prometheus {version}",
            "sender_samples_in_window": len(scraped),
            "samples_lost": len(scraped - (at_workspace | at_self_hosted)),
            "rwrouter_503_answers": router.metric_value(
                "rwrouter_received_requests_total", code="503"
            ),
            "rwrouter_refused_queue_full": refused_requests,
            "queue_full_after_s": round(full_at - down_at, 1),
            "workspace_outage_s": round(up_at - down_at, 1),
            "caught_up_after_recovery_s": round(caught_up_at - up_at, 1),
            "sender_samples_retried": retried,
            "sender_samples_failed": failed,
        }
    )
    assert at_workspace == critical  # exactly the routed share: nothing lost, nothing extra
    assert at_self_hosted == scraped - critical
    assert router.metric_value("rwrouter_received_requests_total", code="503") > 0
    assert failed == 0 and retried > 0
    read_as = received_by_protocol(router)
    assert read_as[protocol.name] > 0 and sum(read_as.values()) == read_as[protocol.name]


def _refused(router: RouterProcess) -> float:
    return router.metric_value("rwrouter_refused_requests_total", reason="queue_full")


def _sender_keys(
    sender: PrometheusProcess, label: tuple[str, str], *, at_s: float, range_s: int
) -> set[SampleKey]:
    """The sender's raw samples, with its external label added (as remote write sends them)."""
    keys = prometheus_keys(sender, '{__name__=~".+"}', at_s=at_s, range_s=range_s)
    return {(tuple(sorted((*labels, label))), ts) for labels, ts in keys}
