"""Sharding and batching policies for a destination's queue (pure).

Per-series order (RW 1.0 spec: samples of a series in timestamp order; receivers reject
out-of-order samples): every series is assigned to one shard by a hash of its label set, as
Prometheus does, and a shard has at most one batch in flight, so two batches carrying the same
series are never sent at once.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


def shard_of(hashed: int, shards: int) -> int:
    """The shard of a series from its shard hash (:func:`rwrouter.sending.records.shard_hash`)."""
    return hashed % shards


@dataclass(frozen=True, slots=True)
class Batch:
    """What :meth:`ShardBuffer.take` cut: (framed series, sample count) items in order, their
    total samples and frame bytes, and the owner of each item (whatever ``add`` was given)."""

    items: list[tuple[bytes, int]]
    samples: int
    nbytes: int
    owners: list[object]
    hashes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class ShardBuffer:
    """Frames waiting in one shard: (framed series, sample count) in arrival order, with the
    shard hash and owner of each (``tags``: to re-shard, and to tell the owner when done).

    ``samples``/``nbytes``: totals waiting; ``first_at``: when (seconds, any monotonic clock)
    the oldest waiting frame arrived, or None when empty.
    """

    frames: deque[tuple[bytes, int]] = field(default_factory=deque)
    tags: deque[tuple[int, object]] = field(default_factory=deque)
    samples: int = 0
    nbytes: int = 0
    first_at: float | None = None

    def add(
        self, frame: bytes, count: int, *, now: float, hashed: int = 0, owner: object = None
    ) -> None:
        """Append a frame of ``count`` samples that arrived at ``now``."""
        if not self.frames:
            self.first_at = now
        self.frames.append((frame, count))
        self.tags.append((hashed, owner))
        self.samples += count
        self.nbytes += len(frame)

    def ready(self, *, max_samples: int, max_bytes: int, deadline: float, now: float) -> bool:
        """A batch should be cut: a full batch waits (``max_samples`` samples or ``max_bytes``
        bytes), or the oldest frame waited ``deadline`` seconds."""
        if not self.frames:
            return False
        assert self.first_at is not None
        return (
            self.samples >= max_samples
            or self.nbytes >= max_bytes
            or now - self.first_at >= deadline
        )

    def take(
        self,
        *,
        max_samples: int,
        max_bytes: int,
        group: Callable[[object], object] | None = None,
    ) -> Batch:
        """Remove and return the next batch: frames in order while the batch stays within
        ``max_samples`` samples and ``max_bytes`` bytes (always at least one frame) and, when
        ``group`` is given, while ``group(owner)`` stays that of the first frame (frames of
        different groups never share a batch)."""
        items: list[tuple[bytes, int]] = []
        owners: list[object] = []
        hashes: list[int] = []
        taken = size = 0
        frames, tags = self.frames, self.tags
        first_group = group(tags[0][1]) if group is not None and tags else None
        while frames:
            frame, count = frames[0]
            if items and (taken + count > max_samples or size + len(frame) > max_bytes):
                break
            if items and group is not None and group(tags[0][1]) != first_group:
                break
            items.append(frames.popleft())
            hashed, owner = tags.popleft()
            owners.append(owner)
            hashes.append(hashed)
            taken += count
            size += len(frame)
        self.samples -= taken
        self.nbytes -= size
        if not frames:  # frames left behind keep their age: they go out no later
            self.first_at = None
        return Batch(items, taken, size, owners, hashes)

    def remove_if(self, dropped: Callable[[object], bool]) -> Batch:
        """Remove (and return, in order) the waiting frames whose owner ``dropped`` says so;
        the others keep their order and age."""
        kept: deque[tuple[bytes, int]] = deque()
        kept_tags: deque[tuple[int, object]] = deque()
        items: list[tuple[bytes, int]] = []
        owners: list[object] = []
        hashes: list[int] = []
        for item, (hashed, owner) in zip(self.frames, self.tags, strict=True):
            if dropped(owner):
                items.append(item)
                owners.append(owner)
                hashes.append(hashed)
            else:
                kept.append(item)
                kept_tags.append((hashed, owner))
        samples, nbytes = sum(n for _, n in items), sum(len(f) for f, _ in items)
        self.frames, self.tags = kept, kept_tags
        self.samples -= samples
        self.nbytes -= nbytes
        if not kept:
            self.first_at = None
        return Batch(items, samples, nbytes, owners, hashes)

    def put_back(self, batch: Batch, *, now: float = 0.0) -> None:
        """Return a batch taken by :meth:`take` to the front, in its order (it goes next)."""
        for item, owner, hashed in zip(
            reversed(batch.items), reversed(batch.owners), reversed(batch.hashes), strict=True
        ):
            self.frames.appendleft(item)
            self.tags.appendleft((hashed, owner))
        self.samples += batch.samples
        self.nbytes += batch.nbytes
        if self.first_at is None:
            self.first_at = now


def reshard(old: list[ShardBuffer], shards: int) -> list[ShardBuffer]:
    """Move every waiting frame into ``shards`` new buffers by its hash (:func:`shard_of`).

    Per-series order holds: all frames of a series sit in one old buffer, and they are moved in
    their order. A frame keeps the arrival time of the oldest frame of its old buffer.
    """
    new = [ShardBuffer() for _ in range(shards)]
    for buf in old:
        arrived = buf.first_at if buf.first_at is not None else 0.0
        for (frame, count), (hashed, owner) in zip(buf.frames, buf.tags, strict=True):
            target = new[shard_of(hashed, shards)]
            target.add(frame, count, now=arrived, hashed=hashed, owner=owner)
            first = target.first_at if target.first_at is not None else arrived
            target.first_at = min(arrived, first)
    return new


def desired_shards(
    *,
    current: int,
    min_shards: int,
    max_shards: int,
    samples_in: int,
    samples_out: int,
    send_seconds: float,
    pending: int,
    interval: float,
) -> int:
    """How many shards a destination should run, from what happened over the last ``interval``
    seconds (Prometheus ``calculateDesiredShards``, simplified).

    ``samples_in``: samples enqueued; ``samples_out``/``send_seconds``: samples delivered and the
    time their successful sends took; ``pending``: samples waiting now. The shards needed are
    ``time per sample x (incoming rate + 5% of the backlog per second)``; changes within 30% of
    ``current`` are ignored (no flapping), and without deliveries nothing changes (a failing
    destination is not helped by more senders).
    """
    if samples_out <= 0 or interval <= 0:
        return current
    time_per_sample = send_seconds / samples_out
    needed = time_per_sample * (samples_in / interval + 0.05 * pending)
    if current * 0.7 <= needed <= current * 1.3:
        return current
    return max(min_shards, min(max_shards, math.ceil(needed)))
