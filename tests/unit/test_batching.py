"""Sharding and batching (rwrouter.sending.batching): stable shards, frame-preserving batches
bounded by samples and bytes, owners handed back in order."""

from __future__ import annotations

import pytest

from rwrouter.sending.batching import ShardBuffer, desired_shards, reshard, shard_of
from rwrouter.sending.records import shard_hash
from rwrouter.wire import encode_labels

# ---------------------------------------------------------------------------------------------
# shard_of


def _key(i: int) -> bytes:
    return encode_labels((("__name__", "m"), ("instance", f"host-{i}:9100"), ("job", "node")))


def _hash(i: int) -> int:
    return shard_hash(_key(i))


@pytest.mark.parametrize("shards", [1, 2, 3, 7, 50, 200], ids=lambda n: f"{n}_shards")
def test_shard_of_stable_and_in_range(shards: int) -> None:
    for i in range(500):
        hashed = _hash(i)
        shard = shard_of(hashed, shards)
        assert 0 <= shard < shards
        assert shard_of(shard_hash(bytes(_key(i))), shards) == shard  # equal key, new object


def test_shard_hash_is_stable_across_processes() -> None:
    # crc32 of the encoded labels: a fixed value, so a series keeps its shard after a restart
    # (Python's hash() of bytes is salted per process and would not).
    assert shard_hash(b"") == 0
    assert shard_hash(b"abc") == 0x352441C2
    assert shard_hash(_key(1)) == shard_hash(_key(1)) != shard_hash(_key(2))


SHARD_OF_CASES = [
    # id, shard hash, shards, shard (the hash modulo the shards, as Prometheus does)
    ("zero_hash", 0, 7, 0),
    ("below_shards", 5, 7, 5),
    ("wraps", 15, 7, 1),
    ("largest_crc32", 2**32 - 1, 10, 5),
    ("one_shard", 12345, 1, 0),
]


@pytest.mark.parametrize(
    ("hashed", "shards", "shard"),
    [c[1:] for c in SHARD_OF_CASES],
    ids=[c[0] for c in SHARD_OF_CASES],
)
def test_shard_of_known_values(hashed: int, shards: int, shard: int) -> None:
    assert shard_of(hashed, shards) == shard


@pytest.mark.parametrize("shards", [4, 16, 50], ids=lambda n: f"{n}_shards")
def test_shard_of_distribution_roughly_even(shards: int) -> None:
    per_shard = 400
    counts = [0] * shards
    for i in range(shards * per_shard):
        counts[shard_of(_hash(i), shards)] += 1
    # A uniform hash puts ~400 +- 20 in each; allow a wide margin (no flakes).
    assert min(counts) > per_shard * 0.6
    assert max(counts) < per_shard * 1.4


# ---------------------------------------------------------------------------------------------
# ShardBuffer

BIG = 1 << 30  # a bound that never cuts


def frame(n: int, size: int = 0) -> bytes:
    """A distinct frame; ``size`` pads it to exactly that many bytes."""
    data = f"frame-{n}".encode()
    assert size == 0 or size >= len(data)
    return data.ljust(size, b".")


def filled(counts: list[int], *, now: float = 0.0, sizes: list[int] | None = None) -> ShardBuffer:
    buf = ShardBuffer()
    for i, count in enumerate(counts):
        buf.add(frame(i, sizes[i] if sizes else 0), count, now=now, hashed=i, owner=f"o{i}")
    return buf


def test_empty_buffer() -> None:
    buf = ShardBuffer()
    assert buf.samples == 0 and buf.nbytes == 0 and buf.first_at is None
    assert not buf.ready(max_samples=1, max_bytes=1, deadline=0.0, now=1e9)
    batch = buf.take(max_samples=10, max_bytes=10)
    assert (batch.items, batch.samples, batch.nbytes, batch.owners) == ([], 0, 0, [])


def test_add_counts_samples_and_bytes() -> None:
    buf = ShardBuffer()
    buf.add(b"abc", 2, now=1.0, hashed=7, owner="a")
    buf.add(b"defgh", 3, now=2.0, hashed=9, owner="b")
    assert (buf.samples, buf.nbytes, buf.first_at) == (5, 8, 1.0)
    assert list(buf.frames) == [(b"abc", 2), (b"defgh", 3)]
    assert list(buf.tags) == [(7, "a"), (9, "b")]


