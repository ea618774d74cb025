"""The receive side over HTTP: answers to good and bad requests (RW 1.0 spec; issue 2 sec. 2;
remote write 2.0 in: test_receive_rw2.py).

Every bad request gets a 4xx with a one-line reason, never a 5xx, and the next request is
served normally.
"""

from __future__ import annotations

import asyncio
import random
import string
import struct
import time
from pathlib import Path

import aiohttp
import pytest

from rwrouter.server.balance import Board, board_path, create_board
from rwrouter.server.runner import RouterServer
from rwrouter.server.workers import WorkerSpec
from rwrouter.wire import codec
from tests.integration.conftest import (
    StartRouter,
    eventually,
    metric_value,
    post_write,
    router_config,
)
from tests.support.capture import CaptureServer
from tests.support.frames import frame_series
from tests.support.series import HEADERS, Series, build_body, encode, write_request

GOOD = build_body([Series((("__name__", "up"), ("job", "a")), ((1_000, 1.0),))])


def _label_bytes(name: bytes, value: bytes) -> bytes:
    label = b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(value)]) + value
    return b"\x0a" + bytes([len(label)]) + label


def _series_body(*labels: bytes) -> bytes:
    """A snappy body with one series made of raw label fields and one sample."""
    import snappy  # type: ignore[import-untyped,unused-ignore]

    sample = b"\x12\x0b\x09" + b"\x00" * 8 + b"\x10\x01"
    payload = b"".join(labels) + sample
    return bytes(snappy.compress(b"\x0a" + bytes([len(payload)]) + payload))


BAD_REQUESTS = [
    # (id, headers, body, status, reason fragment)
    ("zero_length_body", HEADERS, b"", 400, "empty body"),
    (
        "snappy_framed_format",
        HEADERS,
        bytes.fromhex("ff060000734e61507059") + b"\x00" * 8,
        400,
        "framed",
    ),
    ("corrupt_snappy", HEADERS, b"\x0a\x01\x02\x03", 400, "snappy"),
    ("bad_protobuf", HEADERS, encode(write_request([]))[:1] + b"\x00", 400, ""),
    (
        "not_protobuf",
        HEADERS,
        bytes.fromhex("0a24") + b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 30,
        400,
        "",
    ),
    (
        "invalid_utf8_value",
        HEADERS,
        _series_body(_label_bytes(b"__name__", b"m"), _label_bytes(b"job", b"\x66\xff\xfe")),
        400,
        "UTF-8",
    ),
    (
        "duplicate_label_name",
        HEADERS,
        _series_body(
            _label_bytes(b"__name__", b"m"), _label_bytes(b"job", b"a"), _label_bytes(b"job", b"b")
        ),
        400,
        "duplicate label name",
    ),
    ("declared_size_too_large", HEADERS, bytes.fromhex("ffffffff0f0061"), 413, "declares"),
    ("gzip_encoding", {**HEADERS, "Content-Encoding": "gzip"}, GOOD, 415, "Content-Encoding"),
    (
        "json_content_type",
        {**HEADERS, "Content-Type": "application/json"},
        GOOD,
        415,
        "Content-Type",
    ),
    (
        "unknown_protobuf_message",
        {**HEADERS, "Content-Type": "application/x-protobuf;proto=io.prometheus.write.v3.Request"},
        GOOD,
        415,
        "io.prometheus.write.v3.Request",
    ),
]

ROUTER = """
remote_write:
  - name: all
    url: {url}
    queue_config: {{batch_send_deadline: 20ms, max_shards: 2}}
server:
  max_request_bytes: 64KiB
"""


@pytest.fixture
async def router(start_router: StartRouter, fresh_capture: CaptureServer) -> RouterServer:
    return await start_router(ROUTER.format(url=fresh_capture.url("/all")))


