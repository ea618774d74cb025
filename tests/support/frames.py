"""Framed series for tests: a share built frame by frame, and the shard rule, as references.

The package moves framed series (``0a <len> TimeSeries``, field 1 of a WriteRequest) with an
index (:data:`rwrouter.wire.index.INDEX`); the receive path builds both in one pass
(:func:`rwrouter.routing.scan.scan_request`). These helpers give tests the same shapes one
series at a time, as references to compare the package's output with.
"""

from __future__ import annotations

from collections.abc import Sequence

from rwrouter.routing import shard_hash
from rwrouter.wire.index import INDEX


def pack_frames(
    frames: Sequence[bytes], keys: Sequence[bytes], counts: Sequence[int]
) -> tuple[bytes, bytes]:
    """(body, index) of framed series given one by one, with their shard keys (the encoded
    output labels) and sample counts: the shape :func:`rwrouter.queue.records.encode_share`
    takes, and what the receive path builds in one pass."""
    index = b"".join(
        INDEX.pack(len(f), n, shard_hash(k)) for f, k, n in zip(frames, keys, counts, strict=True)
    )
    return b"".join(frames), index


def shard_of(hashed: int, shards: int) -> int:
    """The shard of a series from its shard hash (:func:`rwrouter.routing.shard_hash`): the
    hash modulo the number of shards, as Prometheus's ``QueueManager`` does; what
    :func:`rwrouter.wire.index.split_shards` applies to each frame."""
    return hashed % shards
