"""Early answers (issue 14, item 7): a series larger than a destination's
``max_request_bytes`` is refused at receive time, 413 with its size and the limit in the one-line
reason, nothing of the request kept for any destination (it was answered 204, then dropped as
``too_large``), counted as a refused request ``too_large``; the next request is unaffected."""

from __future__ import annotations

import aiohttp
import pytest

from rwrouter.server.runner import RouterServer
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import Series, build_body

pytestmark = pytest.mark.timeout(60)

ROUTER = """
remote_write:
  - name: small
    url: {small}
    queue_config: {{batch_send_deadline: 5ms, max_request_bytes: 1KiB}}
  - name: big
    url: {big}
    queue_config: {{batch_send_deadline: 5ms}}
"""


def series(name: str, value: str, *, ts: int = 1_000) -> Series:
    return Series((("__name__", name), ("v", value)), ((ts, 1.0),))


# id, the series of the refused request (each routed to both destinations)
TOO_LARGE = [
    ("one_series_over_the_limit", [series("m", "x" * 2000)]),
    (
        "a_large_series_among_small_ones",
        [series("a", "1"), series("m", "x" * 2000), series("b", "2")],
    ),
    ("just_over_the_limit", [series("m", "x" * 1010)]),
]


@pytest.mark.parametrize("refused", [c[1] for c in TOO_LARGE], ids=[c[0] for c in TOO_LARGE])
async def test_a_series_over_max_request_bytes_is_413_and_nothing_is_kept(
    start_router: StartRouter,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    refused: list[Series],
) -> None:
    router: RouterServer = await start_router(
        ROUTER.format(small=fresh_capture.url("/small"), big=fresh_capture.url("/big"))
    )
    status, text, _ = await post_write(http, router, build_body(refused))
    assert status == 413, text
    assert text.count("\n") == 1
    assert "destination small's max_request_bytes of 1024 bytes" in text
    assert "a series of " in text and int(text.split("a series of ")[1].split()[0]) > 1024
    assert metric_value(router, "rwrouter_refused_requests_total", reason="too_large") == 1
    # The next request goes through; it is the only one either destination ever gets: the
    # queues are in order, so anything kept of the refused one would have come first.
    good = [series("good", "1", ts=2_000)]
    assert (await post_write(http, router, build_body(good)))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/small") == 1)
    await eventually(lambda: fresh_capture.sample_count("/big") == 1)
    for path in ("/small", "/big"):
        assert fresh_capture.label_sets(path) == [(("__name__", "good"), ("v", "1"))]
    for dest in ("small", "big"):
        dropped = metric_value(
            router, "rwrouter_samples_dropped_total", destination=dest, reason="too_large"
        )
        assert dropped == 0
