"""A destination's protocol around the Deliverer: records' flags carried to the batches
(rwrouter.send.batching), and metadata per protocol (rwrouter.pipeline.destination):
RW 1.0 metadata requests as before, the RW 2.0 metadata book (``metadata_config.send``
ignored, as Prometheus does), the book's entries queued once after a fallback, and a reload
trying RW 2.0 again. No sockets: the destinations are not started."""

from __future__ import annotations

from pathlib import Path

import pytest

from rwrouter.auth.schemes import NoAuth
from rwrouter.config import StorageConfig, parse_config
from rwrouter.metrics import Metrics
from rwrouter.pipeline.build import make_destination
from rwrouter.pipeline.destination import Destination
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE
from rwrouter.queue.records import FLAG_START_TIMESTAMPS
from rwrouter.reasons import FallbackReason
from rwrouter.send.batching import Batch, Chunk, Owner, ShardBuffer, chunks_by_shard, reshard
from rwrouter.send.metabook import parse_entry
from rwrouter.wire import frame_metadata, types_pb2
from tests.support.clients import FakeClient
from tests.support.frames import pack_frames
from tests.support.rw2_frames import Frame, frame_bytes

FRAMES = [frame_bytes(Frame((("__name__", "m"), ("i", str(i))), (b"\x10\x01",))) for i in range(8)]


def flagged_chunk() -> Chunk:
    frames = pack_frames(FRAMES, [f[-6:] for f in FRAMES], [1] * len(FRAMES))
    return Chunk(frames.body, frames.index, 8, 8, Owner(), flags=FLAG_START_TIMESTAMPS)


def test_flags_follow_the_frames_of_a_record() -> None:
    chunk = flagged_chunk()
    head, rest = chunk.split(max_samples=3, max_bytes=1 << 20)
    assert rest is not None and head.flags == rest.flags == FLAG_START_TIMESTAMPS
    parts = [p for p in chunks_by_shard(chunk, 3) if p is not None]
    assert len(parts) > 1 and all(p.flags == FLAG_START_TIMESTAMPS for p in parts)
    buf = ShardBuffer()
    buf.add(chunk, now=0.0)
    moved = [c for b in reshard([buf], 2) for c in b.chunks]
    assert moved and all(c.flags == FLAG_START_TIMESTAMPS for c in moved)
    plain = Chunk(chunk.body, chunk.index, 8, 8, Owner())
    assert Batch([plain, chunk], 16, 2 * chunk.nbytes).start_timestamps
    assert not Batch([plain], 8, plain.nbytes).start_timestamps


def entry(family: str, help_text: str = "") -> bytes:
    meta = types_pb2.MetricMetadata(
        type=types_pb2.MetricMetadata.GAUGE, metric_family_name=family, help=help_text
    )
    return frame_metadata(meta.SerializeToString())


def destination(tmp_path: Path, *, message: str, send: bool = True) -> tuple[Destination, Metrics]:
    config = parse_config(
        f"""
remote_write:
  - name: d
    url: http://127.0.0.1:9/api/v1/write
    protobuf_message: {message}
    metadata_config: {{send: {str(send).lower()}}}
""",
        env={},
    ).remote_write[0]
    metrics = Metrics()
    dest = make_destination(
        config,
        storage=StorageConfig(path=str(tmp_path)),
        transport=FakeClient(url=config.url),
        auth=NoAuth(),
        metrics=metrics,
    )
    return dest, metrics


def queued(dest: Destination) -> list[bytes]:
    return [entry for entry, _ in dest._metadata.queued()]


async def test_rw1_destination_queues_metadata_requests(tmp_path: Path) -> None:
    dest, _ = destination(tmp_path, message=RW1_MESSAGE)
    dest.enqueue_metadata([entry("a")])
    assert queued(dest) == [entry("a")]
    assert dest.book is None


@pytest.mark.parametrize("send", [True, False], ids=["send_true", "send_false_ignored"])
async def test_rw2_destination_keeps_metadata_in_its_book(tmp_path: Path, send: bool) -> None:
    dest, _ = destination(tmp_path, message=RW2_MESSAGE, send=send)
    dest.enqueue_metadata([entry("a", "old"), entry("b")])
    dest.enqueue_metadata([entry("a", "new")])
    assert queued(dest) == []  # RW 2.0: never sent alone
    assert dest.book is not None
    assert dest.book.resolve(b"a") == parse_entry(entry("a", "new"))[1]


async def test_after_a_fallback_the_book_is_queued_once_then_what_comes(tmp_path: Path) -> None:
    dest, metrics = destination(tmp_path, message=RW2_MESSAGE)
    dest.enqueue_metadata([entry("a"), entry("b")])
    dest._deliverer._fall_back(FallbackReason.UNSUPPORTED)
    assert dest.protocol == RW1_MESSAGE
    assert queued(dest) == [entry("a"), entry("b")]
    dest.enqueue_metadata([entry("c")])
    assert queued(dest) == [entry("a"), entry("b"), entry("c")]
    assert dest.book is not None and len(dest.book) == 3  # still kept for RW 2.0 again
    dest.try_configured_protocol()  # a reload
    assert dest.protocol == RW2_MESSAGE
    dest.enqueue_metadata([entry("d")])
    assert entry("d") not in queued(dest)
    labels = {"destination": "d", "reason": "415"}
    assert metrics.registry.get_sample_value("rwrouter_protocol_fallbacks_total", labels) == 1


async def test_no_metadata_requests_after_a_fallback_with_send_false(tmp_path: Path) -> None:
    dest, _ = destination(tmp_path, message=RW2_MESSAGE, send=False)
    dest.enqueue_metadata([entry("a")])
    dest._deliverer._fall_back(FallbackReason.NOTHING_WRITTEN)
    dest.enqueue_metadata([entry("b")])
    assert queued(dest) == []


async def test_book_evictions_are_counted(tmp_path: Path) -> None:
    dest, metrics = destination(tmp_path, message=RW2_MESSAGE)
    assert dest.book is not None
    dest.book.max_entries = 2
    dest.enqueue_metadata([entry("a"), entry("b"), entry("c")])
    labels = {"destination": "d", "reason": "book_full"}
    assert metrics.registry.get_sample_value("rwrouter_metadata_dropped_total", labels) == 1


async def test_protocol_gauge(tmp_path: Path) -> None:
    dest, metrics = destination(tmp_path, message=RW2_MESSAGE)
    dest._started = True  # as after start(): the gauges are this destination's
    dest._show_protocol()

    def gauge(message: str) -> float | None:
        return metrics.registry.get_sample_value(
            "rwrouter_destination_protocol", {"destination": "d", "protobuf_message": message}
        )

    assert (gauge(RW2_MESSAGE), gauge(RW1_MESSAGE)) == (1, 0)
    dest._deliverer._fall_back(FallbackReason.UNSUPPORTED)
    assert (gauge(RW2_MESSAGE), gauge(RW1_MESSAGE)) == (0, 1)
    dest.try_configured_protocol()
    assert (gauge(RW2_MESSAGE), gauge(RW1_MESSAGE)) == (1, 0)
    rw1, metrics1 = destination(tmp_path / "rw1", message=RW1_MESSAGE)
    rw1._started = True
    rw1._show_protocol()
    assert (
        metrics1.registry.get_sample_value(
            "rwrouter_destination_protocol", {"destination": "d", "protobuf_message": RW2_MESSAGE}
        )
        is None
    )  # one series for RW 1.0
