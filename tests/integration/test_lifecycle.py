"""Lifecycle: hot reload (POST /-/reload, SIGHUP), shutdown leaving data on disk, restart
sending it first. Routers run in-process from a YAML file (so reload re-reads it), except the
SIGHUP test, which runs ``rwrouter run`` as a real process."""

from __future__ import annotations

import asyncio
import functools
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from rwrouter.doubles.prometheus import free_port
from rwrouter.doubles.router import RouterProcess
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import Start, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import Series, build_body

pytestmark = pytest.mark.timeout(60)

TWO_DESTINATIONS = """
server: {{listen_address: "127.0.0.1:0", shutdown_timeout: 1s}}
storage: {{path: "{storage}"}}
remote_write:
  - name: a
    url: {url_a}
    queue_config: {{batch_send_deadline: 5ms{extra_a}}}
  - name: b
    url: {url_b}
    queue_config: {{batch_send_deadline: 5ms, min_backoff: 50ms, max_backoff: 50ms}}
"""


def body(step: int, *, name: str = "m", series: int = 5) -> bytes:
    return build_body(
        [
            Series(((("__name__", name), ("i", str(i)))), ((1_000 + step, float(step)),))
            for i in range(series)
        ]
    )


def write_config(path: Path, capture: CaptureServer, *, extra_a: str = "", url_b: str = "") -> None:
    path.write_text(
        TWO_DESTINATIONS.format(
            storage=path.parent / "data",
            url_a=capture.url("/a"),
            url_b=url_b or capture.url("/b"),
            extra_a=extra_a,
        )
    )


def sent_timestamps(capture: CaptureServer, path: str) -> list[int]:
    """The timestamps of the samples received on ``path``, in arrival order."""
    return [
        ts.samples[0].timestamp
        for received in capture.requests(path)
        if received.request is not None
        for ts in received.request.timeseries
    ]


async def reload(http: aiohttp.ClientSession, router: RouterServer) -> tuple[int, str]:
    async with http.post(router.url + "/-/reload") as resp:
        return resp.status, await resp.text()


WITH_SHADOWS = """
server: {{listen_address: "127.0.0.1:0", shutdown_timeout: 1s}}
storage: {{path: "{storage}"}}
remote_write:
  - {{name: a, url: "{url}/a", queue_config: {{batch_send_deadline: 5ms}}}}
  - {{name: b, url: "{url}/b", {b}}}
  - {{name: s, shadow: true, write_relabel_configs: [{{regex: "{s}", source_labels: [__name__],
     action: keep}}]}}
{more}"""


