"""Queue records: a destination's share of one write request, as the durable queue stores it
(pure: bytes in, bytes out).

A record holds whole framed ``timeseries`` fields (field 1 of ``prometheus.WriteRequest``, RW
1.0 spec) exactly as the router will send them, so the concatenated frames are a valid write
request body: ``body = snappy(frame_1 + ... + frame_n)``. Beside the body, an index gives each
frame's length, sample count and shard hash, so reading a record back never walks protobuf.

Layout (little-endian)::

    u32 length of what follows the checksum   u32 zlib.crc32 of what follows it
    u8 version (1)  u8 kind (0 = samples)  u16 reserved (0)
    i64 received_ms (unix milliseconds)  u32 series  u32 samples  u32 raw body length
    series x (u32 frame length, u32 samples, u32 shard hash)
    snappy block of the raw body

A torn or corrupt record fails the length or checksum test (:func:`check_record`). A record's
raw body never exceeds the destination's ``max_request_bytes``: :func:`encode_share` splits a
share into as many records as needed, and refuses series that alone are larger.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from rwrouter.errors import DecodeError, TooLargeError
from rwrouter.wire import compress, decompress

__all__ = [
    "HEADER",
    "MAX_RECORD_BYTES",
    "META_SIZE",
    "Block",
    "EncodedShare",
    "check_record",
    "decode_record",
    "encode_share",
    "record_samples",
    "shard_hash",
]

VERSION = 1
KIND_SAMPLES = 0
HEADER = struct.Struct("<II")  # length of the rest, crc32 of the rest
_META = struct.Struct("<BBHqIII")  # version, kind, reserved, received_ms, series, samples, raw
_INDEX = struct.Struct("<III")  # frame length, samples, shard hash
META_SIZE = _META.size  # bytes of the fixed part after the header
MAX_RECORD_BYTES = 1 << 30  # a length field above this is garbage, not a record (1 GiB)


def shard_hash(key: bytes) -> int:
    """The shard hash of a series: crc32 of its encoded output labels (stable across restarts,
    so a series keeps its place in the order however the queue is read back)."""
    return zlib.crc32(key)


@dataclass(slots=True)
class EncodedShare:
    """A destination's share of one request, ready to append: ``records`` (each a complete
    record, header included), and the totals over them. ``too_large`` counts the samples of
    series refused because their frame alone is over ``max_body_bytes`` (``too_large_series``
    of them)."""

    records: list[bytes] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)  # per record
    series: int = 0
    nbytes: int = 0  # bytes of all records, headers included
    too_large: int = 0
    too_large_series: int = 0

    @property
    def total_samples(self) -> int:
        return sum(self.samples)


def encode_share(
    frames: Sequence[bytes],
    keys: Sequence[bytes],
    counts: Sequence[int],
    *,
    received_ms: int,
    max_body_bytes: int,
) -> EncodedShare:
    """Pack framed series (with their shard keys and sample counts) into records whose raw
    body is at most ``max_body_bytes`` bytes each, keeping the frames' order."""
    out = EncodedShare()
    start = size = 0
    for i, frame in enumerate(frames):
        n = len(frame)
        if n > max_body_bytes:
            _emit(out, frames, keys, counts, start, i, received_ms)
            out.too_large += counts[i]
            out.too_large_series += 1
            start, size = i + 1, 0
            continue
        if size + n > max_body_bytes:
            _emit(out, frames, keys, counts, start, i, received_ms)
            start, size = i, 0
        size += n
    _emit(out, frames, keys, counts, start, len(frames), received_ms)
    return out


def _emit(
    out: EncodedShare,
    frames: Sequence[bytes],
    keys: Sequence[bytes],
    counts: Sequence[int],
    start: int,
    end: int,
    received_ms: int,
) -> None:
    if start >= end:
        return
    raw = b"".join(frames[start:end])
    samples = sum(counts[start:end])
    index = b"".join(
        _INDEX.pack(len(frames[i]), counts[i], shard_hash(keys[i])) for i in range(start, end)
    )
    rest = b"".join(
        (
            _META.pack(VERSION, KIND_SAMPLES, 0, received_ms, end - start, samples, len(raw)),
            index,
            compress(raw),
        )
    )
    record = HEADER.pack(len(rest), zlib.crc32(rest)) + rest
    out.records.append(record)
    out.samples.append(samples)
    out.series += end - start
    out.nbytes += len(record)


def check_record(header: bytes, rest: bytes) -> bool:
    """Whether ``rest`` is the intact body of the record whose 8-byte ``header`` precedes it."""
    length, crc = HEADER.unpack(header)
    return bool(len(rest) == length and length >= _META.size and zlib.crc32(rest) == crc)


def record_samples(rest: bytes) -> tuple[int, int]:
    """(received_ms, samples) of a record body, from its fixed part only (no checksum test)."""
    _, _, _, received_ms, _, samples, _ = _META.unpack_from(rest)
    return received_ms, samples


@dataclass(frozen=True, slots=True)
class Block:
    """A record read back: its frames in order, each frame's sample count and shard hash."""

    received_ms: int
    frames: list[bytes]
    counts: list[int]
    hashes: list[int]
    samples: int
    nbytes: int  # raw body bytes


def decode_record(rest: bytes) -> Block:
    """Read back a checked record body (:func:`check_record`).

    Raises DecodeError when the record is intact but inconsistent (another version, an index
    that does not match the body): the queue treats that like corruption.
    """
    version, kind, _, received_ms, series, samples, raw_len = _META.unpack_from(rest)
    if version != VERSION or kind != KIND_SAMPLES:
        raise DecodeError(f"queue record of version {version} kind {kind} is not supported")
    index_end = _META.size + series * _INDEX.size
    if index_end > len(rest):
        raise DecodeError("queue record index runs past its end")
    try:
        raw = decompress(rest[index_end:], max_decoded_bytes=raw_len)
    except TooLargeError:  # a RequestError, not a DecodeError: callers catch DecodeError
        raise DecodeError("queue record body is longer than its header says") from None
    if len(raw) != raw_len:
        raise DecodeError("queue record body length does not match its header")
    frames: list[bytes] = []
    counts: list[int] = []
    hashes: list[int] = []
    pos = 0
    view = memoryview(raw)
    for length, count, hashed in _INDEX.iter_unpack(rest[_META.size : index_end]):
        frames.append(bytes(view[pos : pos + length]))
        counts.append(count)
        hashes.append(hashed)
        pos += length
    if pos != raw_len or sum(counts) != samples:
        raise DecodeError("queue record index does not match its body")
    return Block(received_ms, frames, counts, hashes, samples, raw_len)
