"""Sharding and batching policies for a destination's queue (pure).

Per-series order (RW 1.0 spec: samples of a series in timestamp order; receivers reject
out-of-order samples): every series is assigned to one shard by a hash of its label set, as
Prometheus does, and a shard has at most one batch in flight, so two batches carrying the same
series are never sent at once.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


def shard_of(key: bytes, shards: int) -> int:
    """The shard of a series, from its encoded output labels (stable within a process)."""
    return hash(key) % shards


@dataclass(slots=True)
class ShardBuffer:
    """Frames waiting in one shard: (framed series, sample count) in arrival order, and the
    shard key of each (``keys``, to re-shard).

    ``samples``: total samples waiting; ``first_at``: when (seconds, any monotonic clock) the
    oldest waiting frame arrived, or None when empty.
    """

    frames: deque[tuple[bytes, int]] = field(default_factory=deque)
    keys: deque[bytes] = field(default_factory=deque)
    samples: int = 0
    first_at: float | None = None

    def add(self, frame: bytes, count: int, *, now: float, key: bytes = b"") -> None:
        """Append a frame of ``count`` samples that arrived at ``now``."""
        if not self.frames:
            self.first_at = now
        self.frames.append((frame, count))
        self.keys.append(key)
        self.samples += count

    def ready(self, *, max_samples: int, deadline: float, now: float) -> bool:
        """A batch should be cut: a full batch waits, or the oldest frame waited ``deadline``."""
        if not self.frames:
            return False
        assert self.first_at is not None
        return self.samples >= max_samples or now - self.first_at >= deadline

    def take(self, *, max_samples: int) -> tuple[list[tuple[bytes, int]], int, int]:
        """Remove and return up to ``max_samples`` samples' worth of (frame, sample count)
        (at least one frame), their total sample count, and the total length of their keys."""
        frames: list[tuple[bytes, int]] = []
        taken = key_bytes = 0
        while self.frames and (not frames or taken + self.frames[0][1] <= max_samples):
            item = self.frames.popleft()
            key_bytes += len(self.keys.popleft())
            frames.append(item)
            taken += item[1]
        self.samples -= taken
        if not self.frames:  # frames left behind keep their age: they go out no later
            self.first_at = None
        return frames, taken, key_bytes


def reshard(old: list[ShardBuffer], shards: int) -> list[ShardBuffer]:
    """Move every waiting frame into ``shards`` new buffers by its key (:func:`shard_of`).

    Per-series order holds: all frames of a series sit in one old buffer, and they are moved in
    their order. A frame keeps the arrival time of the oldest frame of its old buffer.
    """
    new = [ShardBuffer() for _ in range(shards)]
    for buf in old:
        arrived = buf.first_at if buf.first_at is not None else 0.0
        for (frame, count), key in zip(buf.frames, buf.keys, strict=True):
            target = new[shard_of(key, shards)]
            target.add(frame, count, now=arrived, key=key)
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
