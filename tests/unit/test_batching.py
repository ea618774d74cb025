"""Sharding and batching (rwrouter.send.batching): stable shards, chunks of framed series
cut into batches bounded by samples and bytes (a first chunk too large alone is cut, never a
later one), owners handed back in order."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.queue.records import shard_hash
from rwrouter.send.batching import (
    Batch,
    Chunk,
    Owner,
    ShardBuffer,
    chunks_by_shard,
    desired_shards,
    reshard,
)
from rwrouter.wire import encode_labels
from rwrouter.wire.index import INDEX
from tests.support.frames import shard_of

# ---------------------------------------------------------------------------------------------
# The shard of each frame (chunks_by_shard): the shard hash modulo the shards


def _key(i: int) -> bytes:
    return encode_labels((("__name__", "m"), ("instance", f"host-{i}:9100"), ("job", "node")))


def _hash(i: int) -> int:
    return shard_hash(_key(i))


def placement(hashes: list[int], shards: int) -> list[int]:
    """The shard :func:`chunks_by_shard` puts each frame of one record in (frame ``i`` has
    shard hash ``hashes[i]``)."""
    record = chunk_of([(frame(i), 1, hashed) for i, hashed in enumerate(hashes)])
    parts = chunks_by_shard(record, shards)
    assert len(parts) == shards
    where = {row[0]: s for s, part in enumerate(parts) if part is not None for row in flat([part])}
    return [where[frame(i)] for i in range(len(hashes))]


@pytest.mark.parametrize("shards", [1, 2, 3, 7, 50, 200], ids=lambda n: f"{n}_shards")
def test_shard_stable_and_in_range(shards: int) -> None:
    placed = placement([_hash(i) for i in range(500)], shards)
    assert all(0 <= shard < shards for shard in placed)
    again = placement([shard_hash(bytes(_key(i))) for i in range(500)], shards)  # new objects
    assert again == placed


def test_shard_hash_is_stable_across_processes() -> None:
    # crc32 of the encoded labels: a fixed value, so a series keeps its shard after a restart
    # (Python's hash() of bytes is salted per process and would not).
    assert shard_hash(b"") == 0
    assert shard_hash(b"abc") == 0x352441C2
    assert shard_hash(_key(1)) == shard_hash(_key(1)) != shard_hash(_key(2))


SHARD_CASES = [
    # id, shard hash, shards, shard (the hash modulo the shards, as Prometheus does)
    ("zero_hash", 0, 7, 0),
    ("below_shards", 5, 7, 5),
    ("wraps", 15, 7, 1),
    ("largest_crc32", 2**32 - 1, 10, 5),
    ("one_shard", 12345, 1, 0),
]


@pytest.mark.parametrize(
    ("hashed", "shards", "shard"),
    [c[1:] for c in SHARD_CASES],
    ids=[c[0] for c in SHARD_CASES],
)
def test_shard_known_values(hashed: int, shards: int, shard: int) -> None:
    assert placement([hashed], shards) == [shard]


@pytest.mark.parametrize("shards", [4, 16, 50], ids=lambda n: f"{n}_shards")
def test_shard_distribution_roughly_even(shards: int) -> None:
    per_shard = 400
    counts = [0] * shards
    for shard in placement([_hash(i) for i in range(shards * per_shard)], shards):
        counts[shard] += 1
    # A uniform hash puts ~400 +- 20 in each; allow a wide margin (no flakes).
    assert min(counts) > per_shard * 0.6
    assert max(counts) < per_shard * 1.4


# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# Chunks and ShardBuffer

BIG = 1 << 30  # a bound that never cuts

Frame = tuple[bytes, int, int]
"""A framed series as the queue holds it: (frame bytes, samples, shard hash)."""

Row = tuple[bytes, int, int, object]
"""A frame as it travels: (frame bytes, samples, shard hash, owner of its chunk)."""

Spec = list[list[tuple[int, int]]]
"""Chunks to add, in order: per chunk, per frame (samples, frame bytes)."""


def frame(n: int, size: int = 0) -> bytes:
    """A distinct frame; ``size`` pads it to exactly that many bytes."""
    data = f"frame-{n}".encode()
    assert size == 0 or size >= len(data)
    return data.ljust(size, b".")


class Named(Owner):
    """A record owning chunks, told apart by its ``name`` (equal by name)."""

    __slots__ = ("name",)

    def __init__(self, name: object, *, recovered: bool = False) -> None:
        super().__init__(recovered=recovered)
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Named) and other.name == self.name

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Named({self.name!r})"


def name_of(owner: Owner) -> object:
    assert isinstance(owner, Named)
    return owner.name


def owners(batch: Batch) -> list[object]:
    """The name of each chunk's owner, in order."""
    return [name_of(chunk.owner) for chunk in batch.chunks]


