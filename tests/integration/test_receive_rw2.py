"""Remote write 2.0 in over HTTP: negotiated on the same endpoints by Content-Type, converted
to the RW1 form, routed and enqueued as RW 1.0 is (RW 2.0 spec 2.0-rc.4; Prometheus
storage/remote/write_handler.go for what a receiver refuses and answers).

Every answer to an RW 2.0 request carries the three Written headers (exact counts on 204,
zeros otherwise); RW 1.0 answers carry none. Bad input is a 400 with a one-line reason, and the
next request is served normally.
"""

from __future__ import annotations

import random

import aiohttp
import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.protocol import RW2_MESSAGE, WRITTEN_HEADERS, Written
from rwrouter.queue.records import FLAG_START_TIMESTAMPS, HEADER, decode_record
from rwrouter.server.runner import RouterServer
from rwrouter.wire import remote_pb2, types_pb2, write_v2_pb2
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.prometheus import free_port
from tests.support.rw2 import HEADERS_V2, encode_v2, symbolize
from tests.support.series import Series, build_body, write_request

ROUTER = """
remote_write:
  - name: gpu
    url: {url}/gpu
    queue_config: {{batch_send_deadline: 20ms, max_shards: 1}}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "DCGM_.*", action: keep}}
      - {{target_label: cluster, replacement: c1}}
  - name: rest
    url: {url}/rest
    fallback: true
    queue_config: {{batch_send_deadline: 20ms, max_shards: 1}}
server:
  max_request_bytes: 64KiB
  max_decoded_bytes: 256KiB
"""

T0 = 1_700_000_000_000  # ms since the epoch
SERIES = [
    *(
        Series(
            (("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", str(g)), ("job", "dcgm")),
            ((T0, float(g)),),
        )
        for g in range(4)
    ),
    Series((("__name__", "node_load1"), ("instance", "n1")), ((T0, 0.5), (T0 + 15_000, 0.7))),
]
METADATA = {"DCGM_FI_DEV_GPU_UTIL": (2, "GPU utilization (in %).", "percent")}


def rw2_request(series: list[Series] = SERIES) -> write_v2_pb2.Request:
    """``series`` as Prometheus's RW 2.0 sender writes them, with the GPU metric's metadata,
    one exemplar and one native histogram on the first series."""
    request = symbolize(write_request(series), metadata=METADATA)
    request.symbols.extend(["trace_id", "4bf92f3577b34da6"])
    first = request.timeseries[0]
    trace = [len(request.symbols) - 2, len(request.symbols) - 1]
    first.exemplars.add(labels_refs=trace, value=1.0, timestamp=T0)
    first.histograms.add(
        count_int=2,
        sum=1.0,
        timestamp=T0,
        schema=0,
        positive_spans=[write_v2_pb2.BucketSpan(offset=0, length=1)],
        positive_deltas=[2],
    )
    return request


@pytest.fixture
async def router(start_router: StartRouter, fresh_capture: CaptureServer) -> RouterServer:
    return await start_router(ROUTER.format(url=fresh_capture.url("").rstrip("/")))


def written_of(headers: dict[str, str]) -> Written | None:
    return Written.parse({k.lower(): v for k, v in headers.items()})