@pytest.mark.parametrize(
    ("change", "summary"),
    [
        pytest.param({}, "kept a,b,s", id="nothing"),
        pytest.param({"s": "DCGM_.*"}, "kept a,b; changed s", id="shadow_rules_changed"),
        pytest.param(
            {"more": "  - {name: t, shadow: true}\n"}, "kept a,b,s; added t", id="shadow_added"
        ),
        pytest.param({"b": "shadow: true"}, "kept a,s; changed b", id="sending_becomes_shadow"),
        pytest.param(
            {"b": "queue_config: {max_shards: 2}"}, "kept a,s; changed b", id="sending_changed"
        ),
    ],
)
async def test_the_reload_summary_names_every_destination_shadows_included(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    change: dict[str, str],
    summary: str,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    base = {
        "b": "queue_config: {batch_send_deadline: 5ms}",
        "s": "DCGM_FI_DEV_GPU_UTIL",
        "more": "",
    }
    where = {"storage": tmp_path / "data", "url": fresh_capture.url("").rstrip("/")}

    def write(**settings: str) -> None:
        config.write_text(WITH_SHADOWS.format(**where, **{**base, **settings}))

    write()
    router = await start_from_file(config)
    write(**change)
    status, text = await reload(http, router)
    assert status == 200, text
    assert text.strip() == f"configuration reloaded: {summary}"
    assert (await post_write(http, router, body(0)))[0] == 204  # it still takes writes


async def test_reload_keeps_unchanged_destination_queues_and_replaces_changed_ones(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    write_config(config, fresh_capture)
    router = await start_from_file(config)
    assert router.fanout is not None
    a_before, b_before = router.fanout.destinations
    assert (await post_write(http, router, body(0)))[0] == 204
    write_config(config, fresh_capture, extra_a=", max_samples_per_send: 100")
    status, text = await reload(http, router)
    assert status == 200, text
    assert "kept b" in text and "changed a" in text
    a_after, b_after = router.fanout.destinations
    assert b_after is b_before  # unchanged: the same queue and senders
    assert a_after is not a_before
    assert a_after.config.queue_config.max_samples_per_send == 100
    assert (await post_write(http, router, body(1)))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/a") == 10)
    await eventually(lambda: fresh_capture.sample_count("/b") == 10)
    assert metric_value(router, "rwrouter_config_last_reload_successful") == 1


@pytest.mark.parametrize(
    "bad_text",
    [
        "remote_write: [{url: 'http://x', queue_config: {max_shards: 0}}]\n",
        "remote_write: [\n",
        "storage: {fsync: sometimes}\nremote_write: [{url: 'http://x'}]\n",
    ],
    ids=["invalid_value", "invalid_yaml", "invalid_storage_key"],
)
async def test_bad_config_keeps_the_running_one(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    bad_text: str,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    write_config(config, fresh_capture)
    router = await start_from_file(config)
    assert router.fanout is not None
    destinations = list(router.fanout.destinations)
    config.write_text(bad_text)
    status, text = await reload(http, router)
    assert status == 500
    assert text.startswith("failed to reload config:") and text.count("\n") == 1
    assert metric_value(router, "rwrouter_config_last_reload_successful") == 0
    assert router.fanout.destinations == destinations
    assert (await post_write(http, router, body(0)))[0] == 204  # still routing, same config
    await eventually(lambda: fresh_capture.sample_count("/a") == 5)
    write_config(config, fresh_capture)  # fixed: the next reload succeeds
    assert (await reload(http, router))[0] == 200
    assert metric_value(router, "rwrouter_config_last_reload_successful") == 1


async def test_start_and_reload_log_what_check_config_warns_about(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    write_config(config, fresh_capture, extra_a=", sample_age_limit: 1ms")
    with caplog.at_level("WARNING", logger="rwrouter.server"):
        router = await start_from_file(config)
    warned = [r.getMessage() for r in caplog.records if "configuration warning" in r.getMessage()]
    assert len(warned) == 1 and "remote_write[0].queue_config.sample_age_limit" in warned[0]
    caplog.clear()
    write_config(config, fresh_capture)  # the warning gone: nothing logged
    with caplog.at_level("WARNING", logger="rwrouter.server"):
        assert (await reload(http, router))[0] == 200
    assert not [r for r in caplog.records if "configuration warning" in r.getMessage()]
    write_config(config, fresh_capture, extra_a=", sample_age_limit: 2ms")
    with caplog.at_level("WARNING", logger="rwrouter.server"):
        assert (await reload(http, router))[0] == 200
    assert [r for r in caplog.records if "configuration warning" in r.getMessage()]


async def test_reload_under_load_loses_nothing(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """Requests keep arriving while destinations are replaced back and forth: every
    acknowledged sample arrives at both destinations."""
    config = tmp_path / "rwrouter.yaml"
    write_config(config, fresh_capture)
    router = await start_from_file(config)
    acknowledged = 0

    async def sender(offset: int) -> None:
        nonlocal acknowledged
        for step in range(30):
            status = (await post_write(http, router, body(step, name=f"m{offset}")))[0]
            assert status == 204
            acknowledged += 5

    senders = asyncio.gather(*(sender(k) for k in range(3)))
    for k in range(6):
        write_config(config, fresh_capture, extra_a=f", max_samples_per_send: {100 + k}")
        assert (await reload(http, router))[0] == 200
        await asyncio.sleep(0.05)
    await senders
    await eventually(lambda: fresh_capture.sample_count("/a") == acknowledged, timeout=20)
    await eventually(lambda: fresh_capture.sample_count("/b") == acknowledged, timeout=20)


async def test_backlog_of_a_replaced_destination_is_handed_to_the_new_one(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """b points at a dead port: its data waits on disk. The fixed URL arrives by reload; the
    new destination opens the same queue and sends the backlog, oldest first."""
    config = tmp_path / "rwrouter.yaml"
    dead = f"http://127.0.0.1:{free_port()}/write"
    write_config(config, fresh_capture, url_b=dead)
    router = await start_from_file(config)
    for step in range(3):
        assert (await post_write(http, router, body(step)))[0] == 204
    # b's batch is in flight, retried: the reload must not wait for it (the successor sends it)
    retried = functools.partial(
        metric_value, router, "rwrouter_retries_total", destination="b", reason="network"
    )
    await eventually(lambda: retried() >= 2)
    write_config(config, fresh_capture)
    started = time.monotonic()
    status, text = await reload(http, router)
    took = time.monotonic() - started
    print(f"reload with b's batch retried: {took:.2f} s")
    assert status == 200 and "changed b" in text, text
    assert took < 5  # not HANDOVER_TIMEOUT (10 s): the retries stop at the handover
    assert (await post_write(http, router, body(3)))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/b") == 20)
    timestamps = sent_timestamps(fresh_capture, "/b")
    assert timestamps == sorted(timestamps)  # the backlog went out before the new sample


async def test_stop_leaves_unsent_data_on_disk_and_restart_sends_it_first(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    dead = f"http://127.0.0.1:{free_port()}/write"
    write_config(config, fresh_capture, url_b=dead)
    router = await start_from_file(config)
    for step in range(4):
        assert (await post_write(http, router, body(step)))[0] == 204
    await router.stop(drain_timeout=0.5)  # b cannot drain: its 4 records stay on disk
    write_config(config, fresh_capture)
    restarted = await start_from_file(config)
    assert (await post_write(http, restarted, body(4)))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/b") == 25)
    timestamps = sent_timestamps(fresh_capture, "/b")
    assert sorted(set(timestamps)) == [1_000, 1_001, 1_002, 1_003, 1_004]
    assert timestamps == sorted(timestamps)


def test_sighup_reloads_a_running_process(fresh_capture: CaptureServer, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "rwrouter.yaml"

    def write(batch_deadline: str) -> None:
        config.write_text(f"""
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: 1s}}
remote_write:
  - name: a
    url: {fresh_capture.url("/a")}
    queue_config: {{batch_send_deadline: {batch_deadline}}}
""")

    write("5ms")
    router = RouterProcess(config_path=config, port=port, log_path=tmp_path / "router.log")
    try:
        router.wait_ready(timeout_s=20)
        before = router.metric_value("rwrouter_config_last_reload_success_timestamp_seconds")
        config.write_text("remote_write: [\n")
        router.process.send_signal(signal.SIGHUP)
        _poll(lambda: router.metric_value("rwrouter_config_last_reload_successful") == 0)
        write("10ms")
        router.process.send_signal(signal.SIGHUP)
        _poll(lambda: router.metric_value("rwrouter_config_last_reload_successful") == 1)
        after = router.metric_value("rwrouter_config_last_reload_success_timestamp_seconds")
        assert after > before
        request = urllib.request.Request(
            router.url + "/api/v1/write",
            data=body(0),
            method="POST",
            headers={"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 204
        assert (tmp_path / "data" / "queue" / "a").is_dir()  # storage.path next to the file
    finally:
        router.stop()
    log = (tmp_path / "router.log").read_text()
    assert "configuration reload failed" in log and "configuration reloaded" in log


def _poll(predicate: Callable[[], bool], *, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


async def test_requests_flow_while_a_replaced_destination_finishes_its_batch(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    """b is stuck retrying a batch (dead port) when a reload replaces it: the retries stop at
    the handover (the batch is not done: the successor sends it), so the reload answers at
    once instead of after the 10 s a batch in flight gets; requests flow meanwhile, and what
    they bring for b is handed to the successor with the rest."""
    config = tmp_path / "rwrouter.yaml"
    dead = f"http://127.0.0.1:{free_port()}/write"
    write_config(config, fresh_capture, url_b=dead)
    router = await start_from_file(config)
    assert (await post_write(http, router, body(0)))[0] == 204
    await eventually(
        lambda: (
            metric_value(router, "rwrouter_retries_total", destination="b", reason="network") > 0
        )
    )  # the batch is in flight, being retried
    write_config(config, fresh_capture)
    loop = asyncio.get_running_loop()
    started = loop.time()
    reloading = asyncio.create_task(reload(http, router))
    assert (await post_write(http, router, body(1)))[0] == 204
    assert loop.time() - started < 1.0
    status, text = await reloading
    assert status == 200, text
    assert loop.time() - started < 3.0  # not the 10 s of HANDOVER_TIMEOUT
    await eventually(lambda: fresh_capture.sample_count("/b") == 10, timeout=15)
    assert sorted(set(sent_timestamps(fresh_capture, "/b"))) == [1_000, 1_001]
