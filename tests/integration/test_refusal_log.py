"""A client that sends bad requests at will gets each its 4xx, counted, but at most one log
line a minute (issue 14: no log flood from outside): the first refusal is logged, the next
ones of the same client address are counted in the metric and in ``unlogged`` of its next
line."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from rwrouter.server.runner import RouterServer
from tests.integration.conftest import StartRouter, metric_value, post_write
from tests.support.capture import CaptureServer

pytestmark = pytest.mark.timeout(60)

BAD_REQUESTS = 200


async def test_bad_requests_are_each_answered_but_logged_once_a_minute(
    start_router: StartRouter,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    router: RouterServer = await start_router(
        f"remote_write:\n  - name: a\n    url: {fresh_capture.url('/a')}\n"
    )
    caplog.set_level(logging.INFO, logger="rwrouter.server")
    for _ in range(BAD_REQUESTS):
        status, text, _ = await post_write(http, router, b"not snappy")
        assert status == 400, text
    assert metric_value(router, "rwrouter_refused_requests_total", reason="decode") == BAD_REQUESTS
    lines = [r.getMessage() for r in caplog.records if "status=400" in r.getMessage()]
    print(f"\nREFUSAL-LOG {{'bad_requests': {BAD_REQUESTS}, 'log_lines': {len(lines)}}}")
    assert len(lines) == 1 and "unlogged=0" in lines[0] and "remote=127.0.0.1" in lines[0]
