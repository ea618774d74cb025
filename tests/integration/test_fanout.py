"""Fan-out over HTTP: what each destination receives, byte for byte (issue 2 sections 5 and 11).

The router is real (aiohttp server, queues, senders); destinations are capture servers.
"""

from __future__ import annotations

import struct

import aiohttp
import pytest

from rwrouter.server.runner import RouterServer
from rwrouter.wire import remote_pb2, types_pb2
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import HEADERS, STALE_NAN, Series, build_body, encode, write_request

NORMAL_NAN = struct.pack("<Q", 0x7FF8000000000001)

TWO_DESTINATIONS = """
remote_write:
  - name: critical
    url: {critical}
    write_relabel_configs:
      - source_labels: [__name__]
        regex: up|m|DCGM_.*
        action: keep
{extra_rules}
    queue_config: {{batch_send_deadline: 20ms, max_shards: 4}}
  - name: rest
    url: {rest}
    fallback: true
    queue_config: {{batch_send_deadline: 20ms, max_shards: 4}}
"""


async def _router(
    start: StartRouter, capture: CaptureServer, extra_rules: str = ""
) -> RouterServer:
    return await start(
        TWO_DESTINATIONS.format(
            critical=capture.url("/critical"), rest=capture.url("/rest"), extra_rules=extra_rules
        )
    )


def _values(capture: CaptureServer, path: str) -> dict[tuple[tuple[str, str], ...], list[bytes]]:
    """Label set -> raw 8-byte sample values received on ``path``."""
    out: dict[tuple[tuple[str, str], ...], list[bytes]] = {}
    for received in capture.requests(path):
        for labels, values in zip(received.label_sets(), received.values, strict=True):
            out.setdefault(labels, []).extend(values)
    return out