def chunk_of(frames: list[Frame], owner: object = None, *, recovered: bool = False) -> Chunk:
    """A chunk holding ``frames`` in order: their bodies joined, one INDEX entry per frame,
    owned by a record named ``owner``."""
    return Chunk(
        body=b"".join(f for f, _, _ in frames),
        index=b"".join(INDEX.pack(len(f), n, hashed) for f, n, hashed in frames),
        samples=sum(n for _, n, _ in frames),
        series=len(frames),
        owner=Named(owner, recovered=recovered),
    )


def drop(buf: ShardBuffer, names: Iterable[object]) -> Batch:
    """Mark the records named ``names`` dropped and remove their chunks from ``buf``."""
    dropped = set(names)
    for chunk in buf.chunks:
        chunk.owner.dropped = name_of(chunk.owner) in dropped
    return buf.remove_dropped()


def flat(chunks: Iterable[Chunk]) -> list[Row]:
    """Every frame of ``chunks`` in order, with its chunk's owner's name; checks that each
    chunk's totals and body agree with its index."""
    rows: list[Row] = []
    for chunk in chunks:
        pos = samples = 0
        for length, count, hashed in INDEX.iter_unpack(chunk.index):
            rows.append((chunk.body[pos : pos + length], count, hashed, name_of(chunk.owner)))
            pos += length
            samples += count
        assert pos == chunk.nbytes == len(chunk.body)
        assert samples == chunk.samples
        assert len(chunk.index) == chunk.series * INDEX.size
    return rows


def filled(spec: Spec, *, now: float = 0.0) -> tuple[ShardBuffer, list[Row]]:
    """A buffer holding the chunks of ``spec`` (frame ``k`` of the whole buffer is
    ``frame(k)`` with shard hash ``k``; chunk ``c`` is owned by ``"o{c}"``), and its rows."""
    buf = ShardBuffer()
    rows: list[Row] = []
    k = 0
    for c, sizes in enumerate(spec):
        frames: list[Frame] = []
        for count, size in sizes:
            frames.append((frame(k, size), count, k))
            k += 1
        buf.add(chunk_of(frames, owner=f"o{c}"), now=now)
        rows += [(f, n, hashed, f"o{c}") for f, n, hashed in frames]
    return buf, rows


def assert_totals(buf: ShardBuffer) -> None:
    assert buf.samples == sum(c.samples for c in buf.chunks)
    assert buf.nbytes == sum(c.nbytes for c in buf.chunks)
    assert (buf.first_at is None) == (not buf.chunks)


def test_chunk_of_builds_body_and_index() -> None:
    frames = [(b"abc", 2, 7), (b"defgh", 3, 2**32 - 1)]
    chunk = chunk_of(frames, owner="r")
    assert chunk.body == b"abcdefgh" and chunk.nbytes == 8
    assert list(INDEX.iter_unpack(chunk.index)) == [(3, 2, 7), (5, 3, 2**32 - 1)]
    assert (chunk.samples, chunk.series, name_of(chunk.owner)) == (5, 2, "r")
    assert chunk.items() == [(b"abc", 2), (b"defgh", 3)]
    assert flat([chunk]) == [(f, n, h, "r") for f, n, h in frames]


def test_empty_buffer() -> None:
    buf = ShardBuffer()
    assert buf.samples == 0 and buf.nbytes == 0 and buf.first_at is None
    assert not buf.ready(max_samples=1, max_bytes=1, deadline=0.0, now=1e9)
    batch = buf.take(max_samples=10, max_bytes=10)
    assert (batch.chunks, batch.samples, batch.nbytes, owners(batch)) == ([], 0, 0, [])
    assert batch.items == [] and batch.raw == b""


ADD_CASES = [
    # id, chunks added (frames: bytes, samples, hash), added at, samples, bytes, first_at
    ("one_single_frame_chunk", [[(b"abc", 2, 7)]], [1.0], 2, 3, 1.0),
    ("two_single_frame_chunks", [[(b"abc", 2, 7)], [(b"defgh", 3, 9)]], [1.0, 2.0], 5, 8, 1.0),
    ("multi_frame_chunk", [[(b"abc", 2, 7), (b"defgh", 3, 9)]], [4.0], 5, 8, 4.0),
    (
        "mixed_chunks",
        [[(b"a", 1, 0), (b"bb", 10, 1), (b"ccc", 100, 2)], [(b"dddd", 1000, 3)]],
        [3.0, 5.0],
        1111,
        10,
        3.0,
    ),
]


