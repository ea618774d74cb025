"""Sharding and batching (rwrouter.sending.batching): stable shards, frame-preserving batches."""

from __future__ import annotations

import pytest

from rwrouter.sending.batching import ShardBuffer, desired_shards, reshard, shard_of
from rwrouter.wire import encode_labels

# ---------------------------------------------------------------------------------------------
# shard_of


def _key(i: int) -> bytes:
    return encode_labels((("__name__", "m"), ("instance", f"host-{i}:9100"), ("job", "node")))


@pytest.mark.parametrize("shards", [1, 2, 3, 7, 50, 200], ids=lambda n: f"{n}_shards")
def test_shard_of_stable_and_in_range(shards: int) -> None:
    for i in range(500):
        key = _key(i)
        shard = shard_of(key, shards)
        assert 0 <= shard < shards
        assert shard_of(bytes(key), shards) == shard  # equal bytes, another object


@pytest.mark.parametrize("shards", [4, 16, 50], ids=lambda n: f"{n}_shards")
def test_shard_of_distribution_roughly_even(shards: int) -> None:
    per_shard = 400
    counts = [0] * shards
    for i in range(shards * per_shard):
        counts[shard_of(_key(i), shards)] += 1
    # A uniform hash puts ~400 +- 20 in each; allow a wide margin (no flakes).
    assert min(counts) > per_shard * 0.6
    assert max(counts) < per_shard * 1.4


# ---------------------------------------------------------------------------------------------
# ShardBuffer


def frame(n: int) -> bytes:
    return f"frame-{n}".encode()


def filled(counts: list[int], *, now: float = 0.0) -> ShardBuffer:
    buf = ShardBuffer()
    for i, count in enumerate(counts):
        buf.add(frame(i), count, now=now)
    return buf


def test_empty_buffer() -> None:
    buf = ShardBuffer()
    assert buf.samples == 0 and buf.first_at is None
    assert not buf.ready(max_samples=1, deadline=0.0, now=1e9)
    assert buf.take(max_samples=10) == ([], 0, 0)


TAKE_CASES = [
    # id, counts added, max_samples, frames taken (indexes), samples taken
    ("exactly_max", [2, 3, 5], 10, [0, 1, 2], 10),
    ("cut_before_overflowing_frame", [4, 4, 4], 10, [0, 1], 8),
    ("never_splits_a_frame", [6, 6], 10, [0], 6),
    ("oversized_first_frame_taken_alone", [25, 1], 10, [0], 25),
    ("oversized_single_frame", [100], 10, [0], 100),
    ("under_max_takes_all", [1, 1, 1], 10, [0, 1, 2], 3),
    ("max_one", [1, 1, 1], 1, [0], 1),
    ("stops_at_first_that_does_not_fit", [5, 6, 1], 10, [0], 5),
]


@pytest.mark.parametrize(
    ("counts", "max_samples", "taken", "samples"),
    [c[1:] for c in TAKE_CASES],
    ids=[c[0] for c in TAKE_CASES],
)
def test_take(counts: list[int], max_samples: int, taken: list[int], samples: int) -> None:
    buf = filled(counts)
    items, got, _ = buf.take(max_samples=max_samples)
    assert items == [(frame(i), counts[i]) for i in taken]
    assert got == samples
    assert buf.samples == sum(counts) - samples
    assert [f for f, _ in buf.frames] == [frame(i) for i in range(len(taken), len(counts))]


def test_take_drains_in_order_without_loss() -> None:
    counts = [3, 7, 1, 12, 2, 2, 9, 4]
    buf = filled(counts)
    batches: list[list[bytes]] = []
    while buf.frames:
        items, samples, _ = buf.take(max_samples=10)
        assert items and (samples <= 10 or len(items) == 1)
        batches.append([f for f, _ in items])
    assert [f for b in batches for f in b] == [frame(i) for i in range(len(counts))]
    assert buf.samples == 0 and buf.first_at is None


READY_CASES = [
    # id, counts, added at, max_samples, deadline, now, ready
    ("below_max_before_deadline", [3], 100.0, 10, 5.0, 104.9, False),
    ("deadline_reached_exactly", [3], 100.0, 10, 5.0, 105.0, True),
    ("deadline_passed", [3], 100.0, 10, 5.0, 200.0, True),
    ("max_reached", [4, 6], 100.0, 10, 5.0, 100.0, True),
    ("over_max", [11], 100.0, 10, 5.0, 100.0, True),
    ("zero_deadline_flush", [1], 100.0, 10, 0.0, 100.0, True),
]


