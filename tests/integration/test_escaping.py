"""UTF-8 names end to end (issue 12, item 5): a Prometheus 3 sender writes UTF-8 metric and
label names unescaped over RW 1.0; the router escapes them for the SigV4 destination (the
workspace double refuses what the managed workspace refuses) and sends them intact to an
``allow-utf-8`` destination."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from rwrouter.doubles.workspace import Key, WorkspaceDouble
from rwrouter.wire import types_pb2
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import Series, encode, write_request

pytestmark = pytest.mark.timeout(60)

ACCESS_KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.fixture
async def double() -> AsyncIterator[WorkspaceDouble]:
    ws = WorkspaceDouble(credentials={ACCESS_KEY: Key(SECRET)})
    await ws.start()
    yield ws
    await ws.stop()


def _config(double: WorkspaceDouble, capture: CaptureServer, *, scheme: str = "") -> str:
    escaping = f"    metric_name_escaping_scheme: {scheme}\n" if scheme else ""
    queue = """    queue_config: {batch_send_deadline: 5ms, max_shards: 1, min_backoff: 10ms}
    metadata_config: {send_interval: 50ms}
"""
    return f"""
remote_write:
  - name: workspace
    url: {double.url("ws-1")}
    sigv4: {{region: us-east-1, access_key: {ACCESS_KEY}, secret_key: '{SECRET}'}}
{escaping}{queue}  - name: utf8
    url: {capture.url("/utf8")}
{queue}"""


def _now_ms() -> int:
    return int(time.time() * 1000)  # the double checks samples against the real clock


OTEL = (
    ("__name__", "http.server.request.duration"),
    ("http.response.status_code", "200"),
    ("job", "api"),
    ("service.name", "checkout"),
)
ESCAPED = (
    ("__name__", "http_server_request_duration"),
    ("http_response_status_code", "200"),
    ("job", "api"),
    ("service_name", "checkout"),
)
LEGACY = (("__name__", "up"), ("job", "api"))


def _body(*series: tuple[tuple[str, str], ...], ts: int, family: str = "") -> bytes:
    metadata = (
        [
            types_pb2.MetricMetadata(
                type=types_pb2.MetricMetadata.HISTOGRAM, metric_family_name=family, help="Duration."
            )
        ]
        if family
        else []
    )
    return encode(write_request([Series(s, ((ts, 1.5),)) for s in series], metadata=metadata))


async def test_sigv4_destination_gets_escaped_names_the_other_gets_them_intact(
    start_router: StartRouter,
    double: WorkspaceDouble,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
) -> None:
    router = await start_router(_config(double, fresh_capture))  # sigv4: underscores
    ts = _now_ms()
    body = _body(OTEL, LEGACY, ts=ts, family="http.server.request.duration")
    assert (await post_write(http, router, body))[0] == 204
    await eventually(lambda: double.sample_count("ws-1") == 2)
    await eventually(lambda: fresh_capture.sample_count("/utf8") == 2)
    assert set(double.series("ws-1")) == {ESCAPED, LEGACY}
    assert not double.rejections  # the workspace refused nothing
    assert sorted(fresh_capture.label_sets("/utf8")) == sorted([OTEL, LEGACY])
    await eventually(lambda: bool(double.metadata("ws-1")))
    assert list(double.metadata("ws-1")) == ["http_server_request_duration"]
    await eventually(lambda: bool(fresh_capture.metadata("/utf8")))
    assert [m.metric_family_name for m in fresh_capture.metadata("/utf8")] == [
        "http.server.request.duration"
    ]


async def test_a_series_whose_escaped_names_collide_is_dropped_and_counted(
    start_router: StartRouter,
    double: WorkspaceDouble,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="rwrouter.fanout")
    router = await start_router(_config(double, fresh_capture))
    ts = _now_ms()
    assert (await post_write(http, router, _body(OTEL, ts=ts)))[0] == 204
    assert (await post_write(http, router, _body(ESCAPED, ts=ts + 1)))[0] == 204  # its twin
    await eventually(lambda: fresh_capture.sample_count("/utf8") == 2)
    await eventually(
        lambda: (
            metric_value(
                router,
                "rwrouter_samples_dropped_total",
                destination="workspace",
                reason="name_collision",
            )
            == 1
        )
    )
    await eventually(lambda: double.sample_count("ws-1") == 1)
    [stored] = double.series("ws-1").values()
    assert stored.labels == ESCAPED and list(stored.samples) == [ts]  # the first one's sample
    assert (
        metric_value(
            router, "rwrouter_name_collisions_total", destination="workspace", kind="series"
        )
        == 1
    )
    assert not double.rejections
    [line] = [r.getMessage() for r in caplog.records if "collide" in r.getMessage()]
    assert line.startswith('destination=workspace kind=series escaped="http_server_request_')
    assert 'dropped="http_server_request_duration{' in line


async def test_allow_utf8_at_the_sigv4_destination_shows_the_workspace_refusal(
    start_router: StartRouter,
    double: WorkspaceDouble,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
) -> None:
    router = await start_router(_config(double, fresh_capture, scheme="allow-utf-8"))
    ts = _now_ms()
    assert (await post_write(http, router, _body(OTEL, LEGACY, ts=ts)))[0] == 204
    await eventually(
        lambda: (
            metric_value(
                router, "rwrouter_samples_dropped_total", destination="workspace", reason="4xx"
            )
            == 1
        )
    )
    await eventually(lambda: set(double.series("ws-1")) == {LEGACY})  # (the batch was split)
    refusals = {(r.status, r.message) for r in double.requests if r.status != 200}
    assert refusals == {(400, 'sample invalid metric name: "http.server.request.duration"')}
    assert set(double.rejections) == {"invalid_series"}
    await eventually(lambda: fresh_capture.sample_count("/utf8") == 2)
