"""What routing produces (pure): each destination's share of one write request, and the shard
hash of a series."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from rwrouter.wire.index import counts_of, frames_of, hashes_of

__all__ = ["RoutedRequest", "RoutedSeries", "shard_hash"]


def shard_hash(key: bytes) -> int:
    """The shard hash of a series: crc32 of its encoded output labels (u32; stable across
    restarts and processes, so a series keeps its shard however its queue is read back)."""
    return zlib.crc32(key)


@dataclass(slots=True)
class RoutedSeries:
    """Series routed to one destination: ``body``, its framed ``timeseries`` fields
    concatenated (``snappy(body)`` is a valid write request), and ``index``, per frame
    :data:`~rwrouter.wire.index.INDEX` (frame bytes, samples, shard hash). ``samples``
    (samples + exemplars + histograms) and ``series`` are the totals; a series carrying
    nothing is not forwarded."""

    body: bytes = b""
    index: bytes = b""
    samples: int = 0
    series: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes held: the body and its index."""
        return len(self.body) + len(self.index)

    @property
    def counts(self) -> list[int]:
        """Each frame's sample count (decodes the index: for tools and tests)."""
        return counts_of(self.index)

    @property
    def hashes(self) -> list[int]:
        """Each frame's shard hash (decodes the index: for tools and tests)."""
        return hashes_of(self.index)

    @property
    def frames(self) -> list[bytes]:
        """Each framed series (slices the body: for tools and tests)."""
        return frames_of(self.body, self.index)


@dataclass(slots=True)
class RoutedRequest:
    """One write request routed: per destination (in config order) its series and metadata,
    and the samples not sent, by destination index and reason."""

    series: list[RoutedSeries]
    metadata: list[list[bytes]]
    dropped: dict[tuple[int, str], int]
    samples_in: int = 0
    series_in: int = 0
    metadata_invalid: int = 0  # entries without a metric family name: sent nowhere
    metadata_in: int = 0
