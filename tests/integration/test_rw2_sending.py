"""Sending remote write 2.0 (``protobuf_message: io.prometheus.write.v2.Request``) from a real
router to aiohttp destinations on 127.0.0.1: valid RW 2.0 with the metadata routed there, the
fallback to RW 1.0 of a destination that answers 415 (nothing lost), a reload that tries RW 2.0
again, SigV4 to the workspace double (an RW 1.0-only receiver: the 2xx-without-Written
fallback), and start timestamps stripped for an RW 1.0 destination.

The router is fed RW 1.0 requests built by hand (tests/support/series.py).
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from rwrouter.auth.schemes import NoAuth
from rwrouter.config import StorageConfig, parse_config
from rwrouter.doubles.workspace import Key, WorkspaceDouble
from rwrouter.metrics import Metrics
from rwrouter.pipeline.build import make_destination
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written, message_of
from rwrouter.queue.records import FLAG_START_TIMESTAMPS, encode_share
from rwrouter.routing import Route, Router
from rwrouter.send.transport import Transport
from rwrouter.wire import decompress, remote_pb2, types_pb2, write_v2_pb2
from tests.integration.conftest import Start, StartRouter, eventually, metric_value, post_write
from tests.integration.test_sending import Serve, serve  # noqa: F401  (the fixture)
from tests.support.rw2_frames import Frame, decode_v2, frames, series_of
from tests.support.series import STALE_NAN, Series, encode, write_request

MM = types_pb2.MetricMetadata


@dataclass
class Sink:
    """A destination that speaks RW 2.0 (``rw2``) or answers 415 to it; records every request
    by protocol: (i label, sample value bytes, metadata) per series, and metadata requests."""

    rw2: bool = True
    requests: list[tuple[str, list[Frame]]] = field(default_factory=list)
    metadata_requests: list[list[str]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        headers = request.headers
        message = message_of(headers.get("Content-Encoding"), headers.get("Content-Type"))
        raw = decompress(await request.read(), max_decoded_bytes=1 << 26)
        if message == RW2_MESSAGE:
            if not self.rw2:
                return web.Response(status=415, text="unsupported proto")
            assert headers["X-Prometheus-Remote-Write-Version"] == "2.0.0"
            got = series_of(decode_v2(raw))
            self.requests.append((message, got))
            counts = Written(
                sum(len(f.samples) for f in got),
                sum(len(f.histograms) for f in got),
                sum(len(f.exemplars) for f in got),
            )
            return web.Response(status=204, headers=counts.headers())
        assert headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
        rw1 = remote_pb2.WriteRequest.FromString(raw)
        if rw1.metadata:
            self.metadata_requests.append([m.metric_family_name for m in rw1.metadata])
        if rw1.timeseries:
            self.requests.append((message, [_frame_of(ts) for ts in rw1.timeseries]))
        return web.Response(status=204)

    def samples(self, message: str | None = None) -> list[tuple[str, str]]:
        """(series ``i`` label, protocol) of every sample received."""
        return [
            (dict(f.labels).get("i", ""), m)
            for m, got in self.requests
            if message in (None, m)
            for f in got
            for _ in f.samples
        ]


def _frame_of(ts: types_pb2.TimeSeries) -> Frame:
    return Frame(
        tuple((lab.name, lab.value) for lab in ts.labels),
        tuple(s.SerializeToString() for s in ts.samples),
    )


def metadata_request(*families: tuple[str, int, str, str]) -> bytes:
    return encode(
        write_request(
            [],
            metadata=[
                MM(metric_family_name=name, type=kind, help=help_text, unit=unit)  # type: ignore[arg-type]
                for name, kind, help_text, unit in families
            ],
        )
    )


def samples_request(step: int, n: int = 5, value: float | bytes = 1.0) -> bytes:
    return encode(
        write_request(
            [
                Series((("__name__", "gpu_util"), ("i", str(i))), ((1_000 + step, value),))
                for i in range(n)
            ]
        )
    )


def config(url: str, *, name: str = "rw2", extra: str = "") -> str:
    return f"""
remote_write:
  - name: {name}
    url: {url}
    protobuf_message: io.prometheus.write.v2.Request
    queue_config: {{batch_send_deadline: 5ms, max_shards: 2{extra}}}
