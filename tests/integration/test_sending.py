"""Sending: per-series order across shards, backpressure (503), isolation of a slow destination.

Destinations here are small aiohttp servers in the test's own loop with behaviour the test
needs: random latency and out-of-order rejection (like a real TSDB), or hanging.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rwrouter.auth.schemes import NoAuth
from rwrouter.config import StorageConfig, parse_config
from rwrouter.metrics import Metrics
from rwrouter.pipeline.build import make_destination
from rwrouter.pipeline.destination import Destination
from rwrouter.queue.records import HEADER, META_SIZE, encode_share
from rwrouter.routing import Route, Router
from rwrouter.send.delivery import SPLIT_BUDGET
from rwrouter.send.transport import Transport
from rwrouter.wire import declared_size, remote_pb2, types_pb2
from rwrouter.wire.index import INDEX, Frames
from rwrouter.wire.walk import encode_varint
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import Series, build_body, decode, encode, write_request


class OrderCheckingSink:
    """A destination that answers 400 "out of order sample" like a TSDB when a sample is not
    newer than the last one stored for its series, after a random delay (0-15 ms)."""

    def __init__(self, *, seed: int) -> None:
        self.last: dict[tuple[tuple[str, str], ...], int] = {}
        self.samples = 0
        self.rejected = 0
        self.in_flight: dict[tuple[tuple[str, str], ...], int] = {}
        self.overlaps = 0
        self._rand = random.Random(seed)

    async def handle(self, request: web.Request) -> web.Response:
        request_obj, _ = decode(await request.read())
        series = [tuple((lb.name, lb.value) for lb in ts.labels) for ts in request_obj.timeseries]
        distinct = set(series)  # one batch may carry several samples of a series
        for labels in distinct:
            self.in_flight[labels] = self.in_flight.get(labels, 0) + 1
            self.overlaps += self.in_flight[labels] > 1
        try:
            await asyncio.sleep(self._rand.uniform(0, 0.015))
            for labels, ts in zip(series, request_obj.timeseries, strict=True):
                for sample in ts.samples:
                    if sample.timestamp <= self.last.get(labels, -1):
                        self.rejected += 1
                        return web.Response(status=400, text="out of order sample")
                    self.last[labels] = sample.timestamp
                    self.samples += 1
            return web.Response(status=200)
        finally:
            for labels in distinct:
                self.in_flight[labels] -= 1


async def enqueue(dest: Destination, routed: Frames) -> None:
    """Append routed series to a destination's disk queue, as the fan-out does."""
    share = encode_share(routed, received_ms=0, max_body_bytes=dest.max_request_bytes)
    assert dest.has_room(share.nbytes)
    dest.reserve(share.nbytes)
    await dest.append(share)


