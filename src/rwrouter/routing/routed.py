"""What routing produces (pure): each destination's share of one write request, and the shard
hash of a series."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from rwrouter.protocol import Written
from rwrouter.reasons import DropReason
from rwrouter.wire.index import Frames

__all__ = ["RoutedRequest", "shard_hash"]


def shard_hash(key: bytes) -> int:
    """The shard hash of a series: crc32 of its encoded output labels (u32; stable across
    restarts and processes, so a series keeps its shard however its queue is read back)."""
    return zlib.crc32(key)


@dataclass(slots=True)
class RoutedRequest:
    """One write request routed: per destination (in config order) its share (``shares``:
    the series routed there, :class:`~rwrouter.wire.index.Frames`; a series carrying nothing
    is not forwarded) and metadata, and the samples not sent, by destination index and
    reason. An RW 2.0 request's also carry what it held (``written``: its Written headers'
    counts) and whether a Sample or Histogram of it has a start timestamp."""

    shares: list[Frames]
    metadata: list[list[bytes]]
    dropped: dict[tuple[int, DropReason], int]
    samples_in: int = 0
    series_in: int = 0
    metadata_invalid: int = 0  # entries without a metric family name: sent nowhere
    metadata_in: int = 0
    written: Written | None = None  # an RW 2.0 request's counts; None for RW 1.0
    start_timestamps: bool = False
