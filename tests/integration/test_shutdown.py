"""Shutdown with a short drain timeout while a destination is down: the stop returns at once
(nothing is sent past the timeout) and what was not sent stays on disk for the next start.

Regression: with ``drain_timeout`` 0 (``server.shutdown_timeout: 0s``) or a tiny one, a sender
waiting for its batch deadline lost the stop's cancellation (``asyncio.wait_for`` before
Python 3.12 swallows a cancellation arriving as the awaited event is set, CPython #86296),
went on sending and retried the unreachable destination for ever: the stop never returned.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from rwrouter.doubles.prometheus import free_port
from rwrouter.doubles.router import RouterProcess
from tests.integration.conftest import Start, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import HEADERS, Series, build_body

pytestmark = pytest.mark.timeout(30)

CONFIG = """
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: {shutdown_timeout}}}
storage: {{path: "{storage}"}}
remote_write:
  - name: down
    url: {url}
    queue_config: {{batch_send_deadline: {deadline}, min_backoff: 10ms, max_backoff: 50ms}}
"""

STOP_BOUND = 5.0  # seconds a stop with a drain timeout under 1 s may take at most (loaded CI)
SERIES = 5


def body(step: int) -> bytes:
    return build_body(
        [
            Series((("__name__", "m"), ("i", str(i))), ((1_000 + step, float(step)),))
            for i in range(SERIES)
        ]
    )


def down_url(kind: str, capture: CaptureServer) -> str:
    """A destination that never takes a batch: a closed port, or one answering 503."""
    if kind == "closed_port":
        return f"http://127.0.0.1:{free_port()}/write"
    capture.script("/down", [503] * 100_000)
    return capture.url("/down")


def write_config(
    path: Path, *, url: str, deadline: str = "5s", shutdown_timeout: str = "1s", port: int = 0
) -> None:
    path.write_text(
        CONFIG.format(
            port=port,
            shutdown_timeout=shutdown_timeout,
            url=url,
            storage=path.parent / "data",
            deadline=deadline,
        )
    )


@pytest.mark.parametrize(
    ("destination", "deadline", "drain_timeout"),
    [
        # The sender waits for its batch deadline (5 s) when the stop begins.
        ("closed_port", "5s", 0.0),
        ("closed_port", "5s", 0.0001),
        ("closed_port", "5s", 0.01),
        ("answers_503", "5s", 0.0),
        ("answers_503", "5s", 0.0001),
        # The sender is retrying its batch when the stop begins.
        ("closed_port", "5ms", 0.0),
        ("closed_port", "5ms", 0.01),
        ("answers_503", "5ms", 0.0),
    ],
    ids=[
        "closed_port_waiting_for_batch_deadline_timeout_0",
        "closed_port_waiting_for_batch_deadline_timeout_100us",
        "closed_port_waiting_for_batch_deadline_timeout_10ms",
        "503_waiting_for_batch_deadline_timeout_0",
        "503_waiting_for_batch_deadline_timeout_100us",
        "closed_port_retrying_timeout_0",
        "closed_port_retrying_timeout_10ms",
        "503_retrying_timeout_0",
    ],
)
async def test_stop_with_a_short_drain_timeout_returns_and_keeps_unsent_data_on_disk(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    destination: str,
    deadline: str,
    drain_timeout: float,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    write_config(config, url=down_url(destination, fresh_capture), deadline=deadline)
    router = await start_from_file(config)
    assert router.fanout is not None
    dest = router.fanout.destinations[0]
    for step in range(2):
        assert (await post_write(http, router, body(step)))[0] == 204
    await eventually(lambda: dest.pending == 2 * SERIES)  # read into its shard's buffer
    if deadline == "5ms":
        reason = "network" if destination == "closed_port" else "503"
        await eventually(
            lambda: (
                metric_value(router, "rwrouter_retries_total", destination="down", reason=reason)
                > 0
            )
        )
    started = time.monotonic()
    try:
        async with asyncio.timeout(STOP_BOUND):
            await router.stop(drain_timeout=drain_timeout)
    except TimeoutError:
        pytest.fail(f"stop(drain_timeout={drain_timeout}) did not return within {STOP_BOUND} s")
    assert time.monotonic() - started < STOP_BOUND
    assert all(task.done() for task in dest._shards.tasks)  # no sender left retrying
    assert fresh_capture.sample_count("/down") == 0
    # Nothing acknowledged is lost: the next start sends it all, in order.
    write_config(config, url=fresh_capture.url("/up"), deadline="5ms")
    await start_from_file(config)
    await eventually(lambda: fresh_capture.sample_count("/up") == 2 * SERIES)
    timestamps = [
        ts.samples[0].timestamp
        for received in fresh_capture.requests("/up")
        if received.request is not None
        for ts in received.request.timeseries
    ]
    assert sorted(set(timestamps)) == [1_000, 1_001]
    assert timestamps == sorted(timestamps)


@pytest.mark.parametrize(
    "shutdown_timeout", ["0s", "10ms"], ids=["shutdown_timeout_0s", "shutdown_timeout_10ms"]
)
def test_sigterm_stops_a_real_process_with_a_short_shutdown_timeout_and_a_destination_down(
    tmp_path: Path, shutdown_timeout: str
) -> None:
    """``rwrouter run`` exits on SIGTERM within moments when ``server.shutdown_timeout`` is
    (nearly) 0 and its destination is unreachable, the batch still waiting for its deadline."""
    port = free_port()
    config = tmp_path / "rwrouter.yaml"
    write_config(
        config,
        url=f"http://127.0.0.1:{free_port()}/write",
        port=port,
        shutdown_timeout=shutdown_timeout,
    )
    router = RouterProcess(config_path=config, port=port, log_path=tmp_path / "router.log")
    try:
        router.wait_ready(timeout_s=20)
        request = urllib.request.Request(
            router.url + "/api/v1/write", data=body(0), headers=HEADERS, method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 204
        deadline = time.monotonic() + 10
        while router.metric_value("rwrouter_queue_samples", destination="down") < SERIES:
            assert time.monotonic() < deadline, "the batch was not read into memory"
            time.sleep(0.02)
        router.process.send_signal(signal.SIGTERM)
        try:
            status = router.process.wait(STOP_BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"rwrouter run did not exit within {STOP_BOUND} s of SIGTERM")
        assert status == 0
    finally:
        router.stop()
    log = (tmp_path / "router.log").read_text()
    assert "records_left=1" in log and "kept on disk" in log