Serve = Callable[[Callable[[web.Request], Awaitable[web.StreamResponse]]], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start an aiohttp server on 127.0.0.1 with one POST handler; returns its URL."""
    runners: list[web.AppRunner] = []

    async def start(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/write"

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_per_series_order_holds_with_many_shards(
    start_router: StartRouter, serve: Serve, http: aiohttp.ClientSession
) -> None:
    sink = OrderCheckingSink(seed=7)
    router = await start_router(f"""
remote_write:
  - name: tsdb
    url: {await serve(sink.handle)}
    queue_config:
      {{min_shards: 8, max_shards: 8, max_samples_per_send: 5, batch_send_deadline: 5ms}}
""")
    series = [(("__name__", "gpu_util"), ("gpu", str(g))) for g in range(20)]
    requests = 40
    for step in range(requests):
        body = build_body([Series(labels, ((1_000 + step, float(step)),)) for labels in series])
        assert (await post_write(http, router, body))[0] == 204
    await eventually(lambda: sink.samples == requests * len(series), timeout=20)
    assert sink.rejected == 0
    assert sink.overlaps == 0  # two batches with the same series were never in flight at once
    assert all(last == 1_000 + requests - 1 for last in sink.last.values())


async def test_full_queue_answers_503_with_retry_after_and_enqueues_nothing(
    start_router: StartRouter,
    serve: Serve,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
) -> None:
    """on_full: backpressure. The stuck destination's disk queue fills; then requests get 503
    with Retry-After and nothing of them is kept anywhere; the healthy one keeps flowing."""
    release = asyncio.Event()

    async def stuck(request: web.Request) -> web.Response:
        await request.read()
        await release.wait()
        return web.Response(status=200)

    router = await start_router(f"""
server: {{queue_full_retry_after: 3s}}
remote_write:
  - name: stuck
    url: {await serve(stuck)}
    queue_config:
      {{capacity: 10, max_shards: 1, max_samples_per_send: 10, batch_send_deadline: 5ms,
        max_disk_bytes: 32KiB}}
  - name: healthy
    url: {fresh_capture.url("/healthy")}
    queue_config: {{batch_send_deadline: 5ms}}
""")
    noise = random.Random(3)  # queue records are compressed: values must not compress away

    def body(step: int) -> bytes:
        return build_body(
            [
                Series(
                    (
                        ("__name__", "m"),
                        ("i", str(i)),
                        ("v", "".join(noise.choices("abcdefgh", k=200))),
                    ),
                    ((1_000 + step, 1.0),),
                )
                for i in range(6)
            ]
        )

    accepted = 0
    while True:
        status, text, headers = await post_write(http, router, body(accepted))
        if status != 204:
            break
        accepted += 1
        assert accepted < 200, "the disk queue never filled"
    assert status == 503
    assert headers["Retry-After"] == "3"
    assert "stuck" in text and "healthy" not in text
    await eventually(lambda: fresh_capture.sample_count("/healthy") == 6 * accepted)
    assert (
        metric_value(
            router, "rwrouter_samples_dropped_total", destination="stuck", reason="queue_full"
        )
        == 6
    )
    release.set()
    assert router.fanout is not None
    stuck_queue = router.fanout.destinations[0]
    await eventually(lambda: stuck_queue.queue.unread_records == 0 and stuck_queue.pending == 0)
    assert (await post_write(http, router, body(accepted)))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/healthy") == 6 * (accepted + 1))


async def test_slow_destination_never_delays_another_or_the_receive_side(
    start_router: StartRouter,
    serve: Serve,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
) -> None:
    async def slow(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(30)
        return web.Response(status=200)

    router = await start_router(f"""
remote_write:
  - name: slow
    url: {await serve(slow)}
    remote_timeout: 60s
    queue_config: {{max_shards: 2, batch_send_deadline: 5ms}}
  - name: fast
    url: {fresh_capture.url("/fast")}
    queue_config: {{batch_send_deadline: 5ms}}
""")
    latencies = []
    for step in range(20):
        body = build_body(
            [Series((("__name__", "m"), ("i", str(i))), ((1_000 + step, 1.0),)) for i in range(50)]
        )
        started = time.perf_counter()
        assert (await post_write(http, router, body))[0] == 204
        latencies.append(time.perf_counter() - started)
    await eventually(lambda: fresh_capture.sample_count("/fast") == 20 * 50, timeout=5)
    assert max(latencies) < 0.5


async def test_resharding_under_load_keeps_per_series_order(serve: Serve, tmp_path: Path) -> None:
    """A slow destination makes the destination grow from 1 shard; samples keep their order
    through every resharding (frames re-hashed in order, one batch in flight per series)."""
    sink = OrderCheckingSink(seed=11)
    metrics = Metrics()
    queue = "min_shards: 1, max_shards: 6, max_samples_per_send: 20"
    dest = _sharding_destination(await serve(sink.handle), tmp_path, queue, metrics)
    router = Router(global_rules=(), routes=[Route(name="tsdb")])
    await dest.start()
    shard_counts = set()
    try:
        series = [(("__name__", "gpu_util"), ("gpu", str(g))) for g in range(60)]
        steps = 60
        for step in range(steps):
            body = write_request([Series(labels, ((1_000 + step, 1.0),)) for labels in series])
            routed = router.route(body.SerializeToString())
            await enqueue(dest, routed.shares[0])
            shard_counts.add(dest.shard_count)
            await asyncio.sleep(0.02)
        await eventually(lambda: sink.samples == steps * len(series), timeout=30)
    finally:
        await dest.stop(timeout=5)
    assert max(shard_counts) > 1, "the load never made the destination reshard"
    assert sink.rejected == 0 and sink.overlaps == 0
    assert metric_value(metrics, "rwrouter_sent_samples_total", destination="tsdb") == (
        steps * len(series)
    )


async def enqueue_cut(dest: Destination, routed: Frames, shards: int) -> None:
    """:func:`enqueue`, the share cut for ``shards`` shards as the fan-out cuts it."""
    share = encode_share(
        routed, received_ms=0, max_body_bytes=dest.max_request_bytes, shards=shards
    )
    assert dest.has_room(share.nbytes)
    dest.reserve(share.nbytes)
    await dest.append(share)


def _counting_decompress(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the stored blocks decompressed on the sending side (a record read back split by
    shard, or a chunk's body used): [count]."""
    from rwrouter.queue import records
    from rwrouter.wire import index

    calls = [0]
    for module in (records, index):
        real = module.decompress

        def counted(*args: Any, _real: Any = real, **kwargs: Any) -> bytes:
            calls[0] += 1
            result: bytes = _real(*args, **kwargs)
            return result

        monkeypatch.setattr(module, "decompress", counted)
    return calls


def _sharding_destination(url: str, tmp_path: Path, queue: str, metrics: Metrics) -> Destination:
    """A destination of ``queue`` (queue_config keys, a flow mapping's inside) sending to
    ``url``, resharding every 0.2 s."""
    config = parse_config(
        f"""
remote_write:
  - name: tsdb
    url: {url}
    queue_config:
      {{{queue}, batch_send_deadline: 5ms}}
""",
        env={},
    )
    dest_config = config.remote_write[0]
    return make_destination(
        dest_config,
        storage=StorageConfig(path=str(tmp_path)),
        transport=Transport(url=dest_config.url, timeout=10),
        auth=NoAuth(),
        metrics=metrics,
        reshard_interval=0.2,
    )


async def _send_cut(
    dest: Destination, sink: OrderCheckingSink, *, series: int, steps: int, pause: float
) -> set[int]:
    """``steps`` requests of ``series`` series each (one sample a series, newer each step),
    every share cut for the destination's shard count of the moment, ``pause`` seconds apart;
    waits until the sink holds them all and stops the destination. The counts cut for."""
    router = Router(global_rules=(), routes=[Route(name="tsdb")])
    labels = [(("__name__", "gpu_util"), ("gpu", str(g))) for g in range(series)]
    counts = set()
    await dest.start()
    try:
        for step in range(steps):
            body = write_request([Series(one, ((1_000 + step, 1.0),)) for one in labels])
            counts.add(dest.shard_count)
            routed = router.route(body.SerializeToString())
            await enqueue_cut(dest, routed.shares[0], dest.shard_count)
            await asyncio.sleep(pause)
        await eventually(lambda: sink.samples == steps * series, timeout=60)
    finally:
        await dest.stop(timeout=5)
    return counts


async def test_records_cut_for_the_running_shards_go_out_as_stored(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records cut for the 4 shards that run go to their shard whole: not one stored block is
    decompressed on the way out (with one decompressed, the records would be split again);
    every sample arrives, in order."""
    sink = OrderCheckingSink(seed=5)
    queue = "min_shards: 4, max_shards: 4, max_samples_per_send: 2000"
    dest = _sharding_destination(await serve(sink.handle), tmp_path, queue, Metrics())
    decompressed = _counting_decompress(monkeypatch)
    assert await _send_cut(dest, sink, series=600, steps=6, pause=0) == {4}
    assert sink.rejected == 0 and sink.overlaps == 0
    assert decompressed == [0]


async def test_records_cut_for_other_shard_counts_keep_per_series_order(
    serve: Serve, tmp_path: Path
) -> None:
    """Each request cut for the shard count of the moment while a slow destination reshards
    (records cut for 1, then 2, ... shards, read while another count runs): they are split
    again where the counts differ; samples keep their order through every resharding."""
    sink = OrderCheckingSink(seed=13)
    queue = "min_shards: 1, max_shards: 6, max_samples_per_send: 100"
    dest = _sharding_destination(await serve(sink.handle), tmp_path, queue, Metrics())
    counts = await _send_cut(dest, sink, series=800, steps=40, pause=0.02)
    assert max(counts) > 1, "the load never made the destination reshard"
    assert sink.rejected == 0 and sink.overlaps == 0


class RollbackSink:
    """Like Prometheus's receiver: one bad sample (here: a series named ``poison``) makes it
    roll back the whole request and answer 400."""

    def __init__(self) -> None:
        self.stored: list[tuple[tuple[str, str], ...]] = []
        self.requests = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        decoded, _ = decode(await request.read())
        series = [tuple((lb.name, lb.value) for lb in ts.labels) for ts in decoded.timeseries]
        if any(dict(labels)["__name__"] == "poison" for labels in series):
            return web.Response(status=400, text="out of bounds")
        self.stored.extend(series)
        return web.Response(status=200)


@pytest.mark.parametrize("poison_at", [0, 17, 49], ids=["first", "middle", "last"])
async def test_one_invalid_series_costs_only_itself(
    start_router: StartRouter, serve: Serve, http: aiohttp.ClientSession, poison_at: int
) -> None:
    sink = RollbackSink()
    router = await start_router(f"""
remote_write:
  - name: tsdb
    url: {await serve(sink.handle)}
    queue_config: {{max_shards: 1, max_samples_per_send: 1000, batch_send_deadline: 50ms}}
""")
    names = [f"ok_{i}" for i in range(50)]
    names[poison_at] = "poison"
    # Two requests (as from two senders) end up in one batch.
    for part in (names[:25], names[25:]):
        body = build_body([Series((("__name__", n),), ((1_000, 1.0),)) for n in part])
        assert (await post_write(http, router, body))[0] == 204
    await eventually(  # the two requests may go out in one batch or in two
        lambda: (
            metric_value(router, "rwrouter_samples_dropped_total", destination="tsdb", reason="4xx")
            == 1
            and metric_value(router, "rwrouter_sent_samples_total", destination="tsdb") == 49
        )
    )
    assert sorted(dict(s)["__name__"] for s in sink.stored) == sorted(set(names) - {"poison"})
    assert sink.requests <= 2 + 2 * 7  # one batch (or two), then a bisection: ~2 log2(50)


async def test_splitting_is_bounded_when_everything_is_refused(
    start_router: StartRouter, serve: Serve, http: aiohttp.ClientSession
) -> None:
    requests = []

    async def refuse_all(request: web.Request) -> web.Response:
        requests.append(await request.read())
        return web.Response(status=400, text="bad")

    router = await start_router(f"""
remote_write:
  - name: strict
    url: {await serve(refuse_all)}
    queue_config: {{max_shards: 1, max_samples_per_send: 1000, batch_send_deadline: 20ms}}
""")
    body = build_body([Series((("__name__", f"m{i}"),), ((1_000, 1.0),)) for i in range(300)])
    assert (await post_write(http, router, body))[0] == 204
    await eventually(
        lambda: (
            metric_value(
                router, "rwrouter_samples_dropped_total", destination="strict", reason="4xx"
            )
            == 300
        )
    )
    assert len(requests) <= 1 + SPLIT_BUDGET


async def test_stop_during_a_resharding_blocked_by_a_hanging_destination(
    serve: Serve, tmp_path: Path
) -> None:
    """stop() honours its timeout even while a resharding waits for a sender stuck on a
    destination that never answers, and leaves no sender running afterwards."""
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await request.read()
        await release.wait()
        return web.Response(status=200)

    url = await serve(hang)
    config = parse_config(
        f"remote_write: [{{name: hang, url: '{url}', remote_timeout: 60s,"
        " queue_config: {batch_send_deadline: 5ms}}]",
        env={},
    )
    dest = make_destination(
        config.remote_write[0],
        storage=StorageConfig(path=str(tmp_path)),
        transport=Transport(url=url, timeout=60),
        auth=NoAuth(),
        metrics=Metrics(),
    )
    await dest.start()
    router = Router(global_rules=(), routes=[Route(name="hang")])
    body = write_request(
        [Series((("__name__", "m"), ("i", str(i))), ((1, 1.0),)) for i in range(10)]
    )
    await enqueue(dest, router.route(body.SerializeToString()).shares[0])
    senders = dest._shards
    await eventually(lambda: dest.pending == 10 and not senders.buffers[0].chunks)  # in flight
    resharding = asyncio.create_task(senders.reshard(3))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    left = await dest.stop(timeout=0.3)
    assert time.perf_counter() - started < 2
    assert left == 1  # the one record (10 series) stays on disk for the next start
    assert resharding.done()
    assert all(task.done() for task in senders.tasks)
    release.set()


async def test_metadata_never_holds_back_samples_and_is_bounded_in_memory(
    start_router: StartRouter, serve: Serve, http: aiohttp.ClientSession
) -> None:
    """Metadata lives in memory (Prometheus resends it every minute): over max_memory_bytes
    the oldest entries are dropped and counted, and requests are still accepted."""

    async def unavailable(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=503)

    router = await start_router(f"""
remote_write:
  - name: down
    url: {await serve(unavailable)}
    queue_config: {{max_memory_bytes: 64KiB, min_backoff: 1s, max_backoff: 1s}}
""")

    def body(i: int) -> bytes:  # distinct entries: an identical one is not queued again
        entry = types_pb2.MetricMetadata(metric_family_name="m", help=f"{i}" + "h" * 10_000)
        return encode(remote_pb2.WriteRequest(metadata=[entry]))

    statuses = [(await post_write(http, router, body(i)))[0] for i in range(10)]
    assert statuses == [204] * 10
    dropped = metric_value(
        router, "rwrouter_metadata_dropped_total", destination="down", reason="queue_full"
    )
    assert 3 <= dropped <= 5  # 10 x ~10 KB into 64 KiB (one batch may be in flight)


async def test_drop_oldest_accounts_for_every_acknowledged_sample(
    start_router: StartRouter, serve: Serve, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """on_full: drop_oldest while the destination refuses (503), then a restart: the oldest
    data goes, including what was already read into memory from the dropped segments; every
    acknowledged sample is then either delivered or counted as dropped, never neither."""
    state = {"up": False}
    seen: set[tuple[str, int]] = set()

    async def flaky(request: web.Request) -> web.Response:
        request_obj, _ = decode(await request.read())
        if not state["up"]:
            return web.Response(status=503)
        for ts in request_obj.timeseries:
            name = dict((lb.name, lb.value) for lb in ts.labels)["i"]
            seen.update((name, s.timestamp) for s in ts.samples)
        return web.Response(status=200)

    config = f"""
server: {{shutdown_timeout: 300ms}}
storage: {{path: "{tmp_path / "storage"}"}}
remote_write:
  - name: flaky
    url: {await serve(flaky)}
    queue_config: {{max_disk_bytes: 64KiB, on_full: drop_oldest, capacity: 100, max_shards: 1,
                    max_samples_per_send: 50, batch_send_deadline: 5ms,
                    min_backoff: 20ms, max_backoff: 20ms}}
"""
    router = await start_router(config)
    noise = random.Random(5)
    acknowledged = 0
    for step in range(60):
        body = build_body(
            [
                Series(
                    (
                        ("__name__", "m"),
                        ("i", str(i)),
                        ("v", "".join(noise.choices("abcdef", k=100))),
                    ),
                    ((1_000 + step, 1.0),),
                )
                for i in range(20)
            ]
        )
        assert (await post_write(http, router, body))[0] == 204
        acknowledged += 20
    dropped_before = metric_value(
        router, "rwrouter_samples_dropped_total", destination="flaky", reason="drop_oldest"
    )
    await router.stop()  # still down: what is left stays on disk (or is counted if dropped)
    dropped_at_stop = metric_value(
        router, "rwrouter_samples_dropped_total", destination="flaky", reason="drop_oldest"
    )
    state["up"] = True
    restarted = await start_router(config)
    assert restarted.fanout is not None
    dest = restarted.fanout.destinations[0]
    await eventually(lambda: dest.queue.unread_records == 0 and dest.pending == 0, timeout=20)
    assert dropped_before > 0
    assert len(seen) + dropped_at_stop == acknowledged
    assert max(ts for _, ts in seen) == 1_059  # the newest survived


async def test_a_failing_disk_read_is_retried_not_fatal(
    start_router: StartRouter,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    router = await start_router(f"""
remote_write:
  - name: tsdb
    url: {fresh_capture.url("/tsdb")}
    queue_config: {{batch_send_deadline: 5ms}}
""")
    assert router.fanout is not None
    queue = router.fanout.destinations[0].queue
    real_read = queue.read
    failures = [OSError(24, "Too many open files")]

    def read_once_failing(
        max_bytes: int, max_samples: int | None = None, *, blocking: bool = True
    ) -> list[Any] | None:
        if failures:
            raise failures.pop()
        return real_read(max_bytes, max_samples, blocking=blocking)

    monkeypatch.setattr(queue, "read", read_once_failing)
    for step in range(3):
        body = build_body(
            [Series((("__name__", "m"), ("i", str(i))), ((1_000 + step, 1.0),)) for i in range(5)]
        )
        assert (await post_write(http, router, body))[0] == 204
    await eventually(lambda: fresh_capture.sample_count("/tsdb") == 15, timeout=10)
    assert not failures


def _with_undecodable_body(record: bytes) -> bytes:
    """The record with its snappy block replaced by one that declares the same size but does
    not decompress, and a checksum that matches (damage from before it was written)."""
    rest = record[HEADER.size :]
    series, _, raw_len = struct.unpack_from("<III", rest, META_SIZE - 12)  # series, samples, raw
    index_end = META_SIZE + series * INDEX.size
    bad = rest[:index_end] + encode_varint(raw_len) + b"\xff" * 16
    return HEADER.pack(len(bad), zlib.crc32(bad)) + bad


UNDECODABLE_CASES = [
    # id, queue_config, the damaged record travels spliced with the good one in one request
    ("alone", "{max_samples_per_send: 10, batch_send_deadline: 5ms}", False),
    ("spliced_with_a_good_record", "{max_samples_per_send: 20, batch_send_deadline: 30s}", True),
]


@pytest.mark.parametrize(
    ("queue_config", "spliced"),
    [c[1:] for c in UNDECODABLE_CASES],
    ids=[c[0] for c in UNDECODABLE_CASES],
)
async def test_a_stored_body_that_does_not_decompress_is_skipped_not_retried_for_ever(
    serve: Serve, tmp_path: Path, queue_config: str, spliced: bool
) -> None:
    """With one shard a record is sent as stored (alone, or spliced with the next records),
    never decompressed on the way: when the destination refuses it and it must be split, its
    body does not decompress. It is counted as corrupt and done; the other records are
    delivered."""
    received: list[int] = []
    refused: list[int] = []

    async def strict(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            request_obj, _ = decode(body)
        except Exception:
            refused.append(declared_size(body))
            return web.Response(status=400, text="undecodable")
        received.append(len(request_obj.timeseries))
        return web.Response(status=200)

    config = parse_config(
        f"remote_write:\n  - name: strict\n    url: {await serve(strict)}\n"
        f"    queue_config: {queue_config}\n",
        env={},
    )
    metrics = Metrics()
    dest = make_destination(
        config.remote_write[0],
        storage=StorageConfig(path=str(tmp_path)),
        transport=Transport(url=config.remote_write[0].url, timeout=10),
        auth=NoAuth(),
        metrics=metrics,
    )
    router = Router(global_rules=(), routes=[Route(name="strict")])
    await dest.start()
    sizes: list[int] = []  # decoded bytes of each record
    try:
        for step, damaged in enumerate((True, False)):
            body = write_request(
                [Series((("__name__", "m"), ("i", str(i))), ((step, 1.0),)) for i in range(10)]
            )
            routed = router.route(body.SerializeToString()).shares[0]
            sizes.append(len(routed.body))
            share = encode_share(routed, received_ms=0, max_body_bytes=dest.max_request_bytes)
            if damaged:
                share.records[:] = [_with_undecodable_body(r) for r in share.records]
                share.nbytes = sum(len(r) for r in share.records)
            dest.reserve(share.nbytes)
            await dest.append(share)
        await eventually(lambda: received == [10])
        await eventually(
            lambda: (
                metric_value(
                    metrics,
                    "rwrouter_samples_dropped_total",
                    destination="strict",
                    reason="corrupt",
                )
                == 10
            )
        )
        # the damaged record was refused once (spliced: in one request with the good one)
        assert refused == [sizes[0] + sizes[1] if spliced else sizes[0]]
        await eventually(
            lambda: metric_value(metrics, "rwrouter_sent_samples_total", destination="strict") == 10
        )
    finally:
        await dest.stop(timeout=1)
