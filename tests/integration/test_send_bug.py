"""A bug in the send path (rwrouter.send.shards) stops that destination's senders loudly
instead of retrying it for ever: logged once with its traceback,
``rwrouter_destination_failed`` 1, ``/-/ready`` 503. Nothing acknowledged is lost: its queue
stays on disk, and a restart or a reload (which replaces the failed destination) sends it. The
other destinations keep sending throughout.

The bug is injected as a TypeError from the broken destination's deliverer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rwrouter.send.delivery import Deliverer
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import Start, StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import Series, build_body

SERIES = 40  # per request, spread over both shards of the broken destination
BUG = "stopped sending"  # in the one log line of the bug


def config_yaml(capture: CaptureServer, storage: Path) -> str:
    return f"""
server: {{listen_address: "127.0.0.1:0"}}
storage: {{path: "{storage}"}}
remote_write:
  - name: broken
    url: {capture.url("/broken")}
    queue_config: {{min_shards: 2, max_shards: 2, batch_send_deadline: 5ms}}
  - name: healthy
    url: {capture.url("/healthy")}
    queue_config: {{batch_send_deadline: 5ms}}
"""


def inject_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``broken`` destination's deliverer raises TypeError for every batch."""
    original = Deliverer.deliver_raw

    async def deliver_raw(self: Deliverer, *args: Any, **kwargs: Any) -> int:
        if self.name == "broken":
            raise TypeError("an injected bug: unsupported operand type(s)")
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Deliverer, "deliver_raw", deliver_raw)


def body(step: int) -> bytes:
    return build_body(
        [Series((("__name__", "m"), ("i", str(i))), ((1_000 + step, 1.0),)) for i in range(SERIES)]
    )


async def ready(http: aiohttp.ClientSession, router: RouterServer) -> tuple[int, str]:
    async with http.get(router.url + "/-/ready") as resp:
        return resp.status, await resp.text()


def bug_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if BUG in r.getMessage()]


async def fail_broken(
    router: RouterServer,
    http: aiohttp.ClientSession,
    capture: CaptureServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Send two requests: the broken destination fails on the first, the healthy one gets
    both; then the broken one is stopped loudly and its queue holds both on disk."""
    assert (await ready(http, router))[0] == 200
    assert (await post_write(http, router, body(0)))[0] == 204
    await eventually(
        lambda: metric_value(router, "rwrouter_destination_failed", destination="broken") == 1
    )
    assert (await post_write(http, router, body(1)))[0] == 204  # appends go on
    await eventually(lambda: capture.sample_count("/healthy") == 2 * SERIES)
    assert router.fanout is not None
    broken = router.fanout.destinations[0]
    await eventually(lambda: all(task.done() for task in broken._shards.tasks))  # no retries
    [line] = bug_lines(caplog)  # once, though both shards had a batch
    assert line.levelno == logging.ERROR and line.exc_info is not None
    assert line.exc_info[0] is TypeError and "destination=broken" in line.getMessage()
    status, text = await ready(http, router)
    assert status == 503 and "broken" in text
    assert metric_value(router, "rwrouter_destination_failed", destination="healthy") == 0
    assert metric_value(router, "rwrouter_sent_samples_total", destination="broken") == 0
    assert metric_value(router, "rwrouter_queue_blocks", destination="broken") == 2  # on disk
    assert capture.sample_count("/broken", accepted_only=False) == 0


async def test_a_bug_stops_one_destination_loudly_and_a_restart_sends_its_queue(
    start_router: StartRouter,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.ERROR, logger="rwrouter.sending")
    inject_bug(monkeypatch)
    yaml_text = config_yaml(fresh_capture, tmp_path / "storage")
    router = await start_router(yaml_text)
    await fail_broken(router, http, fresh_capture, caplog)
    await router.stop(drain_timeout=5)
    monkeypatch.undo()  # the bug fixed, rwrouter restarted on the same storage
    again = await start_router(yaml_text)
    await eventually(lambda: fresh_capture.sample_count("/broken") == 2 * SERIES)
    assert (await ready(http, again))[0] == 200
    assert metric_value(again, "rwrouter_destination_failed", destination="broken") == 0
    assert fresh_capture.sample_count("/healthy") == 2 * SERIES  # nothing sent twice there
    assert len(bug_lines(caplog)) == 1


async def test_a_reload_replaces_a_failed_destination_even_unchanged(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.ERROR, logger="rwrouter.sending")
    inject_bug(monkeypatch)
    path = tmp_path / "rwrouter.yml"
    path.write_text(config_yaml(fresh_capture, tmp_path / "storage"))
    router = await start_from_file(path)
    await fail_broken(router, http, fresh_capture, caplog)
    monkeypatch.undo()
    async with http.post(router.url + "/-/reload") as resp:  # the same file
        assert resp.status == 200
        summary = await resp.text()
    assert "restarted broken" in summary and "kept healthy" in summary
    await eventually(lambda: fresh_capture.sample_count("/broken") == 2 * SERIES)
    assert (await ready(http, router))[0] == 200
    assert metric_value(router, "rwrouter_destination_failed", destination="broken") == 0