@pytest.mark.parametrize(
    ("chunks", "at", "samples", "nbytes", "first_at"),
    [c[1:] for c in ADD_CASES],
    ids=[c[0] for c in ADD_CASES],
)
def test_add_counts_samples_and_bytes(
    chunks: list[list[Frame]], at: list[float], samples: int, nbytes: int, first_at: float
) -> None:
    buf = ShardBuffer()
    added = [chunk_of(frames, owner=f"o{i}") for i, frames in enumerate(chunks)]
    for chunk, now in zip(added, at, strict=True):
        buf.add(chunk, now=now)
    assert (buf.samples, buf.nbytes, buf.first_at) == (samples, nbytes, first_at)
    assert list(buf.chunks) == added
    assert flat(buf.chunks) == [
        (f, n, h, f"o{i}") for i, frames in enumerate(chunks) for f, n, h in frames
    ]


TAKE_CASES = [
    # id, chunks (per frame: samples, bytes), max_samples, max_bytes, frames taken per chunk
    ("exactly_max_samples", [[(2, 10)], [(3, 10)], [(5, 10)]], 10, BIG, [1, 1, 1]),
    ("cut_before_overflowing_chunk", [[(4, 10)], [(4, 10)], [(4, 10)]], 10, BIG, [1, 1]),
    ("never_splits_a_later_chunk", [[(6, 10)], [(6, 10)]], 10, BIG, [1]),
    ("whole_chunks_only", [[(3, 10), (3, 10)], [(3, 10), (3, 10)]], 10, BIG, [2]),
    ("multi_frame_chunks_fit", [[(3, 10), (2, 10)], [(1, 10), (4, 10)]], 10, BIG, [2, 2]),
    ("oversized_single_frame_chunk_goes_whole", [[(25, 10)], [(1, 10)]], 10, BIG, [1]),
    ("oversized_lone_single_frame_chunk", [[(100, 10)]], 10, BIG, [1]),
    ("under_max_takes_all", [[(1, 10)], [(1, 10)], [(1, 10)]], 10, BIG, [1, 1, 1]),
    ("max_one_sample", [[(1, 10)], [(1, 10)], [(1, 10)]], 1, BIG, [1]),
    ("stops_at_first_that_does_not_fit", [[(5, 10)], [(6, 10)], [(1, 10)]], 10, BIG, [1]),
    ("bytes_exactly_max", [[(1, 10)], [(1, 20)], [(1, 30)]], BIG, 60, [1, 1, 1]),
    ("bytes_cut_the_batch", [[(1, 10)], [(1, 20)], [(1, 30)]], BIG, 59, [1, 1]),
    ("bytes_cut_before_samples", [[(1, 40)], [(1, 40)], [(1, 40)], [(1, 40)]], 3, 100, [1, 1]),
    ("samples_cut_before_bytes", [[(1, 40)], [(1, 40)], [(1, 40)], [(1, 40)]], 2, 1000, [1, 1]),
    ("single_frame_chunk_over_max_bytes_goes_whole", [[(1, 500)], [(1, 10)]], BIG, 100, [1]),
    ("bytes_stop_at_first_that_does_not_fit", [[(1, 50)], [(1, 60)], [(1, 10)]], BIG, 100, [1]),
    # A first chunk too large alone is cut: its longest head within both bounds, at least
    # one frame; the rest stays first in the buffer.
    ("cut_first_chunk_over_max_samples", [[(4, 10), (4, 10), (4, 10), (4, 10)]], 10, BIG, [2]),
    ("cut_first_chunk_at_exact_max_samples", [[(5, 10), (5, 10), (5, 10)]], 10, BIG, [2]),
    ("cut_first_chunk_over_max_bytes", [[(1, 40), (1, 40), (1, 40)]], BIG, 100, [2]),
    ("cut_first_chunk_at_exact_max_bytes", [[(1, 30), (1, 70), (1, 10)]], BIG, 100, [2]),
    ("cut_by_bytes_before_samples", [[(1, 40), (1, 40), (1, 40), (1, 40)]], 3, 100, [2]),
    ("cut_by_samples_before_bytes", [[(1, 40), (1, 40), (1, 40), (1, 40)]], 2, 1000, [2]),
    ("cut_first_frame_over_max_samples_goes_alone", [[(25, 10), (1, 10)]], 10, BIG, [1]),
    ("cut_first_frame_over_max_bytes_goes_alone", [[(1, 500), (1, 10)]], BIG, 100, [1]),
    ("cut_ends_the_batch", [[(4, 10), (4, 10), (4, 10)], [(1, 10)]], 10, BIG, [2]),
    ("fitting_first_chunk_is_not_cut", [[(3, 10), (3, 10)], [(4, 10), (4, 10)]], 10, BIG, [2]),
]


