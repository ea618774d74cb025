"""An outage of the workspace longer than its head window, with ``sample_age_limit`` set
(docs/configuration.md, "Sample age limit"; Prometheus's ``queue_config.sample_age_limit``)::

    Prometheus 2.42 (scrapes rwrouter's /metrics every 1 s) --RW 1.0--> rwrouter (subprocess)
        --SigV4--> workspace double: 503 for OUTAGE_S, refuses samples older than BOUND_S
                   ("out of bounds", 400), as the managed workspace refuses samples older
                   than its head window

The outage lasts longer than the double's bound: without a limit the backlog would come back
as "out of bounds" refusals, split down to single series. With ``sample_age_limit`` (below the
bound) rwrouter drops the samples that are too old when the workspace recovers, counted as
``too_old``, and sends the rest: the workspace answers no 400 at all, holds no sample scraped
more than the limit before the recovery (but for a second of slack), and holds the recent
samples of the outage's end and those after it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rwrouter.doubles.workspace import Limits
from rwrouter.doubles.workspace_runner import run_in_thread
from tests.faults.harness import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    WORKSPACE_ID,
    OutageWorkspace,
    wait_drained,
    wait_for,
)
from tests.support.prometheus import PrometheusProcess, sender_yaml
from tests.support.router import running_router

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

LIMIT_S = 4.0  # rwrouter's sample_age_limit
BOUND_S = 7.0  # the double's head window: older samples are "out of bounds"
OUTAGE_S = 9.0  # longer than both
SLACK_S = 1.5  # scrape timing, batching and the first attempt after the recovery


def router_yaml(port: int, storage: Path, workspace_url: str) -> str:
    queue = {
        "batch_send_deadline": "500ms",
        "min_backoff": "50ms",
        "max_backoff": "500ms",
        "sample_age_limit": f"{LIMIT_S:g}s",
    }
    config = {
        "server": {"listen_address": f"127.0.0.1:{port}", "shutdown_timeout": "2s"},
        "storage": {"path": str(storage)},
        "remote_write": [
            {
                "name": "workspace",
                "url": workspace_url,
                "sigv4": {"region": REGION, "access_key": ACCESS_KEY, "secret_key": SECRET_KEY},
                "queue_config": queue,
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


@pytest.fixture
def double() -> Iterator[OutageWorkspace]:
    workspace = OutageWorkspace(limits=Limits(out_of_bounds_s=BOUND_S))
    with run_in_thread(workspace):
        yield workspace


def up_timestamps(double: OutageWorkspace) -> list[float]:
    """The timestamps (unix seconds) of ``up{job="rwrouter"}`` the double stored, in order."""
    found = double.find(WORKSPACE_ID, __name__="up", job="rwrouter")
    return sorted(ts / 1000 for series in found for ts in series.samples)


def test_samples_older_than_the_limit_are_dropped_after_an_outage_not_refused(
    double: OutageWorkspace, tmp_path: Path
) -> None:
    def configure(port: int) -> str:
        return router_yaml(port, tmp_path / "storage", double.url(WORKSPACE_ID))

    with running_router(tmp_path, configure) as router:
        sender = sender_yaml(  # scrapes rwrouter's own /metrics
            job="rwrouter",
            targets=[router.url.removeprefix("http://")],
            write_url=f"{router.url}/api/v1/write",
            queue={"batch_send_deadline": "500ms", "max_backoff": "500ms"},
        )
        with PrometheusProcess.start(sender, workdir=tmp_path / "prometheus"):
            wait_for(lambda: up_timestamps(double), timeout_s=15, what="first samples")
            outage_start = time.time()
            double.down(OUTAGE_S)
            wait_for(lambda: not double.is_down or None, timeout_s=OUTAGE_S + 5, what="outage")
            recovered = time.time()

            def caught_up() -> bool:
                stored = up_timestamps(double)
                return bool(stored) and stored[-1] > recovered + 2

            wait_for(caught_up, timeout_s=15, what="samples after the outage")
        wait_drained(router, timeout_s=15, destinations=("workspace",))

        def dropped(reason: str) -> float:
            return router.metric_value(
                "rwrouter_samples_dropped_total", destination="workspace", reason=reason
            )

        too_old = dropped("too_old")
        refused = {r: dropped(r) for r in ("4xx", "retry_budget", "too_large")}
    assert too_old > 0
    assert refused == {"4xx": 0, "retry_budget": 0, "too_large": 0}
    assert double.rejections.get("out_of_bounds", 0) == 0
    assert [r for r in list(double.requests) if r.status == 400] == []
    assert double.fault_window()[2] > 0, "the outage was not seen"

    stored = up_timestamps(double)
    cutoff = recovered - LIMIT_S  # older than this when the workspace took requests again
    lost = [t for t in stored if outage_start + SLACK_S < t < cutoff - SLACK_S]
    assert lost == [], "samples too old at the recovery were sent"
    assert any(t < outage_start for t in stored), "nothing from before the outage"
    assert any(cutoff + SLACK_S < t < recovered for t in stored), "the recent outage samples"
    assert any(t > recovered + 1 for t in stored), "nothing after the outage"