@pytest.mark.parametrize(
    ("headers", "body", "status", "reason"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
async def test_bad_request_is_4xx_with_one_line_reason_and_next_request_works(
    router: RouterServer,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
    headers: dict[str, str],
    body: bytes,
    status: int,
    reason: str,
) -> None:
    got, text, _ = await post_write(http, router, body, headers=headers)
    assert got == status, text
    assert reason in text
    assert text.count("\n") == 1 and text.strip()
    got_next, _, _ = await post_write(http, router, GOOD)
    assert got_next == 204
    await eventually(lambda: fresh_capture.sample_count("/all") >= 1)


async def test_declared_size_over_limit_is_refused_fast(
    router: RouterServer, http: aiohttp.ClientSession
) -> None:
    started = time.perf_counter()
    status, _, _ = await post_write(http, router, bytes.fromhex("ffffffff0f0061"))
    assert status in (400, 413)
    assert time.perf_counter() - started < 0.05


async def test_body_over_max_request_bytes_is_413(
    router: RouterServer, http: aiohttp.ClientSession
) -> None:
    status, text, _ = await post_write(http, router, b"\x00" * (64 * 1024 + 1))
    assert status == 413
    assert "limit" in text


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"], ids=["get", "put", "delete"])
async def test_other_methods_are_405(
    router: RouterServer, http: aiohttp.ClientSession, method: str
) -> None:
    async with http.request(method, router.url + "/api/v1/write") as resp:
        assert resp.status == 405


@pytest.mark.parametrize("path", ["/api/v1/write", "/api/v1/push"], ids=["write", "push"])
async def test_both_paths_accept_remote_write(
    router: RouterServer, http: aiohttp.ClientSession, fresh_capture: CaptureServer, path: str
) -> None:
    status, _, _ = await post_write(http, router, GOOD, path=path)
    assert status == 204
    await eventually(lambda: fresh_capture.sample_count("/all") == 1)


async def test_body_00_is_an_empty_request(
    router: RouterServer, http: aiohttp.ClientSession
) -> None:
    status, _, _ = await post_write(http, router, b"\x00")
    assert status == 204
    assert metric_value(router, "rwrouter_received_requests_total", code="204") == 1


async def test_refusals_are_counted(router: RouterServer, http: aiohttp.ClientSession) -> None:
    await post_write(http, router, b"")
    await post_write(http, router, GOOD, headers={**HEADERS, "Content-Encoding": "zstd"})
    assert metric_value(router, "rwrouter_received_requests_total", code="400") == 1
    assert metric_value(router, "rwrouter_refused_requests_total", reason="decode") == 1
    assert metric_value(router, "rwrouter_refused_requests_total", reason="unsupported") == 1


@pytest.mark.parametrize(
    ("path", "status"),
    [("/-/healthy", 200), ("/-/ready", 200), ("/metrics", 200)],
    ids=["healthy", "ready", "metrics"],
)
async def test_operational_endpoints(
    router: RouterServer, http: aiohttp.ClientSession, path: str, status: int
) -> None:
    async with http.get(router.url + path) as resp:
        assert resp.status == status
        if path == "/metrics":
            assert "rwrouter_build_info" in await resp.text()


SMALL_QUEUE = """
server: {{read_timeout: 300ms}}
remote_write:
  - name: small
    url: {url}
    queue_config:
      capacity: 5
      max_shards: 2
      max_memory_bytes: 4KiB
      max_disk_bytes: 4KiB
      batch_send_deadline: 20ms
"""


@pytest.mark.parametrize(
    ("series", "value_bytes"),
    [(3, 2000), (400, 10)],
    ids=["few_large_series", "many_small_series"],
)
async def test_share_larger_than_a_whole_queue_is_413_not_503_forever(
    start_router: StartRouter,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    series: int,
    value_bytes: int,
) -> None:
    router = await start_router(SMALL_QUEUE.format(url=fresh_capture.url("/small")))
    noise = random.Random(7)  # queue records are compressed: values must not compress away
    body = build_body(
        [
            Series(
                (
                    ("__name__", "m"),
                    ("i", str(i)),
                    ("v", "".join(noise.choices(string.ascii_letters, k=value_bytes))),
                ),
                ((1_000, 1.0),),
            )
            for i in range(series)
        ]
    )
    status, text, _ = await post_write(http, router, body)
    assert status == 413, text
    assert "small" in text and "whole disk queue" in text


async def test_slow_body_gets_408_and_the_next_request_works(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await start_router(SMALL_QUEUE.format(url=fresh_capture.url("/small")))
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    writer.write(
        b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
        b"Content-Encoding: snappy\r\n\r\n" + b"\x00" * 10
    )  # 10 of the 100 bytes announced, then nothing
    await writer.drain()
    started = time.perf_counter()
    answer = await asyncio.wait_for(reader.read(4096), timeout=5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert 0.25 < time.perf_counter() - started < 3
    assert (await post_write(http, router, GOOD))[0] == 204


#: A rule that changes labels: every new label set goes through the (Python) relabel engine,
#: not the compiled loop's shortcut, so a request of many new series takes a while to route.
SLOW_ROUTER = ROUTER.replace(
    "    queue_config:",
    """    write_relabel_configs:
      - {{source_labels: [i], target_label: copy}}
    queue_config:""",
).replace("max_request_bytes: 64KiB", "max_request_bytes: 8MiB")


def many_new_series(count: int) -> bytes:
    """A compressed request of ``count`` distinct series (``m{i="<n>"}``, one sample each):
    decoded size over the large-lane bound, seconds of routing on a cold cache."""
    import snappy

    sample = b"\x12\x0b\x09" + struct.pack("<d", 1.0) + b"\x10\x01"
    frames = (
        frame_series(codec.encode_labels((("__name__", "m"), ("i", str(n)))), sample)
        for n in range(count)
    )
    return bytes(snappy.compress(b"".join(frames)))


async def test_a_huge_request_does_not_freeze_health_probes(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    """Decoding runs in a worker thread: while a request of 150,000 new series is decoded and
    routed, /-/healthy still answers promptly."""
    router = await start_router(SLOW_ROUTER.format(url=fresh_capture.url("/all")))
    huge = many_new_series(150_000)
    write = asyncio.create_task(post_write(http, router, huge))
    await asyncio.sleep(0.1)  # let the decode start
    probes = []
    while not write.done():
        started = time.perf_counter()
        async with http.get(router.url + "/-/healthy") as resp:
            assert resp.status == 200
        probes.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)
    assert (await write)[0] == 204
    assert probes, "the huge request was decoded too fast to probe during it"
    assert max(probes) < 0.5


async def test_ordinary_requests_do_not_queue_behind_a_huge_one(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await start_router(SLOW_ROUTER.format(url=fresh_capture.url("/all")))
    huge = many_new_series(150_000)  # about 4.5 MB decoded: the large lane
    write = asyncio.create_task(post_write(http, router, huge))
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    assert (await post_write(http, router, GOOD))[0] == 204
    ordinary = time.perf_counter() - started
    assert (await write)[0] == 204
    assert ordinary < 0.5


async def test_a_sender_that_gave_up_gets_nothing_enqueued(
    start_router: StartRouter, fresh_capture: CaptureServer
) -> None:
    """A sender whose timeout fired before the answer will send again: keeping its request
    would duplicate it."""
    import snappy

    router = await start_router(
        ROUTER.format(url=fresh_capture.url("/all")).replace(
            "max_request_bytes: 64KiB", "max_request_bytes: 8MiB"
        )
    )
    sample = b"\x12\x0b\x09" + b"\x00" * 8 + b"\x10\x01"
    series = []
    for i in range(400_000):  # distinct label sets: each one a cache miss, so decoding is slow
        label = b"\x0a\x08__name__\x12\x08" + b"m%07d" % i
        payload = b"\x0a" + bytes([len(label)]) + label + sample
        series.append(b"\x0a" + bytes([len(payload)]) + payload)
    body = bytes(snappy.compress(b"".join(series)))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.2)) as impatient:
        with pytest.raises(TimeoutError):
            await post_write(impatient, router, body)
    await eventually(  # decoding 400,000 new series takes seconds on a busy 2-core machine
        lambda: metric_value(router, "rwrouter_refused_requests_total", reason="client_gone") == 1,
        timeout=60.0,
    )
    assert metric_value(router, "rwrouter_received_requests_total", code="204") == 0
    assert fresh_capture.requests("/all") == []


async def _as_worker_0_of_2(tmp_path: Path, capture: CaptureServer, other: int) -> RouterServer:
    """A router started as worker 0 of ``rwrouter run --workers 2`` (no supervisor: its board
    is made here, the other worker's slot saying ``other`` connections)."""
    create_board(board_path(str(tmp_path)), count=2)
    Board(board_path(str(tmp_path)), index=1, count=2).publish(other)
    spec = WorkerSpec(
        index=0, count=2, port=0, runtime_dir=str(tmp_path), ready_fd=-1, lifeline_fd=-1
    )
    config = router_config(ROUTER.format(url=capture.url("/all")), tmp_path / "data")
    router = RouterServer(config, worker=spec)
    await router.start()
    return router


# (name, the other worker's published connections or None without --workers, which answers,
# alternating over two keep-alive connections, say Connection: close, this worker's slot after)
BALANCE_CASES = [
    ("other_worker_idle", 0, [False, True, False, True], 1),
    ("balanced", 2, [False] * 4, 2),
    ("odd_total_within_share", 1, [False] * 4, 2),
    ("without_workers", None, [False] * 4, None),
]


@pytest.mark.parametrize(
    ("other", "closed", "slot"), [c[1:] for c in BALANCE_CASES], ids=[c[0] for c in BALANCE_CASES]
)
async def test_with_workers_a_worker_over_its_share_ends_a_connection(
    router: RouterServer,
    fresh_capture: CaptureServer,
    tmp_path: Path,
    other: int | None,
    closed: list[bool],
    slot: int | None,
) -> None:
    if other is not None:
        router = await _as_worker_0_of_2(tmp_path, fresh_capture, other)
    answers = []
    try:
        async with aiohttp.ClientSession() as first, aiohttp.ClientSession() as second:
            for session in (first, second, first, second):
                async with session.post(
                    router.url + "/api/v1/write", data=GOOD, headers=HEADERS
                ) as resp:
                    assert resp.status == 204
                    answers.append(resp.headers.get("Connection", "").lower() == "close")
            if slot is not None:
                assert metric_value(router, "rwrouter_write_connections") == slot
        assert answers == closed
        if other is not None:
            published = board_path(str(tmp_path)).read_bytes()
            assert struct.unpack("<2Q", published) == (slot, other)
        else:
            assert router.metrics.registry.get_sample_value("rwrouter_write_connections") is None
    finally:
        if other is not None:
            await router.stop(drain_timeout=2)