TAKE_CASES = [
    # id, counts added, frame sizes, max_samples, max_bytes, frames taken (indexes)
    ("exactly_max_samples", [2, 3, 5], [10, 10, 10], 10, BIG, [0, 1, 2]),
    ("cut_before_overflowing_frame", [4, 4, 4], [10, 10, 10], 10, BIG, [0, 1]),
    ("never_splits_a_frame", [6, 6], [10, 10], 10, BIG, [0]),
    ("oversized_first_frame_taken_alone", [25, 1], [10, 10], 10, BIG, [0]),
    ("oversized_single_frame", [100], [10], 10, BIG, [0]),
    ("under_max_takes_all", [1, 1, 1], [10, 10, 10], 10, BIG, [0, 1, 2]),
    ("max_one_sample", [1, 1, 1], [10, 10, 10], 1, BIG, [0]),
    ("stops_at_first_that_does_not_fit", [5, 6, 1], [10, 10, 10], 10, BIG, [0]),
    ("bytes_exactly_max", [1, 1, 1], [10, 20, 30], BIG, 60, [0, 1, 2]),
    ("bytes_cut_the_batch", [1, 1, 1], [10, 20, 30], BIG, 59, [0, 1]),
    ("bytes_cut_before_samples", [1, 1, 1, 1], [40, 40, 40, 40], 3, 100, [0, 1]),
    ("samples_cut_before_bytes", [1, 1, 1, 1], [40, 40, 40, 40], 2, 1000, [0, 1]),
    ("first_frame_over_max_bytes_alone", [1, 1], [500, 10], BIG, 100, [0]),
    ("bytes_stop_at_first_that_does_not_fit", [1, 1, 1], [50, 60, 10], BIG, 100, [0]),
]


@pytest.mark.parametrize(
    ("counts", "sizes", "max_samples", "max_bytes", "taken"),
    [c[1:] for c in TAKE_CASES],
    ids=[c[0] for c in TAKE_CASES],
)
def test_take(
    counts: list[int], sizes: list[int], max_samples: int, max_bytes: int, taken: list[int]
) -> None:
    buf = filled(counts, sizes=sizes)
    batch = buf.take(max_samples=max_samples, max_bytes=max_bytes)
    assert batch.items == [(frame(i, sizes[i]), counts[i]) for i in taken]
    assert batch.samples == sum(counts[i] for i in taken)
    assert batch.nbytes == sum(sizes[i] for i in taken)
    assert batch.owners == [f"o{i}" for i in taken]
    assert buf.samples == sum(counts) - batch.samples
    assert buf.nbytes == sum(sizes) - batch.nbytes
    left = range(len(taken), len(counts))
    assert [f for f, _ in buf.frames] == [frame(i, sizes[i]) for i in left]
    assert list(buf.tags) == [(i, f"o{i}") for i in left]


DRAIN_CASES = [
    # id, max_samples, max_bytes
    ("by_samples", 10, BIG),
    ("by_bytes", BIG, 64),
    ("by_both", 10, 64),
]


@pytest.mark.parametrize(
    ("max_samples", "max_bytes"), [c[1:] for c in DRAIN_CASES], ids=[c[0] for c in DRAIN_CASES]
)
def test_take_drains_in_order_without_loss(max_samples: int, max_bytes: int) -> None:
    counts = [3, 7, 1, 12, 2, 2, 9, 4]
    sizes = [20, 30, 70, 10, 40, 24, 8, 64]
    buf = filled(counts, sizes=sizes)
    frames: list[bytes] = []
    owners: list[object] = []
    while buf.frames:
        batch = buf.take(max_samples=max_samples, max_bytes=max_bytes)
        assert batch.items
        assert len(batch.items) == 1 or (batch.samples <= max_samples and batch.nbytes <= max_bytes)
        assert len(batch.owners) == len(batch.items)
        frames += [f for f, _ in batch.items]
        owners += batch.owners
    assert frames == [frame(i, sizes[i]) for i in range(len(counts))]
    assert owners == [f"o{i}" for i in range(len(counts))]
    assert buf.samples == 0 and buf.nbytes == 0 and buf.first_at is None
    assert not buf.tags


