"""Pacing against the workspace double, in process: a 429 lowers the paced rate (AIMD), the log
says so once per episode (start and end), and what was accepted is delivered."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from rwrouter.doubles.workspace import Fault, Key, WorkspaceDouble
from rwrouter.send import pacing
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.series import Series, build_body

ACCESS_KEY, SECRET = "AKIDPACING", "pacing-secret"
RATE = 1000
LOWERED = "rate limited: pacing lowered, recovering gradually"
BACK = "pacing back at max_samples_per_second"


@pytest.fixture
async def double() -> AsyncIterator[WorkspaceDouble]:
    ws = WorkspaceDouble(credentials={ACCESS_KEY: Key(SECRET)})
    await ws.start()
    yield ws
    await ws.stop()


def _config(double: WorkspaceDouble) -> str:
    return f"""
remote_write:
  - name: workspace
    url: {double.url("ws-1")}
    sigv4: {{region: us-east-1, access_key: {ACCESS_KEY}, secret_key: {SECRET}}}
    queue_config:
      batch_send_deadline: 5ms
      max_shards: 1
      min_backoff: 10ms
      max_backoff: 100ms
      retry_on_http_429: true
      max_samples_per_second: {RATE}
      burst_samples: {RATE}
"""


def _body(step: int) -> bytes:
    return build_body([Series((("__name__", "up"), ("job", "a")), ((1_000 + step, 1.0),))])


def _stored(double: WorkspaceDouble, samples: int) -> Callable[[], bool]:
    return lambda: double.sample_count("ws-1") == samples


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for r in caplog.records if text in r.getMessage())


async def test_a_429_lowers_the_rate_and_the_log_says_so_once_per_episode(
    start_router: StartRouter,
    double: WorkspaceDouble,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pacing, "INCREASE", 1.0)  # back from 50 % in 0.5 s, not 10 s
    caplog.set_level(logging.INFO, logger="rwrouter.sending")
    router = await start_router(_config(double))

    def rate() -> float:
        return metric_value(router, "rwrouter_pacing_rate", destination="workspace")

    assert rate() == RATE
    assert metric_value(router, "rwrouter_pacing_burst_samples", destination="workspace") == RATE

    double.inject(*[Fault(429, "Rate exceeded", {"Retry-After": "0"})] * 3)
    assert (await post_write(http, router, _body(0)))[0] == 204
    await eventually(lambda: double.sample_count("ws-1") == 1)
    decreases = metric_value(router, "rwrouter_pacing_decreases_total", destination="workspace")
    retried = metric_value(router, "rwrouter_retries_total", destination="workspace", reason="429")
    assert (decreases, retried) == (1, 3)  # three 429s within a second: one decrease
    assert rate() < RATE
    assert (_lines(caplog, LOWERED), _lines(caplog, BACK)) == (1, 0)

    # the end is noticed by the next request once the rate is back (within 0.5 s here)
    step = 1
    while not _lines(caplog, BACK) and step < 40:
        assert (await post_write(http, router, _body(step)))[0] == 204
        await eventually(_stored(double, step + 1))
        await asyncio.sleep(0.05)  # the recovery is time passing: nothing to poll for
        step += 1
    assert (_lines(caplog, LOWERED), _lines(caplog, BACK)) == (1, 1)
    assert rate() == RATE

    double.inject(Fault(429, "Rate exceeded"))  # a new episode
    assert (await post_write(http, router, _body(step)))[0] == 204
    await eventually(lambda: double.sample_count("ws-1") == step + 1)
    assert (_lines(caplog, LOWERED), _lines(caplog, BACK)) == (2, 1)
    assert not double.rejections.keys() - {"fault"}
