"""A real Prometheus 3 (the peers cache: ``peer_binary("prometheus")``) as the RW 2.0 store of a
router: what the router sends as ``io.prometheus.write.v2.Request`` is queried back through
its API: exact series and float values, a staleness marker (it ends the series, which a NaN
would not), a native histogram, exemplars (an RW 1.0 exemplar-only series joins its series:
Prometheus 3 refuses exemplar-only series), and, with ``--enable-feature=type-and-unit-labels``,
the metadata of the destination's book as ``__type__``/``__unit__`` labels.

Prometheus 3's receiver accepts both messages by default
(``--web.remote-write-receiver.accepted-protobuf-messages``); native histograms need no flag.
The router is fed RW 1.0 requests built by hand.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from rwrouter.doubles.prometheus import PrometheusProcess
from rwrouter.protocol import RW2_MESSAGE
from rwrouter.wire import remote_pb2, types_pb2
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.peers import peer_binary
from tests.support.series import STALE_NAN, encode

MM = types_pb2.MetricMetadata
NOW_MS = int(time.time() * 1000) // 1000 * 1000 - 120_000  # two minutes ago, whole seconds
VALUES = [0.1, 1e-300, -2.5, 3.0e38]


@pytest.fixture(scope="module", params=["plain", "type_and_unit_labels"])
def prometheus(request: pytest.FixtureRequest) -> Iterator[tuple[str, PrometheusProcess]]:
    features = "exemplar-storage"
    if request.param == "type_and_unit_labels":
        features += ",type-and-unit-labels"
    binary = peer_binary("prometheus")
    with PrometheusProcess.start(
        "global: {scrape_interval: 1h}\n",
        binary=binary,
        extra_args=(f"--enable-feature={features}",),
    ) as prom:
        yield request.param, prom


def api(prom: PrometheusProcess, path: str, **params: str) -> Any:
    url = f"{prom.url}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        payload = json.loads(response.read())
    assert payload["status"] == "success", payload
    return payload["data"]


def feed() -> list[bytes]:
    """RW 1.0 requests as a Prometheus 2 sends them: metadata first, then series."""
    metadata = remote_pb2.WriteRequest()
    metadata.metadata.extend(
        [
            MM(metric_family_name="rw2_bytes", type=MM.GAUGE, help="Bytes in use.", unit="bytes"),
            MM(
                metric_family_name="rw2_latency_seconds",
                type=MM.HISTOGRAM,
                help="Latency.",
                unit="seconds",
            ),
        ]
    )
    series = remote_pb2.WriteRequest()
    for i, value in enumerate(VALUES):
        ts = series.timeseries.add()
        ts.labels.add(name="__name__", value="rw2_bytes")
        ts.labels.add(name="i", value=str(i))
        ts.samples.add(value=value, timestamp=NOW_MS)
        ts.samples.add(value=value * 2, timestamp=NOW_MS + 1_000)
    exemplar_only = series.timeseries.add()  # as Prometheus's RW 1.0 sender: on its own
    exemplar_only.labels.add(name="__name__", value="rw2_bytes")
    exemplar_only.labels.add(name="i", value="0")
    ex = exemplar_only.exemplars.add(value=0.1, timestamp=NOW_MS)
    ex.labels.add(name="trace_id", value="abc123")
    stale = series.timeseries.add()
    stale.labels.add(name="__name__", value="rw2_stale")
    stale.samples.add(value=1.0, timestamp=NOW_MS)
    body = series.SerializeToString()
    # the staleness marker as its exact wire bytes (a float would not keep the NaN payload)
    marker = b"\x09" + STALE_NAN + b"\x10" + _varint(NOW_MS + 1_000)
    stale_ts = _field(1, _label("__name__", "rw2_stale") + _field(2, marker))
    hist = series.__class__()
    h = hist.timeseries.add()
    h.labels.add(name="__name__", value="rw2_latency_seconds")
    h.labels.add(name="job", value="api")
    nh = h.histograms.add(
        count_int=5, sum=12.5, schema=0, zero_threshold=0.001, zero_count_int=1, timestamp=NOW_MS
    )
    nh.positive_spans.add(offset=0, length=2)
    nh.positive_deltas.extend([2, 0])
    return [encode(metadata), _snappy(body + stale_ts), encode(hist)]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes((value,))


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, types_pb2.Label(name=name, value=value).SerializeToString())


def _snappy(raw: bytes) -> bytes:
    import snappy  # type: ignore[import-untyped,unused-ignore]

    return bytes(snappy.compress(raw))


async def test_prometheus3_stores_what_the_router_sends_as_rw2(
    prometheus: tuple[str, PrometheusProcess],
    start_router: StartRouter,
    http: aiohttp.ClientSession,
) -> None:
    mode, prom = prometheus
    router = await start_router(f"""
remote_write:
  - name: prom3
    url: {prom.url}/api/v1/write
    protobuf_message: io.prometheus.write.v2.Request
    queue_config: {{batch_send_deadline: 5ms, max_shards: 1}}
""")
    for body in feed():
        status, text, _ = await post_write(http, router, body)
        assert status == 204, text
    expected = 2 * len(VALUES) + 2 + 1 + 1  # floats, stale pair, histogram, exemplar
    await eventually(
        lambda: (
            metric_value(router, "rwrouter_sent_samples_total", destination="prom3") == expected
        ),
        timeout=20,
    )
    assert (
        metric_value(router, "rwrouter_protocol_fallbacks_total", destination="prom3", reason="415")
        == 0
    )
    assert (
        metric_value(
            router,
            "rwrouter_destination_protocol",
            destination="prom3",
            protobuf_message=RW2_MESSAGE,
        )
        == 1
    )
    at = f"{(NOW_MS + 1_500) / 1000:.3f}"

    floats = api(prom, "/api/v1/query", query="rw2_bytes[10s]", time=at)["result"]
    got = {s["metric"]["i"]: [(p[0], float(p[1])) for p in s["values"]] for s in floats}
    assert got == {
        str(i): [(NOW_MS / 1000, v), (NOW_MS / 1000 + 1, v * 2)] for i, v in enumerate(VALUES)
    }
    labels = {k for s in floats for k in s["metric"]}
    if mode == "type_and_unit_labels":  # the book's metadata, as Prometheus 3 files it
        assert all(
            s["metric"]["__type__"] == "gauge" and s["metric"]["__unit__"] == "bytes"
            for s in floats
        )
    else:
        assert labels == {"__name__", "i"}

    before = api(prom, "/api/v1/query", query="rw2_stale", time=f"{(NOW_MS + 500) / 1000:.3f}")
    assert [float(s["value"][1]) for s in before["result"]] == [1.0]
    assert api(prom, "/api/v1/query", query="rw2_stale", time=at)["result"] == []  # stale

    hist = api(prom, "/api/v1/query", query="rw2_latency_seconds", time=at)["result"]
    assert len(hist) == 1
    value = hist[0]["histogram"][1]
    assert (value["count"], value["sum"]) == ("5", "12.5")
    assert [(float(b[1]), float(b[2]), b[3]) for b in value["buckets"]] == [
        (-0.001, 0.001, "1"),
        (0.5, 1.0, "2"),
        (1.0, 2.0, "2"),
    ]
    if mode == "type_and_unit_labels":
        assert hist[0]["metric"]["__type__"] == "histogram"

    exemplars = api(
        prom, "/api/v1/query_exemplars", query="rw2_bytes", start=str(NOW_MS / 1000 - 10), end=at
    )
    found = [(e["labels"], float(e["value"])) for series in exemplars for e in series["exemplars"]]
    assert found == [({"trace_id": "abc123"}, 0.1)]
