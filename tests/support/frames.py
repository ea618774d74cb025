"""Framed series for tests: the shard rule as a reference.

The package moves framed series (``0a <len> TimeSeries``, field 1 of a WriteRequest) with an
index (:data:`rwrouter.wire.index.INDEX`); the receive path builds both in one pass
(:func:`rwrouter.routing.scan.scan_request`). These helpers give tests the same shapes one
series at a time, as references to compare the package's output with.
"""

from __future__ import annotations


def shard_of(hashed: int, shards: int) -> int:
    """The shard of a series from its shard hash (:func:`rwrouter.routing.shard_hash`): the
    hash modulo the number of shards, as Prometheus's ``QueueManager`` does; what
    :func:`rwrouter.wire.index.split_shards` applies to each frame."""
    return hashed % shards