READY_CASES = [
    # id, counts, frame size, added at, max_samples, max_bytes, deadline, now, ready
    ("below_max_before_deadline", [3], 10, 100.0, 10, 100, 5.0, 104.9, False),
    ("deadline_reached_exactly", [3], 10, 100.0, 10, 100, 5.0, 105.0, True),
    ("deadline_passed", [3], 10, 100.0, 10, 100, 5.0, 200.0, True),
    ("max_samples_reached", [4, 6], 10, 100.0, 10, 100, 5.0, 100.0, True),
    ("over_max_samples", [11], 10, 100.0, 10, 100, 5.0, 100.0, True),
    ("max_bytes_reached", [1, 1], 50, 100.0, 10, 100, 5.0, 100.0, True),
    ("over_max_bytes", [1], 150, 100.0, 10, 100, 5.0, 100.0, True),
    ("one_byte_below_max_bytes", [1, 1], 49, 100.0, 10, 99, 5.0, 100.0, False),
    ("zero_deadline_flush", [1], 10, 100.0, 10, 100, 0.0, 100.0, True),
]


@pytest.mark.parametrize(
    ("counts", "size", "at", "max_samples", "max_bytes", "deadline", "now", "ready"),
    [c[1:] for c in READY_CASES],
    ids=[c[0] for c in READY_CASES],
)
def test_ready(
    counts: list[int], size: int, at: float, max_samples: int, max_bytes: int,
    deadline: float, now: float, ready: bool,
) -> None:  # fmt: skip
    buf = filled(counts, now=at, sizes=[size] * len(counts))
    got = buf.ready(max_samples=max_samples, max_bytes=max_bytes, deadline=deadline, now=now)
    assert got is ready


def test_deadline_counts_from_the_oldest_frame() -> None:
    buf = ShardBuffer()
    buf.add(frame(0), 1, now=10.0)
    buf.add(frame(1), 1, now=14.0)
    assert buf.first_at == 10.0
    assert not buf.ready(max_samples=100, max_bytes=BIG, deadline=5.0, now=14.9)
    assert buf.ready(max_samples=100, max_bytes=BIG, deadline=5.0, now=15.0)


def test_leftover_frames_keep_their_age() -> None:
    buf = ShardBuffer()
    buf.add(frame(0), 6, now=10.0)
    buf.add(frame(1), 6, now=12.0)
    batch = buf.take(max_samples=10, max_bytes=BIG)
    assert batch.items == [(frame(0), 6)]
    # The leftover is not younger than when the batch was cut: it goes out no later.
    assert buf.first_at == 10.0
    assert buf.ready(max_samples=100, max_bytes=BIG, deadline=5.0, now=15.0)
    buf.add(frame(2), 1, now=20.0)
    assert buf.first_at == 10.0


def test_emptied_buffer_restarts_its_clock() -> None:
    buf = ShardBuffer()
    buf.add(frame(0), 1, now=10.0)
    buf.take(max_samples=10, max_bytes=BIG)
    assert buf.first_at is None
    buf.add(frame(1), 1, now=50.0)
    assert buf.first_at == 50.0
    assert not buf.ready(max_samples=10, max_bytes=BIG, deadline=5.0, now=54.0)
    assert buf.ready(max_samples=10, max_bytes=BIG, deadline=5.0, now=55.0)


# ---------------------------------------------------------------------------------------------
# reshard and desired_shards


RESHARD_CASES = [
    # id, old shards, new shards
    ("grow_3_to_7", 3, 7),
    ("shrink_7_to_2", 7, 2),
    ("to_one", 4, 1),
    ("same_count", 5, 5),
]


