"""A share's index (pure): per framed series, its length in bytes, its samples (samples +
exemplars + histograms) and its shard hash, as ``<III`` (little-endian u32 each). A
destination's share of a request, a queue record and a chunk of the sending side are all a
body (the frames concatenated) and such an index, so nothing walks the protobuf again.

The compiled versions of :func:`index_totals_py` and :func:`split_shards_py` are picked by
:mod:`rwrouter.wire.accelerator` (:func:`index_totals`, :func:`split_shards`).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterator

from rwrouter.wire.accelerator import compiled

__all__ = [
    "INDEX",
    "counts_of",
    "frames_of",
    "hashes_of",
    "index_totals",
    "index_totals_py",
    "metric_name_samples",
    "named_frames",
    "split_shards",
    "split_shards_py",
]

INDEX = struct.Struct("<III")  # per frame: frame bytes, samples, shard hash


def frames_of(body: bytes, index: bytes) -> list[bytes]:
    """Each framed series of a share (``body`` sliced by its :data:`INDEX`): for tools,
    tests and refusals, never the hot path."""
    out, pos = [], 0
    for length, _, _ in INDEX.iter_unpack(index):
        out.append(body[pos : pos + length])
        pos += length
    return out


def counts_of(index: bytes) -> list[int]:
    """Each frame's sample count, from an :data:`INDEX`."""
    return [n for _, n, _ in INDEX.iter_unpack(index)]


def hashes_of(index: bytes) -> list[int]:
    """Each frame's shard hash, from an :data:`INDEX`."""
    return [h for _, _, h in INDEX.iter_unpack(index)]


def index_totals_py(index: bytes) -> tuple[int, int]:
    """(frame bytes, samples) summed over an :data:`INDEX`. Raises ValueError when its length
    is not a whole number of entries."""
    if len(index) % INDEX.size:
        raise ValueError("index length is not a multiple of 12")
    nbytes = samples = 0
    for length, count, _ in INDEX.iter_unpack(index):
        nbytes += length
        samples += count
    return nbytes, samples


def split_shards_py(body: bytes, index: bytes, shards: int) -> list[tuple[bytes, bytes, int, int]]:
    """The frames of ``body`` (described by ``index``) by shard, ``hash % shards``, keeping
    their order: per shard (body, index, samples, series). Raises ValueError when the index
    does not cover the body exactly, or ``shards`` < 1."""
    if shards < 1:
        raise ValueError("shards must be at least 1")
    if len(index) % INDEX.size:
        raise ValueError("index length is not a multiple of 12")
    bodies = [bytearray() for _ in range(shards)]
    indexes = [bytearray() for _ in range(shards)]
    samples, series = [0] * shards, [0] * shards
    pos = 0
    for i, (length, count, hashed) in enumerate(INDEX.iter_unpack(index)):
        s = hashed % shards
        bodies[s] += body[pos : pos + length]
        indexes[s] += index[i * INDEX.size : (i + 1) * INDEX.size]
        samples[s] += count
        series[s] += 1
        pos += length
    if pos != len(body):
        raise ValueError("index does not match its body")
    parts = zip(bodies, indexes, samples, series, strict=True)
    return [(bytes(b), bytes(x), n, k) for b, x, n, k in parts]


_NAME_LABEL = b"\x0a\x08__name__\x12"  # Label{name: "__name__", value: <follows>}, framed


def named_frames(body: bytes, index: bytes) -> Iterator[tuple[bytes, int, int]]:
    """Per framed series of a share (``body`` + :data:`INDEX`), in order: (its metric name as
    raw bytes, its samples, its shard hash). Not the hot path: the status page and the audit.

    A frame's name is the value of its ``__name__`` Label (RW 1.0 wire schema: TimeSeries
    field 1 = Label{name=1, value=2}), found by its encoding; a frame without one gives
    ``b""``. Raises ValueError when the index is not a whole number of entries."""
    if len(index) % INDEX.size:
        raise ValueError("index length is not a multiple of 12")
    find = body.find
    pos = 0
    for length, samples, hashed in INDEX.iter_unpack(index):
        end = pos + length
        name = b""
        at = find(_NAME_LABEL, pos, end)
        if at >= 0:
            start = at + len(_NAME_LABEL)
            size = shift = 0
            while start < end and shift < 35:  # the value's length: a varint
                byte = body[start]
                size |= (byte & 0x7F) << shift
                start += 1
                shift += 7
                if byte < 0x80:
                    break
            if start + size <= end:
                name = body[start : start + size]
        yield name, samples, hashed
        pos = end


def metric_name_samples(body: bytes, index: bytes, *, max_frames: int) -> dict[str, int]:
    """Samples per metric name over the first ``max_frames`` framed series of a share
    (``body`` + :data:`INDEX`, names as :func:`named_frames` finds them): an estimate for the
    status page, never the hot path. A name that is not valid UTF-8 counts under ``""``."""
    counts: dict[bytes, int] = {}
    for name, samples, _ in itertools.islice(named_frames(body, index), max_frames):
        counts[name] = counts.get(name, 0) + samples
    out: dict[str, int] = {}
    for raw, samples in counts.items():
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            text = ""
        out[text] = out.get(text, 0) + samples
    return out


IndexTotals = Callable[[bytes], tuple[int, int]]
ShardSplitter = Callable[[bytes, bytes, int], list[tuple[bytes, bytes, int, int]]]

index_totals: IndexTotals = compiled("index_totals") or index_totals_py
split_shards: ShardSplitter = compiled("split_shards") or split_shards_py
"""The per-frame loops in use (compiled when :data:`rwrouter.wire.accelerator.ACCELERATED`),
with the contracts of :func:`index_totals_py` and :func:`split_shards_py`."""