"""


async def test_rw2_destination_gets_rw2_with_metadata_and_bit_exact_values(
    start_router: StartRouter,
    serve: Serve,  # noqa: F811  (the fixture imported above)
    http: aiohttp.ClientSession,
) -> None:
    sink = Sink()
    router = await start_router(config(await serve(sink.handle)))
    meta = metadata_request(("gpu_util", MM.GAUGE, "GPU utilization.", "percent"))
    assert (await post_write(http, router, meta))[0] == 204
    assert (await post_write(http, router, samples_request(0, value=STALE_NAN)))[0] == 204
    assert (await post_write(http, router, samples_request(1, value=0.5)))[0] == 204
    await eventually(lambda: len(sink.samples()) == 10)
    assert {m for m, _ in sink.requests} == {RW2_MESSAGE}
    assert sink.metadata_requests == []  # RW 2.0: metadata inside the series only
    got = [f for _, frames_ in sink.requests for f in frames_]
    assert {f.metadata for f in got} == {(2, "GPU utilization.", "percent")}
    values = sorted((f.samples[0][1:9], dict(f.labels)["i"]) for f in got)  # Sample.value bytes
    assert [v for v, _ in values] == [struct.pack("<d", 0.5)] * 5 + [STALE_NAN] * 5
    assert (
        metric_value(
            router, "rwrouter_destination_protocol", destination="rw2", protobuf_message=RW2_MESSAGE
        )
        == 1
    )
    assert metric_value(router, "rwrouter_sent_samples_total", destination="rw2") == 10


async def test_415_destination_gets_everything_as_rw1(
    start_router: StartRouter,
    serve: Serve,  # noqa: F811  (the fixture imported above)
    http: aiohttp.ClientSession,
) -> None:
    sink = Sink(rw2=False)
    router = await start_router(config(await serve(sink.handle)))
    meta = metadata_request(("gpu_util", MM.GAUGE, "GPU utilization.", ""))
    assert (await post_write(http, router, meta))[0] == 204
    for step in range(20):
        assert (await post_write(http, router, samples_request(step)))[0] == 204
    await eventually(lambda: len(sink.samples(RW1_MESSAGE)) == 100)
    assert sorted(sink.samples()) == sorted(
        (str(i), RW1_MESSAGE) for i in range(5) for _ in range(20)
    )
    assert (
        metric_value(router, "rwrouter_protocol_fallbacks_total", destination="rw2", reason="415")
        == 1
    )
    assert (
        metric_value(
            router, "rwrouter_destination_protocol", destination="rw2", protobuf_message=RW1_MESSAGE
        )
        == 1
    )
    assert (
        metric_value(
            router, "rwrouter_destination_protocol", destination="rw2", protobuf_message=RW2_MESSAGE
        )
        == 0
    )
    assert (
        metric_value(router, "rwrouter_samples_dropped_total", destination="rw2", reason="4xx") == 0
    )
    await eventually(lambda: ["gpu_util"] in sink.metadata_requests)  # the book, as RW 1.0
    # What comes from now on: a changed entry at once (an identical one within half of
    # metadata_config.send_interval would not be sent again).
    changed = metadata_request(("gpu_util", MM.GAUGE, "GPU utilization, percent.", ""))
    assert (await post_write(http, router, changed))[0] == 204
    await eventually(lambda: sink.metadata_requests.count(["gpu_util"]) == 2)


async def test_reload_tries_rw2_again(
    start_from_file: Start,
    serve: Serve,  # noqa: F811  (the fixture imported above)
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    sink = Sink(rw2=False)
    path = tmp_path / "rwrouter.yaml"
    path.write_text(f"storage: {{path: {tmp_path / 'data'}}}\n" + config(await serve(sink.handle)))
    router = await start_from_file(path)
    assert (await post_write(http, router, samples_request(0)))[0] == 204
    await eventually(lambda: len(sink.samples(RW1_MESSAGE)) == 5)
    sink.rw2 = True  # the destination is upgraded
    async with http.post(router.url + "/-/reload") as resp:
        assert resp.status == 200 and "kept rw2" in await resp.text()
    assert (await post_write(http, router, samples_request(1)))[0] == 204
    await eventually(lambda: len(sink.samples(RW2_MESSAGE)) == 5)
    assert (
        metric_value(
            router, "rwrouter_destination_protocol", destination="rw2", protobuf_message=RW2_MESSAGE
        )
        == 1
    )
    assert len(sink.samples()) == 10


ACCESS_KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.fixture
async def double() -> AsyncIterator[WorkspaceDouble]:
    ws = WorkspaceDouble(credentials={ACCESS_KEY: Key(SECRET)})
    await ws.start()
    yield ws
    await ws.stop()


async def test_sigv4_rw2_to_an_rw1_only_workspace_falls_back_signed(
    start_router: StartRouter, double: WorkspaceDouble, http: aiohttp.ClientSession
) -> None:
    """The workspace double answers 415 to remote write 2.0, as the managed workspace does
    (RW 1.0 only). The router sends the same data again as RW 1.0, from then on; every
    request carries a valid signature."""
    sigv4 = f"{{region: us-east-1, access_key: {ACCESS_KEY}, secret_key: '{SECRET}'}}"
    router = await start_router(
        config(double.url("ws-1"), name="workspace") + f"    sigv4: {sigv4}\n"
    )
    for step in range(3):
        assert (await post_write(http, router, samples_request(step)))[0] == 204
    await eventually(lambda: double.sample_count("ws-1") == 15)
    assert double.verified_signatures == len(double.requests)
    assert double.rejections == {"unsupported_media_type": 1}  # the first request only
    assert (
        metric_value(
            router, "rwrouter_protocol_fallbacks_total", destination="workspace", reason="415"
        )
        == 1
    )
    signed = [r.signed_headers for r in double.requests]
    assert all("content-type" in s and "x-prometheus-remote-write-version" in s for s in signed)


async def test_flagged_records_reach_an_rw1_destination_without_start_timestamps(
    serve: Serve,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    """Records flagged FLAG_START_TIMESTAMPS (the receive side sets it for RW 2.0 requests
    with start timestamps) are stripped for RW 1.0; the stripped ones are counted."""
    sink = Sink()
    url = await serve(sink.handle)
    dest_config = parse_config(
        f"remote_write: [{{name: v1, url: '{url}', queue_config: {{batch_send_deadline: 5ms}}}}]",
        env={},
    ).remote_write[0]
    metrics = Metrics()
    dest = make_destination(
        dest_config,
        storage=StorageConfig(path=str(tmp_path)),
        transport=Transport(url=url, timeout=10),
        auth=NoAuth(),
        metrics=metrics,
    )
    await dest.start()
    try:
        given = [
            Frame(
                (("__name__", "c"), ("i", str(i))),
                (
                    write_v2_pb2.Sample(
                        value=1.0, timestamp=2_000, start_timestamp=1_000
                    ).SerializeToString(),
                ),
            )
            for i in range(4)
        ]
        routed = Router(global_rules=(), routes=[Route(name="v1")]).route(frames(given))
        share = encode_share(
            routed.shares[0],
            received_ms=0,
            max_body_bytes=dest.max_request_bytes,
            flags=FLAG_START_TIMESTAMPS,
        )
        dest.reserve(share.nbytes)
        await dest.append(share)
        await eventually(lambda: len(sink.samples()) == 4)
        sent = [f.samples[0] for _, got in sink.requests for f in got]
        assert sent == [write_v2_pb2.Sample(value=1.0, timestamp=2_000).SerializeToString()] * 4
        assert (
            metrics.registry.get_sample_value(
                "rwrouter_start_timestamps_dropped_total", {"destination": "v1"}
            )
            == 4
        )
    finally:
        await dest.stop(timeout=2)


@pytest.mark.parametrize("case", [str.upper, str.lower, str], ids=["upper", "lower", "as_is"])
async def test_written_headers_read_whatever_their_case(
    serve: Serve,  # noqa: F811  (the fixture imported above)
    case: object,
) -> None:
    """HTTP header names are case-insensitive (HTTP/2 lower-cases them): the transport's
    answer keeps them so, for Written.parse."""
    names = Written(3, 1, 2).headers()

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=204, headers={case(k): v for k, v in names.items()})  # type: ignore[operator]

    transport = Transport(url=await serve(answer), timeout=5)
    await transport.start()
    try:
        got = await transport.post(b"", {})
    finally:
        await transport.close()
    assert Written.parse(got.headers) == Written(3, 1, 2)