@pytest.mark.parametrize(
    ("before", "after"), [c[1:] for c in RESHARD_CASES], ids=[c[0] for c in RESHARD_CASES]
)
def test_reshard_keeps_every_frame_per_hash_order_and_owners(before: int, after: int) -> None:
    hashes = [_hash(i) for i in range(30)]
    old = [ShardBuffer() for _ in range(before)]
    for step in range(5):
        for i, hashed in enumerate(hashes):
            old[shard_of(hashed, before)].add(
                f"{i}:{step}".encode(), 1, now=float(step), hashed=hashed, owner=(i, step)
            )
    new = reshard(old, after)
    assert len(new) == after
    assert sum(buf.samples for buf in new) == 150
    assert sum(buf.nbytes for buf in new) == sum(buf.nbytes for buf in old)
    for i, hashed in enumerate(hashes):
        buf = new[shard_of(hashed, after)]
        mine = [
            (f.decode(), tag) for (f, _), tag in zip(buf.frames, buf.tags, strict=True)
            if tag[0] == hashed
        ]  # fmt: skip
        assert mine == [(f"{i}:{step}", (hashed, (i, step))) for step in range(5)]
    for buf in new:
        assert len(buf.tags) == len(buf.frames)
        assert all(shard_of(hashed, after) == new.index(buf) for hashed, _ in buf.tags)
    assert all(buf.first_at == 0.0 for buf in new if buf.frames)


def test_reshard_keeps_the_oldest_arrival_time() -> None:
    young, old_buf = ShardBuffer(), ShardBuffer()
    young.add(b"y", 1, now=50.0, hashed=0)
    old_buf.add(b"o", 1, now=10.0, hashed=2)
    old_buf.add(b"p", 1, now=40.0, hashed=4)
    (merged,) = reshard([young, old_buf], 1)
    assert merged.first_at == 10.0  # the oldest frame moved in sets the deadline
    assert [f for f, _ in merged.frames] == [b"y", b"o", b"p"]


def test_reshard_of_empty_buffers() -> None:
    new = reshard([ShardBuffer(), ShardBuffer()], 4)
    assert [buf.samples for buf in new] == [0, 0, 0, 0]
    assert all(buf.first_at is None and not buf.tags for buf in new)


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


GROUP_CASES = [
    # id, group of each frame in order, frames taken by each take() until empty
    ("one_group", [True, True, True], [[0, 1, 2]]),
    ("recovered_then_new", [True, True, False, False], [[0, 1], [2, 3]]),
    ("alternating", [True, False, True], [[0], [1], [2]]),
    ("new_only", [False, False], [[0, 1]]),
]


@pytest.mark.parametrize(
    ("groups", "batches"), [c[1:] for c in GROUP_CASES], ids=[c[0] for c in GROUP_CASES]
)
def test_take_never_mixes_groups(groups: list[bool], batches: list[list[int]]) -> None:
    buf = ShardBuffer()
    for i, group in enumerate(groups):
        buf.add(frame(i), 1, now=0.0, hashed=i, owner=(i, group))
    taken = []
    while buf.frames:
        batch = buf.take(max_samples=100, max_bytes=1 << 20, group=lambda owner: owner[1])  # type: ignore[index]
        taken.append([i for i, _ in batch.owners])  # type: ignore[misc]
    assert taken == batches


def test_remove_if_takes_out_matching_owners_and_keeps_the_rest_in_order() -> None:
    buf = ShardBuffer()
    for i in range(6):
        buf.add(frame(i), i + 1, now=float(i), hashed=i, owner=i)
    gone = buf.remove_if(lambda owner: owner in (0, 2, 3))  # type: ignore[operator]
    assert gone.owners == [0, 2, 3] and gone.hashes == [0, 2, 3]
    assert gone.samples == 1 + 3 + 4 and gone.nbytes == sum(len(frame(i)) for i in (0, 2, 3))
    assert [owner for _, owner in buf.tags] == [1, 4, 5]
    assert buf.samples == 2 + 5 + 6 and buf.first_at == 0.0
    assert buf.remove_if(lambda owner: True).owners == [1, 4, 5]
    assert buf.samples == 0 and buf.nbytes == 0 and buf.first_at is None


def test_put_back_returns_a_batch_to_the_front_in_order() -> None:
    buf = ShardBuffer()
    for i in range(5):
        buf.add(frame(i), 1, now=10.0, hashed=i, owner=i)
    batch = buf.take(max_samples=3, max_bytes=1 << 20)
    buf.put_back(batch)
    assert [owner for _, owner in buf.tags] == [0, 1, 2, 3, 4]
    assert buf.samples == 5 and buf.nbytes == sum(len(frame(i)) for i in range(5))
    again = buf.take(max_samples=3, max_bytes=1 << 20)
    assert again.owners == [0, 1, 2] and again.items == batch.items