async def test_rw2_request_is_accepted_with_exact_written_counts(
    router: RouterServer, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    status, text, headers = await post_write(
        http, router, encode_v2(rw2_request()), headers=HEADERS_V2
    )
    assert status == 204, text
    assert written_of(headers) == Written(samples=6, histograms=1, exemplars=1)
    await eventually(
        lambda: fresh_capture.sample_count("/gpu") == 4 and fresh_capture.sample_count("/rest") == 2
    )
    gpu = fresh_capture.requests("/gpu")
    assert all(dict(ts)["cluster"] == "c1" for ts in fresh_capture.label_sets("/gpu"))
    first = next(ts for r in gpu if r.request for ts in r.request.timeseries)
    assert [(e.labels[0].name, e.labels[0].value) for e in first.exemplars] == [
        ("trace_id", "4bf92f3577b34da6")
    ]
    assert [h.count_int for h in first.histograms] == [2]
    await eventually(
        lambda: any(
            m.metric_family_name == "DCGM_FI_DEV_GPU_UTIL" for m in fresh_capture.metadata("/gpu")
        )
    )
    meta = fresh_capture.metadata("/gpu")[0]
    assert (meta.type, meta.help, meta.unit) == (
        types_pb2.MetricMetadata.GAUGE,
        "GPU utilization (in %).",
        "percent",
    )
    assert metric_value(router, "rwrouter_received_protocol_requests_total", protocol="2.0") == 1
    assert metric_value(router, "rwrouter_received_samples_total") == 8
    assert metric_value(router, "rwrouter_received_metadata_total") == 1


async def test_rw1_answers_carry_no_written_headers(
    router: RouterServer, http: aiohttp.ClientSession
) -> None:
    status, _, headers = await post_write(http, router, build_body(SERIES))
    assert status == 204
    assert not {h.lower() for h in WRITTEN_HEADERS} & {h.lower() for h in headers}
    assert metric_value(router, "rwrouter_received_protocol_requests_total", protocol="1.0") == 1


def _v2(data: bytes) -> bytes:
    return bytes(snappy.compress(data))


SYMS = b"\x22\x00\x22\x08__name__\x22\x02up"  # symbols "", "__name__", "up"
SAMPLE = b"\x12\x0b\x09" + b"\x00" * 8 + b"\x10\x01"
BAD_UTF8 = b"\x22\x00\x22\x08__name__\x22\x02\xc3\x28"

# (id, headers, body, status, reason fragment, Written headers expected)
REFUSED = [
    (
        "ref_outside_the_symbols_table",
        HEADERS_V2,
        _v2(SYMS + b"\x2a\x04\x0a\x02\x01\x07"),
        400,
        "timeseries[0]: label ref 7 is outside the symbols table (size 3)",
        True,
    ),
    (
        "odd_refs_count",
        HEADERS_V2,
        _v2(SYMS + b"\x2a\x03\x0a\x01\x01"),
        400,
        "odd number of labels_refs",
        True,
    ),
    (
        "symbols_0_not_empty",
        HEADERS_V2,
        _v2(b"\x22\x01x" + b"\x2a\x00"),
        400,
        "symbols[0] must be the empty string",
        True,
    ),
    (
        "invalid_utf8",
        HEADERS_V2,
        _v2(BAD_UTF8 + b"\x2a\x11\x0a\x02\x01\x02" + SAMPLE),
        400,
        "invalid UTF-8",
        True,
    ),
    ("bad_framing", HEADERS_V2, _v2(SYMS + b"\x2a\x09\x0a\x02"), 400, "runs past the end", True),
    ("not_snappy", HEADERS_V2, b"\x0a\x01\x02\x03", 400, "snappy", True),
    (
        "labels_written_out_too_large",
        HEADERS_V2,
        _v2(
            b"\x22\x00\x22\x08__name__\x22\x80\x20"
            + b"x" * 4096
            + b"\x2a\x83\x01\x0a\x80\x01"
            + b"\x01\x02" * 64
        ),
        413,
        "written out",
        True,
    ),
    (
        "unknown_proto",
        {**HEADERS_V2, "Content-Type": "application/x-protobuf;proto=x.Y"},
        _v2(SYMS),
        415,
        "unsupported protobuf message 'x.Y'",
        False,
    ),
    (
        "rw2_with_gzip",
        {**HEADERS_V2, "Content-Encoding": "gzip"},
        _v2(SYMS),
        415,
        "Content-Encoding",
        True,
    ),
]


@pytest.mark.parametrize(
    ("headers", "body", "status", "reason", "zeros"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
async def test_bad_rw2_request_is_4xx_with_zeros_and_the_next_one_works(
    router: RouterServer,
    http: aiohttp.ClientSession,
    headers: dict[str, str],
    body: bytes,
    status: int,
    reason: str,
    zeros: bool,
) -> None:
    got, text, answer = await post_write(http, router, body, headers=headers)
    assert got == status, text
    assert reason in text
    assert text.count("\n") == 1 and text.strip()
    assert written_of(answer) == (Written() if zeros else None)
    got_next, _, answer = await post_write(
        http, router, encode_v2(rw2_request()), headers=HEADERS_V2
    )
    assert got_next == 204
    assert written_of(answer) == Written(samples=6, histograms=1, exemplars=1)


async def test_queue_full_answer_carries_zeros(
    start_router: StartRouter, http: aiohttp.ClientSession
) -> None:
    """A destination that is down fills its small queue: the 503 answers (nothing kept, the
    sender retries) carry zeros, the 204 ones the counts."""
    dead = f"http://127.0.0.1:{free_port()}/write"
    queue = "queue_config: {max_disk_bytes: 16KiB}"
    router = await start_router(f"remote_write:\n  - {{name: down, url: '{dead}', {queue}}}\n")
    noise = random.Random(3)  # queue records are compressed: values must not compress away
    answers = []
    for _ in range(60):
        series = [
            Series(
                (("__name__", "m"), ("i", str(i)), ("pad", noise.randbytes(30).hex())),
                ((1_000, 1.0),),
            )
            for i in range(10)
        ]
        status, _, headers = await post_write(
            http, router, encode_v2(rw2_request(series)), headers=HEADERS_V2
        )
        answers.append((status, written_of(headers)))
        if status == 503:
            break
    assert answers[-1] == (503, Written()), answers
    assert answers[0] == (204, Written(10, 1, 1))
    assert {w for s, w in answers if s == 204} == {Written(10, 1, 1)}


async def test_start_timestamps_flag_the_queue_records(router: RouterServer) -> None:
    """A request with a start timestamp (here in a series only one destination gets) flags
    every queue record made of it: an RW 1.0 sender strips them."""
    request = rw2_request()
    request.timeseries[4].samples[0].start_timestamp = 1_699_999_000_000
    assert router.fanout is not None
    for body, flagged in ((encode_v2(rw2_request()), False), (encode_v2(request), True)):
        decoded = router.fanout.decode(body, max_decoded_bytes=1 << 20, message=RW2_MESSAGE)
        records = [r for share in decoded.shares for r in share.records]
        assert records
        for record in records:
            block = decode_record(record[HEADER.size :])
            assert bool(block.flags & FLAG_START_TIMESTAMPS) is flagged  # the request's


# -- the same series by either protocol ---------------------------------------------------------


async def test_rw1_and_rw2_route_identically(
    start_router: StartRouter, capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    """The same series, one router sent RW 1.0, another RW 2.0: the same bytes arrive at each
    destination, and the routing caches hold the same outcomes, one a series (under other
    digests: an RW 2.0 series' is folded from its label pairs' hashes)."""
    capture.clear()
    tensor = (("__name__", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), ("gpu", "0"), ("pod", "train-1"))
    series = [*SERIES, Series(tensor, ((T0, 0.25),))]
    routers = {}
    for proto in ("v1", "v2"):
        url = capture.url(proto).rstrip("/")
        routers[proto] = await start_router(ROUTER.format(url=url))
    rw1 = write_request(series)
    status1, _, _ = await post_write(http, routers["v1"], build_body(series))
    status2, _, _ = await post_write(
        http, routers["v2"], encode_v2(symbolize(rw1)), headers=HEADERS_V2
    )
    assert (status1, status2) == (204, 204)
    for dest, samples in (("gpu", 5), ("rest", 2)):

        def arrived(d: str = dest, n: int = samples) -> bool:
            return capture.sample_count(f"/v1/{d}") == n and capture.sample_count(f"/v2/{d}") == n

        await eventually(arrived)
        bodies = {
            proto: [r.raw for r in capture.requests(f"/{proto}/{dest}")] for proto in ("v1", "v2")
        }
        assert bodies["v1"] == bodies["v2"]
    caches = []
    for proto in ("v1", "v2"):
        fanout = routers[proto].fanout
        assert fanout is not None
        caches.append(sorted(entry for _, entry in fanout.router._young.items()))
    assert caches[0] == caches[1] and len(caches[0]) == len(series)


def test_generated_rw1_and_rw2_requests_parse() -> None:
    """The test bodies are what their protobuf modules say (a guard for the helpers)."""
    parsed = write_v2_pb2.Request.FromString(bytes(snappy.decompress(encode_v2(rw2_request()))))
    assert parsed.symbols[0] == "" and len(parsed.timeseries) == len(SERIES)
    assert remote_pb2.WriteRequest.FromString(write_request(SERIES).SerializeToString())