@pytest.mark.parametrize(
    ("spec", "max_samples", "max_bytes", "taken"),
    [c[1:] for c in TAKE_CASES],
    ids=[c[0] for c in TAKE_CASES],
)
def test_take(spec: Spec, max_samples: int, max_bytes: int, taken: list[int]) -> None:
    buf, rows = filled(spec)
    batch = buf.take(max_samples=max_samples, max_bytes=max_bytes)
    n = sum(taken)
    assert [chunk.series for chunk in batch.chunks] == taken
    assert flat(batch.chunks) == rows[:n]
    assert owners(batch) == [f"o{c}" for c in range(len(taken))]
    assert batch.samples == sum(r[1] for r in rows[:n])
    assert batch.nbytes == sum(len(r[0]) for r in rows[:n])
    assert flat(buf.chunks) == rows[n:]
    assert buf.samples == sum(r[1] for r in rows[n:])
    assert buf.nbytes == sum(len(r[0]) for r in rows[n:])
    assert buf.first_at == (0.0 if n < len(rows) else None)
    assert_totals(buf)


DRAIN_CASES = [
    # id, max_samples, max_bytes
    ("by_samples", 10, BIG),
    ("by_bytes", BIG, 64),
    ("by_both", 10, 64),
    ("one_sample_each", 1, BIG),
    ("one_byte_each", BIG, 1),
    ("never_cut", BIG, BIG),
]

DRAIN_SPEC: Spec = [
    [(3, 20), (7, 30)],
    [(1, 70)],
    [(12, 10), (2, 40), (2, 24)],
    [(9, 8), (4, 64)],
]


def drain(buf: ShardBuffer, *, max_samples: int, max_bytes: int) -> list[Row]:
    """Take until the buffer is empty: every batch is non-empty and within the bounds, or a
    single frame (one too large alone); returns the rows taken, in order."""
    out: list[Row] = []
    while buf.chunks:
        batch = buf.take(max_samples=max_samples, max_bytes=max_bytes)
        assert batch.chunks
        alone = len(batch.chunks) == 1 and batch.chunks[0].series == 1
        assert alone or (batch.samples <= max_samples and batch.nbytes <= max_bytes)
        assert batch.samples == sum(c.samples for c in batch.chunks)
        assert batch.nbytes == sum(c.nbytes for c in batch.chunks)
        out += flat(batch.chunks)
        assert_totals(buf)
    assert buf.samples == 0 and buf.nbytes == 0 and buf.first_at is None
    return out


@pytest.mark.parametrize(
    ("max_samples", "max_bytes"), [c[1:] for c in DRAIN_CASES], ids=[c[0] for c in DRAIN_CASES]
)
def test_take_drains_in_order_without_loss(max_samples: int, max_bytes: int) -> None:
    buf, rows = filled(DRAIN_SPEC)
    assert drain(buf, max_samples=max_samples, max_bytes=max_bytes) == rows


@settings(max_examples=200, deadline=None)
@given(
    spec=st.lists(
        st.lists(st.tuples(st.integers(1, 20), st.integers(10, 80)), min_size=1, max_size=6),
        max_size=8,
    ),
    max_samples=st.integers(1, 40),
    max_bytes=st.integers(1, 200),
)
def test_take_drains_any_chunks_in_order_without_loss(
    spec: Spec, max_samples: int, max_bytes: int
) -> None:
    buf, rows = filled(spec)
    assert drain(buf, max_samples=max_samples, max_bytes=max_bytes) == rows


READY_CASES = [
    # id, chunks (samples per frame), frame size, added at, max_samples, max_bytes, deadline,
    # now, ready
    ("below_max_before_deadline", [[3]], 10, 100.0, 10, 100, 5.0, 104.9, False),
    ("deadline_reached_exactly", [[3]], 10, 100.0, 10, 100, 5.0, 105.0, True),
    ("deadline_passed", [[3]], 10, 100.0, 10, 100, 5.0, 200.0, True),
    ("max_samples_reached", [[4], [6]], 10, 100.0, 10, 100, 5.0, 100.0, True),
    ("max_samples_reached_in_one_chunk", [[4, 6]], 10, 100.0, 10, 100, 5.0, 100.0, True),
    ("over_max_samples", [[11]], 10, 100.0, 10, 100, 5.0, 100.0, True),
    ("max_bytes_reached", [[1], [1]], 50, 100.0, 10, 100, 5.0, 100.0, True),
    ("max_bytes_reached_in_one_chunk", [[1, 1]], 50, 100.0, 10, 100, 5.0, 100.0, True),
    ("over_max_bytes", [[1]], 150, 100.0, 10, 100, 5.0, 100.0, True),
    ("one_byte_below_max_bytes", [[1], [1]], 49, 100.0, 10, 99, 5.0, 100.0, False),
    ("one_sample_below_max_samples", [[4, 5]], 10, 100.0, 10, 100, 5.0, 100.0, False),
    ("zero_deadline_flush", [[1]], 10, 100.0, 10, 100, 0.0, 100.0, True),
]


