"""Pacing end to end: a real Prometheus sends about three times faster than the workspace's
quota, rwrouter paces its workspace destination to that quota (issue 16, item 2; the issue's
5,000 vs 20,000 samples/s scaled down to 500 vs ~1,500 so that it drains within seconds)::

    exporter (2 synthetic GPU nodes, 735 series each, scraped every second: ~1,480 samples/s)
      -> Debian's Prometheus (remote write 1.0)
      -> rwrouter (max_samples_per_second 500, burst_samples 500; every series kept)
      -> workspace double (ingestion rate 500/s; 429 above it)

The pacer's guarantee (``rwrouter.send.pacing``): what it releases in any window of ``t``
seconds is at most ``burst + rate x t``. The test sees requests when they ARRIVE at the double
(noted when its handler starts, before it verifies and stores them), and arrival is not
release: event-loop lag in rwrouter, the scheduler of a loaded 2-core machine and the double's
thread (it shares the test's GIL) delay some requests more than others, and a late one lands in
the window of the next (CI saw 553, then 588, against the old 100 ms allowance of 550). So every
arrival window is allowed :data:`ONE_BATCH` on top: the largest request rwrouter cuts for this
destination (``queue_config.batch_samples``: batches are cut at the burst, 500 here), i.e. one
request arriving up to ``ONE_BATCH / rate`` = 1 s late into the next one's window. Broken
pacing still fails: with the limiter's wait removed the worst window was ~27,000 over the
rate (the sender's ~1,000-1,500 samples/s, and the retries of the double's 429s); with the
rate 30 % too high, ~1,070.

Checked, on every request the double received whatever its answer (time of arrival, samples
+ exemplars + histograms + metadata, as the pacer and the workspace count them; a 429 answered
request counts too, so the double's own limiter cannot hide a sender that is too fast):

- the worst window is at most ``burst + rate x window + ONE_BATCH``;
- the double (rate 500/s, its burst ``burst + ONE_BATCH``: the same allowance, its bucket sees
  arrivals too) never answers 429;
- after the sender stops, every sample its TSDB holds reaches the double (the backlog waited in
  rwrouter's disk queue) and none was dropped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from rwrouter.config import parse_config
from rwrouter.demo.exporter import ExporterFleet
from rwrouter.doubles.workspace import Key, Limits, WorkspaceDouble
from rwrouter.doubles.workspace_runner import run_in_thread
from tests.support.ledger import prometheus_keys, workspace_keys
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusProcess, sender_yaml
from tests.support.router import running_router
from tests.support.series import decode

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

RATE, BURST = 500, 500
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


#: The largest request rwrouter sends the workspace (samples): ``queue_config.batch_samples`` of
#: the router's configuration, ``max_samples_per_send`` or ``burst_samples`` if less. The
#: allowance for arrival jitter (module docstring).
ONE_BATCH = (
    parse_config(router_yaml(port=1, storage=Path("data"), url="http://127.0.0.1:1/"), env={})
    .remote_write[0]
    .queue_config.batch_samples
)


class ArrivalsDouble(WorkspaceDouble):
    """The workspace double, noting every write request as it arrives, whatever its answer:
    ``arrivals``, ``(time.monotonic() when its handler starts, samples + exemplars +
    histograms + metadata entries it carries)`` in order of arrival."""

    def __init__(self, *, credentials: dict[str, Key], limits: Limits) -> None:
        super().__init__(credentials=credentials, limits=limits)
        self.arrivals: list[tuple[float, int]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        if request.method == "POST" and request.path.endswith("/remote_write"):
            write, _ = decode(await request.read())  # the double reads the same bytes again
            items = sum(
                len(s.samples) + len(s.exemplars) + len(s.histograms) for s in write.timeseries
            )
            self.arrivals.append((arrived, items + len(write.metadata)))
        return await super()._handle(request)


@pytest.fixture
def fleet() -> Iterator[ExporterFleet]:
    exporters = ExporterFleet(nodes=2, seed=5, cluster="pacing")
    exporters.start()
    yield exporters
    exporters.stop()


def worst_window(arrivals: list[tuple[float, int]]) -> float:
    """The largest ``arrived - rate x window`` over every window [first, last] of ``arrivals``
    (``(monotonic seconds, samples)`` in time order)."""
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
    double = ArrivalsDouble(
        credentials={ACCESS_KEY: Key(SECRET)},
        limits=Limits(ingestion_rate=RATE, ingestion_burst=BURST + ONE_BATCH),
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
    arrivals = list(double.arrivals)
    excess = worst_window(arrivals)
    print(
        f"\nPACING sender~{scrape_rate:.0f}/s paced {RATE}/s: {len(scraped)} samples, "
        f"{len(arrivals)} requests, drained {drained_s:.1f}s after the sender stopped, "
        f"waited {waited:.1f}s, worst window excess {excess:.0f} "
        f"(bound {BURST} + {ONE_BATCH})"
    )
    assert scrape_rate > 2 * RATE  # the sender is faster than the pace
    assert ONE_BATCH == BURST  # batches are cut at the burst (max_samples_per_send is more)
    assert excess <= BURST + ONE_BATCH, arrivals
    assert dict(double.rejections) == {}  # no 429: never faster than the quota
    assert waited > 0 and dropped == 0
    assert drained_s > 1.0  # the backlog waited in the disk queue, then went out