@pytest.mark.parametrize(
    ("counts", "at", "max_samples", "deadline", "now", "ready"),
    [c[1:] for c in READY_CASES],
    ids=[c[0] for c in READY_CASES],
)
def test_ready(
    counts: list[int], at: float, max_samples: int, deadline: float, now: float, ready: bool
) -> None:
    buf = filled(counts, now=at)
    assert buf.ready(max_samples=max_samples, deadline=deadline, now=now) is ready


def test_deadline_counts_from_the_oldest_frame() -> None:
    buf = ShardBuffer()
    buf.add(frame(0), 1, now=10.0)
    buf.add(frame(1), 1, now=14.0)
    assert buf.first_at == 10.0
    assert not buf.ready(max_samples=100, deadline=5.0, now=14.9)
    assert buf.ready(max_samples=100, deadline=5.0, now=15.0)


def test_leftover_frames_keep_their_age() -> None:
    buf = ShardBuffer()
    buf.add(frame(0), 6, now=10.0)
    buf.add(frame(1), 6, now=12.0)
    items, _, _ = buf.take(max_samples=10)
    assert items == [(frame(0), 6)]
    # The leftover is not younger than when the batch was cut: it goes out no later.
    assert buf.first_at == 10.0
    assert buf.ready(max_samples=100, deadline=5.0, now=15.0)
    buf.add(frame(2), 1, now=20.0)
    assert buf.first_at == 10.0


def test_emptied_buffer_restarts_its_clock() -> None:
    buf = ShardBuffer()
    buf.add(frame(0), 1, now=10.0)
    buf.take(max_samples=10)
    assert buf.first_at is None
    buf.add(frame(1), 1, now=50.0)
    assert buf.first_at == 50.0
    assert not buf.ready(max_samples=10, deadline=5.0, now=54.0)
    assert buf.ready(max_samples=10, deadline=5.0, now=55.0)


# ---------------------------------------------------------------------------------------------
# reshard and desired_shards


def test_reshard_keeps_every_frame_and_per_series_order() -> None:
    keys = [_key(i) for i in range(30)]
    old = [ShardBuffer() for _ in range(3)]
    for step in range(5):
        for i, key in enumerate(keys):
            frame_bytes = f"{i}:{step}".encode()
            old[shard_of(key, 3)].add(frame_bytes, 1, now=float(step), key=key)
    new = reshard(old, 7)
    assert len(new) == 7
    assert sum(buf.samples for buf in new) == 150
    for i, key in enumerate(keys):
        buf = new[shard_of(key, 7)]
        parts = [f.decode().split(":") for f, _ in buf.frames]
        steps = [step for series, step in parts if series == str(i)]
        assert steps == ["0", "1", "2", "3", "4"]
    assert all(buf.first_at == 0.0 for buf in new if buf.frames)
    assert all(len(buf.keys) == len(buf.frames) for buf in new)


def test_reshard_of_empty_buffers() -> None:
    new = reshard([ShardBuffer(), ShardBuffer()], 4)
    assert [buf.samples for buf in new] == [0, 0, 0, 0]
    assert all(buf.first_at is None for buf in new)


SHARD_CASES = [
    # id, current, in samples, out samples, send seconds, pending, expected
    ("no_deliveries_keeps_current", 3, 10_000, 0, 0.0, 50_000, 3),
    ("within_30_percent_keeps_current", 4, 100_000, 100_000, 40.0, 0, 4),
    ("slow_sends_grow", 1, 100_000, 100_000, 30.0, 0, 3),
    ("backlog_grows_more", 1, 100_000, 100_000, 30.0, 1_000_000, 18),
    ("capped_at_max", 1, 10_000_000, 100_000, 100.0, 0, 50),
    ("idle_shrinks_to_min", 20, 1_000, 1_000, 0.01, 0, 2),
]


@pytest.mark.parametrize(
    ("current", "samples_in", "samples_out", "send_seconds", "pending", "expected"),
    [c[1:] for c in SHARD_CASES],
    ids=[c[0] for c in SHARD_CASES],
)
def test_desired_shards(
    current: int, samples_in: int, samples_out: int, send_seconds: float, pending: int,
    expected: int,
) -> None:  # fmt: skip
    got = desired_shards(
        current=current, min_shards=2 if current == 20 else 1, max_shards=50,
        samples_in=samples_in, samples_out=samples_out, send_seconds=send_seconds,
        pending=pending, interval=10.0,
    )  # fmt: skip
    assert got == expected


def test_take_reports_the_key_bytes_it_removes() -> None:
    buf = ShardBuffer()
    buf.add(frame(0), 1, now=0.0, key=b"k" * 7)
    buf.add(frame(1), 1, now=0.0, key=b"k" * 5)
    assert buf.take(max_samples=1)[2] == 7
    assert buf.take(max_samples=1)[2] == 5
