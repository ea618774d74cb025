"""Pacing end to end: a real Prometheus sends about three times faster than the workspace's
quota, rwrouter paces its workspace destination to that quota (issue 16, item 2; the issue's
5,000 vs 20,000 samples/s scaled down to 500 vs ~1,500 so that it drains within seconds)::

    exporter (2 synthetic GPU nodes, 735 series each, scraped every second: ~1,480 samples/s)
      -> Debian's Prometheus (remote write 1.0)
      -> rwrouter (max_samples_per_second 500, burst_samples 500; every series kept)
      -> workspace double (ingestion rate 500/s, burst 625: at the paced rate; 429 above it)

The double never answers 429 (rwrouter never sends faster than the quota); what it accepted in
any window of its arrival times is at most ``rate x window + burst`` (with 100 ms of loopback
jitter between a send and its arrival); after the sender stops, every sample its TSDB holds
reaches the double (the backlog waited in rwrouter's disk queue) and none was dropped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rwrouter.demo.exporter import ExporterFleet
from rwrouter.doubles.workspace import Key, Limits, WorkspaceDouble
from rwrouter.doubles.workspace_runner import run_in_thread
from tests.support.ledger import prometheus_keys, workspace_keys
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusProcess, sender_yaml
from tests.support.router import running_router

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

RATE, BURST = 500, 500
JITTER_S = 0.1  # a send and its arrival at the double (loopback, a busy 2-core machine)
SENDING_S = 3.0  # how long the sender runs once the double holds its first samples
ACCESS_KEY, SECRET = "AKIDPACINGE2E", "pacing-e2e-secret"
SENDER = "pacing-e2e"


def router_yaml(*, port: int, storage: Path, url: str) -> str:
    queue = {
        "max_samples_per_second": RATE,
        "burst_samples": BURST,
        "batch_send_deadline": "200ms",
        "min_backoff": "50ms",
        "max_backoff": "1s",
        "max_shards": 4,
        "retry_on_http_429": True,
    }
    config = {
        "server": {"listen_address": f"127.0.0.1:{port}", "shutdown_timeout": "2s"},
        "storage": {"path": str(storage)},
        "remote_write": [
            {
                "name": "workspace",
                "url": url,
                "sigv4": {"region": "us-east-1", "access_key": ACCESS_KEY, "secret_key": SECRET},
                "queue_config": queue,
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


@pytest.fixture
def fleet() -> Iterator[ExporterFleet]:
    exporters = ExporterFleet(nodes=2, seed=5, cluster="pacing")
    exporters.start()
    yield exporters
    exporters.stop()


def worst_window(arrivals: list[tuple[float, int]]) -> float:
    """The largest ``accepted - rate x window`` over every window [first, last] of arrivals
    (monotonic seconds, samples+exemplars+metadata counted by the double)."""
    worst = 0.0
    for i, (start, _) in enumerate(arrivals):
        total = 0
        for end, counted in arrivals[i:]:
            total += counted
            worst = max(worst, total - RATE * (end - start))
    return worst


def test_paced_below_the_senders_rate_the_quota_holds_and_all_arrives(
    tmp_path: Path, fleet: ExporterFleet
) -> None:
    double = WorkspaceDouble(
        credentials={ACCESS_KEY: Key(SECRET)},
        limits=Limits(ingestion_rate=RATE, ingestion_burst=BURST * 1.25),
    )
    with run_in_thread(double):  # listening: its URL has its port
        url = double.url("ws-1")

        def configure(port: int) -> str:
            return router_yaml(port=port, storage=tmp_path / "data", url=url)

        with running_router(tmp_path, configure) as router:
            sender_config = sender_yaml(
                job="gpu-node",
                targets=fleet.targets,
                write_url=f"{router.url}/api/v1/write",
                queue={"batch_send_deadline": "500ms", "max_backoff": "1s"},
                external_labels={"sender": SENDER},
            )
            with PrometheusProcess.start(sender_config, workdir=tmp_path / "sender") as sender:
                wait_for(lambda: workspace_keys(double), timeout=20, what="first samples")
                started = time.monotonic()
                wait_for(
                    lambda: time.monotonic() - started > SENDING_S or None,
                    timeout=SENDING_S + 1,
                    what="the sender sending",
                )
                cut_s = time.time()
                wait_for(lambda: time.time() > cut_s + 1.5 or None, timeout=3, what="last scrape")
                held = prometheus_keys(sender, '{__name__=~".+"}', at_s=cut_s, range_s=60)
                label = ("sender", SENDER)  # its external label: added to what it sends
                scraped = {(tuple(sorted((*labels, label))), ts) for labels, ts in held}
                scrape_rate = len(scraped) / (SENDING_S + 2)
            stopped = time.monotonic()
            wait_for(
                lambda: workspace_keys(double) >= scraped or None,
                timeout=40,
                what="every scraped sample at the double",
            )
            drained_s = time.monotonic() - stopped
            waited = router.metric_value(
                "rwrouter_pacing_delay_seconds_sum", destination="workspace"
            )
            dropped = sum(
                m.value for m in router.metrics() if m.name == "rwrouter_samples_dropped_total"
            )
    accepted = [(r.received_at, r.counted) for r in list(double.requests) if r.status == 200]
    print(
        f"\nPACING sender~{scrape_rate:.0f}/s paced {RATE}/s: {len(scraped)} samples, "
        f"{len(accepted)} requests, drained {drained_s:.1f}s after the sender stopped, "
        f"waited {waited:.1f}s, worst window excess {worst_window(accepted):.0f}"
    )
    assert scrape_rate > 2 * RATE  # the sender is faster than the pace
    assert dict(double.rejections) == {}  # no 429: never faster than the quota
    assert worst_window(accepted) <= BURST + RATE * JITTER_S
    assert waited > 0 and dropped == 0
    assert drained_s > 1.0  # the backlog waited in the disk queue, then went out