@pytest.mark.parametrize(
    ("counts", "size", "at", "max_samples", "max_bytes", "deadline", "now", "ready"),
    [c[1:] for c in READY_CASES],
    ids=[c[0] for c in READY_CASES],
)
def test_ready(
    counts: list[list[int]],
    size: int,
    at: float,
    max_samples: int,
    max_bytes: int,
    deadline: float,
    now: float,
    ready: bool,
) -> None:
    buf, _ = filled([[(n, size) for n in chunk] for chunk in counts], now=at)
    got = buf.ready(max_samples=max_samples, max_bytes=max_bytes, deadline=deadline, now=now)
    assert got is ready


def test_deadline_counts_from_the_oldest_chunk() -> None:
    buf = ShardBuffer()
    buf.add(chunk_of([(frame(0), 1, 0), (frame(1), 1, 1)]), now=10.0)
    buf.add(chunk_of([(frame(2), 1, 2)]), now=14.0)
    assert buf.first_at == 10.0
    assert not buf.ready(max_samples=100, max_bytes=BIG, deadline=5.0, now=14.9)
    assert buf.ready(max_samples=100, max_bytes=BIG, deadline=5.0, now=15.0)


LEFTOVER_CASES = [
    # id, chunks (samples per frame), added at, frames taken
    ("next_chunk_left", [[6], [6]], [10.0, 12.0], 1),
    ("rest_of_a_cut_chunk_left", [[6, 6]], [10.0], 1),
    ("rest_of_a_cut_chunk_and_next_left", [[4, 4, 4], [1]], [10.0, 12.0], 2),
]


@pytest.mark.parametrize(
    ("counts", "at", "taken"), [c[1:] for c in LEFTOVER_CASES], ids=[c[0] for c in LEFTOVER_CASES]
)
def test_leftovers_keep_their_age(counts: list[list[int]], at: list[float], taken: int) -> None:
    buf = ShardBuffer()
    rows: list[Row] = []
    k = 0
    for c, (chunk, now) in enumerate(zip(counts, at, strict=True)):
        frames = [(frame(k + j), n, k + j) for j, n in enumerate(chunk)]
        k += len(chunk)
        buf.add(chunk_of(frames, owner=c), now=now)
        rows += [(f, n, h, c) for f, n, h in frames]
    batch = buf.take(max_samples=10, max_bytes=BIG)
    assert flat(batch.chunks) == rows[:taken]
    assert flat(buf.chunks) == rows[taken:]
    # What is left is not younger than when the batch was cut: it goes out no later.
    assert buf.first_at == 10.0
    assert buf.ready(max_samples=100, max_bytes=BIG, deadline=5.0, now=15.0)
    buf.add(chunk_of([(frame(99), 1, 99)]), now=20.0)
    assert buf.first_at == 10.0


EMPTIED_CASES = [
    # id, how the buffer is emptied
    ("by_take", lambda buf: buf.take(max_samples=10, max_bytes=BIG)),
    ("by_remove_dropped", lambda buf: drop(buf, [None])),
]


@pytest.mark.parametrize("empty", [c[1] for c in EMPTIED_CASES], ids=[c[0] for c in EMPTIED_CASES])
def test_emptied_buffer_restarts_its_clock(empty: Callable[[ShardBuffer], object]) -> None:
    buf = ShardBuffer()
    buf.add(chunk_of([(frame(0), 1, 0), (frame(1), 1, 1)]), now=10.0)
    empty(buf)
    assert not buf.chunks and buf.first_at is None
    buf.add(chunk_of([(frame(2), 1, 2)]), now=50.0)
    assert buf.first_at == 50.0
    assert not buf.ready(max_samples=10, max_bytes=BIG, deadline=5.0, now=54.0)
    assert buf.ready(max_samples=10, max_bytes=BIG, deadline=5.0, now=55.0)


BATCH_CASES = [
    # id, chunks in the batch (frames: bytes, samples, hash)
    ("no_chunks", []),
    ("one_chunk", [[(b"abc", 2, 7), (b"de", 1, 8)]]),
    ("several_chunks", [[(b"abc", 2, 7)], [(b"defgh", 3, 9), (b"ij", 4, 1)], [(b"k", 5, 0)]]),
    ("empty_bodies_join", [[(b"ab", 1, 0)], [], [(b"cd", 2, 1)]]),
]


@pytest.mark.parametrize("chunks", [c[1] for c in BATCH_CASES], ids=[c[0] for c in BATCH_CASES])
def test_batch_raw_and_items(chunks: list[list[Frame]]) -> None:
    parts = [chunk_of(frames, owner=i) for i, frames in enumerate(chunks)]
    batch = Batch(parts, sum(c.samples for c in parts), sum(c.nbytes for c in parts))
    assert batch.raw == b"".join(c.body for c in parts)
    assert batch.items == [(f, n) for frames in chunks for f, n, _ in frames]
    assert owners(batch) == list(range(len(chunks)))


# ---------------------------------------------------------------------------------------------
# chunks_by_shard, reshard and desired_shards