async def test_staleness_marker_and_nan_arrive_bit_exact_at_both_destinations(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await start_router(
        TWO_DESTINATIONS.format(
            critical=fresh_capture.url("/critical"),
            rest=fresh_capture.url("/rest"),
            extra_rules="",
        )
        .replace("regex: up|m|DCGM_.*\n        action: keep", "regex: up\n        action: keep")
        .replace("fallback: true", "fallback: false")
    )
    body = build_body(
        [
            Series((("__name__", "up"), ("job", "a")), ((1_000, STALE_NAN),)),
            Series((("__name__", "up"), ("job", "b")), ((1_000, NORMAL_NAN),)),
        ]
    )
    assert (await post_write(http, router, body))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/critical") == 2)
    await eventually(lambda: fresh_capture.sample_count("/rest") == 2)
    for path in ("/critical", "/rest"):
        values = _values(fresh_capture, path)
        assert values[(("__name__", "up"), ("job", "a"))] == [STALE_NAN]
        assert values[(("__name__", "up"), ("job", "b"))] == [NORMAL_NAN]


REWRITES = [
    (
        "tags_regex_not_matching_leaves_no_app_label",
        {"__name__": "m", "tags": ",env:stage,app:web,"},
        "- {source_labels: [tags], regex: ',app:(.*),', target_label: app}",
        (("__name__", "m"), ("tags", ",env:stage,app:web,")),
    ),
    (
        "tags_regex_anchored_with_prefix_sets_app2",
        {"__name__": "m", "tags": ",env:stage,app:web,"},
        "- {source_labels: [tags], regex: '.*,app:(.*),', target_label: app2}",
        (("__name__", "m"), ("app2", "web"), ("tags", ",env:stage,app:web,")),
    ),
    (
        "missing_source_label_deletes_target",
        {"__name__": "m", "pod_name": "d", "test": "c"},
        "- {source_labels: [pod], target_label: pod_name}",
        (("__name__", "m"), ("test", "c")),
    ),
    (
        "empty_incoming_value_is_absent",
        {"__name__": "m", "env": "", "job": "a"},
        "",
        (("__name__", "m"), ("job", "a")),
    ),
]


@pytest.mark.parametrize(
    ("labels", "rule", "expected"), [c[1:] for c in REWRITES], ids=[c[0] for c in REWRITES]
)
async def test_rewrites_reach_the_destination(
    start_router: StartRouter,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    labels: dict[str, str],
    rule: str,
    expected: tuple[tuple[str, str], ...],
) -> None:
    extra = "      " + rule if rule else ""
    router = await _router(start_router, fresh_capture, extra)
    body = encode(write_request([Series(tuple(labels.items()), ((1_000, 1.0),))]))
    assert (await post_write(http, router, body))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/critical") == 1)
    assert fresh_capture.label_sets("/critical") == [expected]


async def test_series_left_without_metric_name_is_not_sent_and_is_counted(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await start_router(f"""
remote_write:
  - name: ws
    url: {fresh_capture.url("/ws")}
    write_relabel_configs:
      - {{action: labelkeep, regex: job|instance}}
    queue_config: {{batch_send_deadline: 20ms}}
  - name: other
    url: {fresh_capture.url("/other")}
    queue_config: {{batch_send_deadline: 20ms}}
""")
    body = build_body(
        [
            Series(
                (("__name__", "up"), ("instance", "h:1"), ("job", "a"), ("pod", "p")),
                ((1_000, 1.0),),
            ),
            Series((("__name__", "node_load1"), ("job", "a")), ((1_000, 2.0),)),
        ]
    )
    assert (await post_write(http, router, body))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/other") == 2)
    assert fresh_capture.requests("/ws") == []
    assert (
        metric_value(router, "rwrouter_samples_dropped_total", destination="ws", reason="invalid")
        == 2
    )


async def test_metadata_only_request_arrives_unchanged_where_rules_route_it(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await _router(start_router, fresh_capture)
    kept = types_pb2.MetricMetadata(
        type=types_pb2.MetricMetadata.GAUGE,
        metric_family_name="DCGM_FI_DEV_GPU_UTIL",
        help="GPU utilization (in %).",
        unit="percent",
    )
    other = types_pb2.MetricMetadata(
        type=types_pb2.MetricMetadata.COUNTER,
        metric_family_name="node_cpu_seconds_total",
        help="Seconds the CPUs spent in each mode.",
        unit="seconds",
    )
    request = remote_pb2.WriteRequest(metadata=[kept, other])
    assert (await post_write(http, router, encode(request)))[0] == 204
    await eventually(lambda: bool(fresh_capture.metadata("/critical")))
    await eventually(lambda: bool(fresh_capture.metadata("/rest")))
    assert fresh_capture.metadata("/critical") == [kept]
    assert fresh_capture.metadata("/rest") == [other]


async def test_native_histogram_series_without_samples_is_forwarded_unchanged(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await _router(start_router, fresh_capture)
    request = remote_pb2.WriteRequest()
    series = request.timeseries.add()
    series.labels.add(name="__name__", value="m")
    series.labels.add(name="job", value="a")
    hist = series.histograms.add(
        count_int=12,
        sum=34.5,
        schema=3,
        zero_threshold=1e-128,
        zero_count_int=2,
        positive_deltas=[1, 2, -1],
        negative_counts=[],
        reset_hint=types_pb2.Histogram.NO,
        timestamp=1_000,
    )
    hist.positive_spans.add(offset=0, length=2)
    hist.positive_spans.add(offset=3, length=1)
    assert (await post_write(http, router, encode(request)))[0] == 204
    await eventually(lambda: len(fresh_capture.requests("/critical")) == 1)
    (received,) = fresh_capture.requests("/critical")
    assert received.request is not None
    assert received.request.timeseries[0] == series
    assert received.raw is not None and series.histograms[0].SerializeToString() in received.raw


async def test_incoming_client_headers_are_never_forwarded(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await _router(start_router, fresh_capture)
    body = build_body([Series((("__name__", "up"),), ((1_000, 1.0),))])
    incoming = {
        **HEADERS,
        "X-Request-Id": "r-1",
        "X-Forwarded-For": "10.0.0.1",
        "User-Agent": "Prometheus/2.42.0",
        "X-Scope-OrgID": "team-a",
    }
    assert (await post_write(http, router, body, headers=incoming))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/critical") == 1)
    (received,) = fresh_capture.requests("/critical")
    names = {name.lower() for name in received.headers}
    assert not names & {"x-request-id", "x-forwarded-for", "x-scope-orgid"}
    assert received.headers["User-Agent"].startswith("rwrouter/")
    assert received.headers["Content-Encoding"] == "snappy"
    assert received.headers["Content-Type"] == "application/x-protobuf"
    assert received.headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert int(received.headers["Content-Length"]) == len(received.body)
    assert "Transfer-Encoding" not in received.headers
    assert received.headers["Host"] == f"127.0.0.1:{fresh_capture.port}"


async def test_unsorted_incoming_labels_are_sent_sorted(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await _router(start_router, fresh_capture)
    request = remote_pb2.WriteRequest()
    series = request.timeseries.add()
    for name, value in (("job", "a"), ("__name__", "up"), ("instance", "h:1")):
        series.labels.add(name=name, value=value)
    series.samples.add(value=1.0, timestamp=1_000)
    assert (await post_write(http, router, encode(request)))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/critical") == 1)
    assert fresh_capture.label_sets("/critical") == [
        (("__name__", "up"), ("instance", "h:1"), ("job", "a"))
    ]


async def test_each_destination_relabels_its_own_copy(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await start_router(f"""
remote_write:
  - name: a
    url: {fresh_capture.url("/a")}
    write_relabel_configs:
      - {{source_labels: [job], target_label: job, replacement: rewritten-by-a}}
    queue_config: {{batch_send_deadline: 20ms}}
  - name: b
    url: {fresh_capture.url("/b")}
    queue_config: {{batch_send_deadline: 20ms}}
""")
    body = build_body([Series((("__name__", "up"), ("job", "orig")), ((1_000, 1.0),))])
    assert (await post_write(http, router, body))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/a") == 1)
    await eventually(lambda: fresh_capture.sample_count("/b") == 1)
    assert fresh_capture.label_sets("/a") == [(("__name__", "up"), ("job", "rewritten-by-a"))]
    assert fresh_capture.label_sets("/b") == [(("__name__", "up"), ("job", "orig"))]
