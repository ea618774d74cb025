"""Framed series for tests: a request taken apart and put together one series at a time, a
share built frame by frame, and the shard rule, as references.

The package moves framed series (``0a <len> TimeSeries``, field 1 of a WriteRequest, RW 1.0
spec) with an index (:data:`rwrouter.wire.index.INDEX`); the receive path reads a request,
routes it and builds both in one pass (:func:`rwrouter.routing.scan.scan_request`). These
helpers give tests the same shapes step by step, from the package's own pieces
(:func:`rwrouter.wire.codec.split_series`, :func:`rwrouter.wire.validate.check_metadata`),
to compare the package's output with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rwrouter.errors import DecodeError
from rwrouter.routing import shard_hash
from rwrouter.wire.codec import RawSeries, split_series
from rwrouter.wire.index import INDEX, Frames
from rwrouter.wire.validate import check_metadata
from rwrouter.wire.walk import LEN, encode_varint, fields


@dataclass(frozen=True, slots=True)
class WriteRequestParts:
    """A decoded WriteRequest: its series and the raw payloads of its MetricMetadata entries."""

    series: list[RawSeries]
    metadata: list[bytes]


def parse_write_request(data: bytes) -> WriteRequestParts:
    """Split a decompressed WriteRequest into raw series and raw metadata payloads, as the
    receive path's loop reads it (without routing): every series through ``split_series``,
    every metadata entry through ``check_metadata``, unknown top-level fields skipped. Series
    labels are not decoded (:func:`rwrouter.wire.decode_labels` does, per distinct set).
    Raises DecodeError (400) for malformed framing or wire types."""
    series: list[RawSeries] = []
    metadata: list[bytes] = []
    for field, wire_type, _, start, end in fields(data, 0, len(data), "WriteRequest"):
        if field == 1 or field == 3:
            if wire_type != LEN:
                raise DecodeError(f"bad protobuf: WriteRequest field {field} is not a message")
            if field == 1:
                series.append(split_series(data[start:end]))
            else:
                metadata.append(check_metadata(data, start, end))
    return WriteRequestParts(series, metadata)


def frame_series(labels: bytes, rest: bytes) -> bytes:
    """One ``timeseries`` field of a WriteRequest: encoded labels + the series' raw other fields
    (what the router sends for a series whose labels it re-encoded)."""
    return b"\x0a" + encode_varint(len(labels) + len(rest)) + labels + rest


def pack_frames(frames: Sequence[bytes], keys: Sequence[bytes], counts: Sequence[int]) -> Frames:
    """The :class:`~rwrouter.wire.index.Frames` of framed series given one by one, with their
    shard keys (the encoded output labels) and sample counts: what
    :func:`rwrouter.queue.records.encode_share` takes, and what the receive path builds in one
    pass."""
    index = b"".join(
        INDEX.pack(len(f), n, shard_hash(k)) for f, k, n in zip(frames, keys, counts, strict=True)
    )
    return Frames(b"".join(frames), index, sum(counts), len(frames))


def shard_of(hashed: int, shards: int) -> int:
    """The shard of a series from its shard hash (:func:`rwrouter.routing.shard_hash`): the
    hash modulo the number of shards, as Prometheus's ``QueueManager`` does; what
    :func:`rwrouter.wire.index.split_shards` applies to each frame."""
    return hashed % shards