def by_shard_reference(frames: list[Frame], shards: int, owner: object) -> list[Chunk | None]:
    """One frame at a time: each frame to ``shard_of(hash, shards)``, in order."""
    per: list[list[Frame]] = [[] for _ in range(shards)]
    for f in frames:
        per[shard_of(f[2], shards)].append(f)
    return [chunk_of(part, owner) if part else None for part in per]


RECORD = [(frame(i, 10 + i), i % 4 + 1, h) for i, h in enumerate([0, 5, 2**32 - 1, 7, 3, 12, 5])]
REAL = [(frame(i), i + 1, _hash(i)) for i in range(40)]

CHUNKS_BY_SHARD_CASES = [
    # id, frames of the record (bytes, samples, hash), shards
    ("one_shard", RECORD, 1),
    ("one_shard_real_hashes", REAL, 1),
    ("two_shards", RECORD, 2),
    ("three_shards", RECORD, 3),
    ("more_shards_than_frames", RECORD, 50),
    ("all_in_one_of_many", [(frame(i), 1, 4 * i) for i in range(5)], 4),
    ("real_hashes_7_shards", REAL, 7),
    ("empty_record_one_shard", [], 1),
    ("empty_record_many_shards", [], 5),
]


@pytest.mark.parametrize(
    ("frames", "shards"),
    [c[1:] for c in CHUNKS_BY_SHARD_CASES],
    ids=[c[0] for c in CHUNKS_BY_SHARD_CASES],
)
def test_chunks_by_shard(frames: list[Frame], shards: int) -> None:
    record = chunk_of(frames, owner="rec")
    got = chunks_by_shard(record, shards)
    assert len(got) == shards
    if shards == 1:
        assert got == [record]  # the record whole
    else:
        assert got == by_shard_reference(frames, shards, "rec")
    assert sorted(flat(c for c in got if c is not None)) == sorted(flat([record]))


