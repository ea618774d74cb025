"""Sharding and batching policies for a destination's queue (pure).

Per-series order (RW 1.0 spec: samples of a series in timestamp order; receivers reject
out-of-order samples): every series is assigned to one shard by a hash of its label set, as
Prometheus does, and a shard has at most one batch in flight, so two batches carrying the same
series are never sent at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


def shard_of(key: bytes, shards: int) -> int:
    """The shard of a series, from its encoded output labels (stable within a process)."""
    return hash(key) % shards


@dataclass(slots=True)
class ShardBuffer:
    """Frames waiting in one shard: (framed series, sample count) in arrival order.

    ``samples``: total samples waiting; ``first_at``: when (seconds, any monotonic clock) the
    oldest waiting frame arrived, or None when empty.
    """

    frames: deque[tuple[bytes, int]] = field(default_factory=deque)
    samples: int = 0
    first_at: float | None = None

    def add(self, frame: bytes, count: int, *, now: float) -> None:
        """Append a frame of ``count`` samples that arrived at ``now``."""
        if not self.frames:
            self.first_at = now
        self.frames.append((frame, count))
        self.samples += count

    def ready(self, *, max_samples: int, deadline: float, now: float) -> bool:
        """A batch should be cut: a full batch waits, or the oldest frame waited ``deadline``."""
        if not self.frames:
            return False
        assert self.first_at is not None
        return self.samples >= max_samples or now - self.first_at >= deadline

    def take(self, *, max_samples: int) -> tuple[list[bytes], int]:
        """Remove and return up to ``max_samples`` samples' worth of frames (at least one frame)
        and their sample count."""
        frames: list[bytes] = []
        taken = 0
        while self.frames and (not frames or taken + self.frames[0][1] <= max_samples):
            frame, count = self.frames.popleft()
            frames.append(frame)
            taken += count
        self.samples -= taken
        if not self.frames:  # frames left behind keep their age: they go out no later
            self.first_at = None
        return frames, taken
