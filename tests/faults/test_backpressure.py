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
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
import yaml

from rwrouter.demo.exporter import ExporterFleet
from rwrouter.testing.router import RouterProcess
from tests.faults.harness import Report, Routers, SelfHosted, Workspace, wait_for
from tests.support.ledger import SampleKey, by_name, prometheus_keys, workspace_keys
from tests.support.prometheus import PrometheusProcess

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

SENDER_LABEL = ("sender", "fault-backpressure")  # the sender's external label
KEEP = "DCGM_.*"
#: Small enough to fill within seconds (200 DCGM samples/s), larger than any one request's
#: share (the sender sends at most 200 samples a request), or that request would get 413.
WORKSPACE_QUEUE = {"max_disk_bytes": "64KiB", "on_full": "backpressure"}
HOLD_503_S = 5.0  # how long the router keeps answering 503 before the workspace comes back


def sender_config(*, target: str, router_url: str) -> str:
    queue = {"max_samples_per_send": 200, "batch_send_deadline": "1s", "min_backoff": "50ms",
             "max_backoff": "1s"}  # fmt: skip
    config = {
        "global": {
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "external_labels": dict([SENDER_LABEL]),
        },
        "scrape_configs": [{"job_name": "gpu-node", "static_configs": [{"targets": [target]}]}],
        "remote_write": [{"url": f"{router_url}/api/v1/write", "queue_config": queue}],
    }
    return yaml.safe_dump(config, sort_keys=False)


@pytest.fixture
def fleet() -> Iterator[ExporterFleet]:
    exporters = ExporterFleet(nodes=1, seed=3, cluster="fault-backpressure")
    exporters.start()
    yield exporters
    exporters.stop()


def test_queue_full_backpressure_real_prometheus_sender_loses_nothing(
    workspace: Workspace, self_hosted: SelfHosted, routers: Routers, fleet: ExporterFleet,
    report: Report,
) -> None:  # fmt: skip
    double = workspace.double
    router = routers.start(workspace=workspace, self_hosted=self_hosted, keep=KEEP,
                           workspace_queue=WORKSPACE_QUEUE)  # fmt: skip
    started_s = time.time()
    config = sender_config(target=fleet.targets[0], router_url=router.url)
    with PrometheusProcess.start(config) as sender:
        wait_for(lambda: workspace_keys(double, name=KEEP), timeout_s=20,
                 what="DCGM samples at the workspace")  # fmt: skip
        double.down()
        down_at = time.monotonic()
        wait_for(lambda: _refused(router), timeout_s=40, what="rwrouter answering 503")
        full_at = time.monotonic()
        wait_for(lambda: time.monotonic() - full_at > HOLD_503_S or None,
                 timeout_s=HOLD_503_S + 1, what="a few seconds of 503 answers")  # fmt: skip
        refused_requests = _refused(router)
        double.up()
        up_at = time.monotonic()
        cut_s = time.time() + 2  # the window ends two scrapes after the recovery
        wait_for(lambda: time.time() > cut_s or None, timeout_s=5, what="the window's end")
        range_s = math.ceil(cut_s - started_s) + 5
        scraped = _sender_keys(sender, at_s=cut_s, range_s=range_s)

        def stored() -> tuple[set[SampleKey], set[SampleKey]] | None:
            ws = {k for k in workspace_keys(double, name=KEEP) if k[1] <= cut_s * 1000}
            sh = prometheus_keys(self_hosted.prom, f'{{{SENDER_LABEL[0]}="{SENDER_LABEL[1]}"}}',
                                 at_s=cut_s, range_s=range_s)  # fmt: skip
            return (ws, sh) if ws | sh >= scraped else None

        at_workspace, at_self_hosted = wait_for(
            stored, timeout_s=45, interval_s=1,
            what="every sample of the sender's TSDB in the stores")  # fmt: skip
        caught_up_at = time.monotonic()
        failed = sender.metric_value("prometheus_remote_storage_samples_failed_total")
        retried = sender.metric_value("prometheus_remote_storage_samples_retried_total")
    critical = by_name(scraped, KEEP)
    report({
        "sender_samples_in_window": len(scraped),
        "samples_lost": len(scraped - (at_workspace | at_self_hosted)),
        "rwrouter_503_answers": router.metric_value("rwrouter_received_requests_total", code="503"),
        "rwrouter_refused_queue_full": refused_requests,
        "queue_full_after_s": round(full_at - down_at, 1),
        "workspace_outage_s": round(up_at - down_at, 1),
        "caught_up_after_recovery_s": round(caught_up_at - up_at, 1),
        "sender_samples_retried": retried,
        "sender_samples_failed": failed,
    })  # fmt: skip
    assert at_workspace == critical  # exactly the routed share: nothing lost, nothing extra
    assert at_self_hosted == scraped - critical
    assert router.metric_value("rwrouter_received_requests_total", code="503") > 0
    assert failed == 0 and retried > 0


def _refused(router: RouterProcess) -> float:
    return router.metric_value("rwrouter_refused_requests_total", reason="queue_full")


def _sender_keys(sender: PrometheusProcess, *, at_s: float, range_s: int) -> set[SampleKey]:
    """The sender's raw samples, with its external label added (as remote write sends them)."""
    keys = prometheus_keys(sender, '{__name__=~".+"}', at_s=at_s, range_s=range_s)
    return {(tuple(sorted((*labels, SENDER_LABEL))), ts) for labels, ts in keys}