RESHARD_CASES = [
    # id, old shards, new shards
    ("grow_3_to_7", 3, 7),
    ("grow_1_to_4", 1, 4),
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
    for step in range(5):  # one record per step, split by shard as the sending side does
        frames = [(f"{i}:{step}".encode(), i % 3 + 1, h) for i, h in enumerate(hashes)]
        parts = chunks_by_shard(chunk_of(frames, owner=f"r{step}"), before)
        for buf, part in zip(old, parts, strict=True):
            if part is not None:
                buf.add(part, now=float(step))
    before_rows = [flat(buf.chunks) for buf in old]
    new = reshard(old, after)
    assert len(new) == after
    assert sum(buf.samples for buf in new) == 5 * sum(i % 3 + 1 for i in range(30))
    assert sum(buf.nbytes for buf in new) == sum(buf.nbytes for buf in old)
    for s, buf in enumerate(new):
        # The old buffers' frames in their order, those of this shard: nothing lost, moved or
        # reordered, each with its owner.
        expected = [r for rows in before_rows for r in rows if shard_of(r[2], after) == s]
        assert flat(buf.chunks) == expected
        assert_totals(buf)
        if buf.chunks:
            assert buf.first_at == 0.0
    for i, hashed in enumerate(hashes):
        mine = [r for r in flat(new[shard_of(hashed, after)].chunks) if r[2] == hashed]
        assert [(f.decode(), owner) for f, _, _, owner in mine] == [
            (f"{i}:{step}", f"r{step}") for step in range(5)
        ]


OLDEST_CASES = [
    # id, new shards, frames per new shard, first_at per new shard
    ("into_one", 1, [[b"y", b"o", b"p"]], [10.0]),
    ("into_two", 2, [[b"o", b"p"], [b"y"]], [10.0, 50.0]),
    ("into_four", 4, [[b"p"], [b"y"], [b"o"], []], [10.0, 50.0, 10.0, None]),
]


@pytest.mark.parametrize(
    ("shards", "frames", "first_at"),
    [c[1:] for c in OLDEST_CASES],
    ids=[c[0] for c in OLDEST_CASES],
)
def test_reshard_keeps_the_oldest_arrival_time(
    shards: int, frames: list[list[bytes]], first_at: list[float | None]
) -> None:
    young, old_buf = ShardBuffer(), ShardBuffer()
    young.add(chunk_of([(b"y", 1, 1)]), now=50.0)
    old_buf.add(chunk_of([(b"o", 1, 2)]), now=10.0)
    old_buf.add(chunk_of([(b"p", 1, 4)]), now=40.0)
    new = reshard([young, old_buf], shards)
    assert [[r[0] for r in flat(buf.chunks)] for buf in new] == frames
    # The oldest chunk moved in sets the deadline (a chunk takes its old buffer's age).
    assert [buf.first_at for buf in new] == first_at


EMPTY_RESHARD_CASES = [
    # id, frames of each old buffer (bytes, samples, hash), new shards
    ("all_empty", [[], []], 4),
    ("no_buffers", [], 3),
    ("some_empty", [[], [(b"a", 2, 1)], []], 2),
]


@pytest.mark.parametrize(
    ("old_frames", "shards"),
    [c[1:] for c in EMPTY_RESHARD_CASES],
    ids=[c[0] for c in EMPTY_RESHARD_CASES],
)
def test_reshard_of_empty_buffers(old_frames: list[list[Frame]], shards: int) -> None:
    old = [ShardBuffer() for _ in old_frames]
    for buf, frames in zip(old, old_frames, strict=True):
        if frames:
            buf.add(chunk_of(frames, owner="x"), now=7.0)
    new = reshard(old, shards)
    assert len(new) == shards
    for s, buf in enumerate(new):
        expected = [(f, n, h, "x") for fs in old_frames for f, n, h in fs if h % shards == s]
        assert flat(buf.chunks) == expected
        assert buf.first_at == (7.0 if expected else None)
        assert_totals(buf)


DESIRED_SHARDS_CASES = [
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
    [c[1:] for c in DESIRED_SHARDS_CASES],
    ids=[c[0] for c in DESIRED_SHARDS_CASES],
)
def test_desired_shards(
    current: int,
    samples_in: int,
    samples_out: int,
    send_seconds: float,
    pending: int,
    expected: int,
) -> None:
    got = desired_shards(
        current=current,
        min_shards=2 if current == 20 else 1,
        max_shards=50,
        samples_in=samples_in,
        samples_out=samples_out,
        send_seconds=send_seconds,
        pending=pending,
        interval=10.0,
    )
    assert got == expected


GROUP_CASES = [
    # id, whether each chunk's record is recovered, in order; chunks taken by each take()
    # until empty
    ("one_group", [True, True, True], [[0, 1, 2]]),
    ("recovered_then_new", [True, True, False, False], [[0, 1], [2, 3]]),
    ("alternating", [True, False, True], [[0], [1], [2]]),
    ("new_only", [False, False], [[0, 1]]),
]


@pytest.mark.parametrize(
    ("groups", "batches"), [c[1:] for c in GROUP_CASES], ids=[c[0] for c in GROUP_CASES]
)
def test_take_never_mixes_recovered_and_new_records(
    groups: list[bool], batches: list[list[int]]
) -> None:
    buf = ShardBuffer()
    for i, recovered in enumerate(groups):
        frames = [(frame(2 * i), 1, 2 * i), (frame(2 * i + 1), 1, 2 * i + 1)]
        buf.add(chunk_of(frames, owner=i, recovered=recovered), now=0.0)
    taken = []
    while buf.chunks:
        batch = buf.take(max_samples=100, max_bytes=1 << 20)
        assert len({chunk.owner.recovered for chunk in batch.chunks}) == 1
        taken.append(owners(batch))
    assert taken == batches


REMOVE_CASES = [
    # id, owners removed (chunk i is owned by i), owners kept in order
    ("some", {0, 2, 3}, [1, 4, 5]),
    ("none", set(), [0, 1, 2, 3, 4, 5]),
    ("all", {0, 1, 2, 3, 4, 5}, []),
    ("only_the_oldest", {0}, [1, 2, 3, 4, 5]),
]


@pytest.mark.parametrize(
    ("removed", "kept"), [c[1:] for c in REMOVE_CASES], ids=[c[0] for c in REMOVE_CASES]
)
def test_remove_dropped_takes_out_dropped_records_and_keeps_the_rest_in_order(
    removed: set[int], kept: list[int]
) -> None:
    buf = ShardBuffer()
    rows: dict[int, list[Row]] = {}
    for i in range(6):  # chunk i: i + 1 frames of i + 1 samples each
        frames = [(frame(10 * i + j), i + 1, 10 * i + j) for j in range(i + 1)]
        buf.add(chunk_of(frames, owner=i), now=float(i))
        rows[i] = [(f, n, h, i) for f, n, h in frames]
    gone = drop(buf, removed)
    gone_owners = sorted(removed)
    assert owners(gone) == gone_owners
    assert flat(gone.chunks) == [r for i in gone_owners for r in rows[i]]
    assert gone.samples == sum(r[1] for i in gone_owners for r in rows[i])
    assert gone.nbytes == sum(len(r[0]) for i in gone_owners for r in rows[i])
    assert [name_of(chunk.owner) for chunk in buf.chunks] == kept
    assert flat(buf.chunks) == [r for i in kept for r in rows[i]]
    assert buf.samples == sum(r[1] for i in kept for r in rows[i])
    # The others keep their age (the oldest waiting chunk's, as before).
    assert buf.first_at == (0.0 if kept else None)
    assert_totals(buf)
    assert owners(drop(buf, kept)) == kept
    assert buf.samples == 0 and buf.nbytes == 0 and buf.first_at is None


PUT_BACK_CASES = [
    # id, chunks (samples per frame), max_samples of the take, put back at, first_at after
    ("whole_chunks", [[1], [1], [1], [1], [1]], 3, 30.0, 10.0),
    ("cut_chunk", [[2, 2, 2], [1]], 5, 30.0, 10.0),
    ("multi_frame_chunks", [[1, 1], [1], [1, 1]], 3, 30.0, 10.0),
    ("everything_taken", [[1], [1, 1]], 100, 30.0, 30.0),  # an empty buffer's clock restarts
]


@pytest.mark.parametrize(
    ("counts", "max_samples", "at", "first_at"),
    [c[1:] for c in PUT_BACK_CASES],
    ids=[c[0] for c in PUT_BACK_CASES],
)
def test_put_back_returns_a_batch_to_the_front_in_order(
    counts: list[list[int]], max_samples: int, at: float, first_at: float
) -> None:
    buf, rows = filled([[(n, 10) for n in chunk] for chunk in counts], now=10.0)
    batch = buf.take(max_samples=max_samples, max_bytes=1 << 20)
    buf.put_back(batch, now=at)
    assert flat(buf.chunks) == rows
    assert buf.samples == sum(r[1] for r in rows) and buf.nbytes == sum(len(r[0]) for r in rows)
    assert buf.first_at == first_at
    assert_totals(buf)
    again = buf.take(max_samples=max_samples, max_bytes=1 << 20)
    assert owners(again) == owners(batch) and again.items == batch.items
    assert again.raw == batch.raw


# -- a stored record sent as it is ---------------------------------------------------------------

COMPRESSED_CASES = [
    # id, chunks taken (max_samples), the batch goes out as stored
    ("one_whole_record", 100, True),
    ("record_cut_in_two", 3, False),
]


@pytest.mark.parametrize(
    ("max_samples", "as_stored"),
    [c[1:] for c in COMPRESSED_CASES],
    ids=[c[0] for c in COMPRESSED_CASES],
)
def test_a_whole_stored_record_is_sent_as_stored(max_samples: int, as_stored: bool) -> None:
    frames = [(frame(i), 2, _hash(i)) for i in range(4)]
    plain = chunk_of(frames, owner="r")
    stored = snappy.compress(plain.body)
    chunk = Chunk(
        None,
        plain.index,
        plain.samples,
        plain.series,
        plain.owner,
        compressed=stored,
        nbytes=plain.nbytes,
    )
    buf = ShardBuffer()
    buf.add(chunk, now=0.0)
    batch = buf.take(max_samples=max_samples, max_bytes=1 << 20)
    assert (batch.compressed == stored) == as_stored
    assert (batch.compressed is None) == (not as_stored)
    assert batch.raw == plain.body[: batch.nbytes]  # decompressed only when asked
    assert chunk == plain


SPLICE_CASES = [
    # id, which chunks are stored records (the others hold their raw body only)
    ("two_stored_records", (True, True)),
    ("stored_then_raw", (True, False)),
    ("raw_then_stored", (False, True)),
    ("three_stored_one_empty", (True, True, True)),
]


@pytest.mark.parametrize("stored", [c[1] for c in SPLICE_CASES], ids=[c[0] for c in SPLICE_CASES])
def test_merged_stored_records_are_spliced_not_recompressed(stored: tuple[bool, ...]) -> None:
    plain = [
        chunk_of([(frame(i), 1, _hash(i))] if i < 2 else [], owner=i) for i in range(len(stored))
    ]
    chunks = [
        Chunk(
            None,
            c.index,
            c.samples,
            c.series,
            c.owner,
            compressed=snappy.compress(c.body),
            nbytes=c.nbytes,
        )
        if keep
        else c
        for c, keep in zip(plain, stored, strict=True)
    ]
    buf = ShardBuffer()
    for c in chunks:
        buf.add(c, now=0.0)
    batch = buf.take(max_samples=10, max_bytes=1 << 20)
    assert len(batch.chunks) == len(stored) and batch.stored
    body = batch.compressed
    assert body is not None
    assert all(c._body is None for c, keep in zip(chunks, stored, strict=True) if keep)
    assert snappy.decompress(body) == b"".join(c.body for c in plain) == batch.raw


def test_records_held_raw_are_compressed_in_one_go() -> None:
    buf = ShardBuffer()
    for i in range(2):
        buf.add(chunk_of([(frame(i), 1, _hash(i))], owner=i), now=0.0)
    batch = buf.take(max_samples=10, max_bytes=1 << 20)
    assert not batch.stored and batch.compressed is None and batch.raw == frame(0) + frame(1)


def test_a_chunk_needs_a_body() -> None:
    with pytest.raises(ValueError, match="need their body"):
        Chunk(None, b"", 0, 0, Owner())
