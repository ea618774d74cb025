"""The receive path's per-series loop (pure): one pass over a decoded write request that splits
it into each destination's share, ready to queue.

:func:`scan_request` is the compiled accelerator ``rwrouter.wire._scan`` when it was built (the
way aiohttp ships its C HTTP parser) and :func:`scan_request_py` otherwise, or when the
environment sets ``RWROUTER_NO_EXTENSIONS`` to a non-empty value. Both take the same arguments
and give the same result (tested on the benchmark workload, random series and malformed
bodies); :data:`ACCELERATED` says which one runs. The same holds for :func:`decode_labels` and
:func:`encode_labels` (the routing cache's miss path; the pure ones are in
:mod:`rwrouter.wire.codec`), and for the queue side's per-frame loops :func:`index_totals` and
:func:`split_shards` (a queued share's frames by shard).

The loop never decodes samples, exemplars or histograms: a series is split into the raw bytes
of its labels (the routing cache key) and the raw bytes of everything else, which go out bit for
bit behind the destination's encoded labels (see :mod:`rwrouter.wire.codec`). Routing itself is
the caller's: a cache of outcomes keyed by raw label bytes, in two generations (``young``, then
``old``; a hit in ``old`` is copied to ``young``), and a ``miss`` callable for label sets in
neither.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import NamedTuple

from rwrouter.errors import DecodeError
from rwrouter.wire import codec
from rwrouter.wire.codec import RawSeries, split_series
from rwrouter.wire.validate import check_metadata
from rwrouter.wire.walk import LEN, encode_varint, fields

__all__ = [
    "ACCELERATED",
    "FILTERED",
    "INDEX",
    "Entry",
    "Kept",
    "Scan",
    "decode_labels",
    "encode_labels",
    "index_totals",
    "scan_request",
    "scan_request_py",
    "split_shards",
]

FILTERED = "filtered"  # drop reason: nothing left once exemplars/histograms are filtered out
INDEX = struct.Struct("<III")  # per frame: frame bytes, samples, shard hash

Kept = tuple[bytes, int]
"""A destination keeps the series: its encoded output labels and its shard hash (u32)."""

Entry = tuple[Kept | str | None, ...]
"""A routing outcome, per destination in config order: :data:`Kept`, the drop reason (str), or
None (a fallback destination whose series went elsewhere: not sent, not counted)."""

Miss = Callable[[bytes], Entry]
LabelDecoder = Callable[[bytes], tuple[tuple[str, str], ...]]
LabelEncoder = Callable[[tuple[tuple[str, str], ...]], bytes]
IndexTotals = Callable[[bytes], tuple[int, int]]
ShardSplitter = Callable[[bytes, bytes, int], list[tuple[bytes, bytes, int, int]]]
Filter = Callable[[int, RawSeries], tuple[bytes, int]]


class Scan(NamedTuple):
    """One write request split per destination (lists in config order).

    ``bodies[i]``: framed ``timeseries`` fields (field 1 of ``prometheus.WriteRequest``)
    concatenated, so ``snappy(bodies[i])`` is a valid write request. ``indexes[i]``: per frame,
    :data:`INDEX` = (frame bytes, samples, shard hash). ``samples[i]``/``series[i]``: totals.
    ``dropped``: samples not sent, by (destination index, reason). ``samples_in``: samples +
    exemplars + histograms received, ``series_in``: series received. ``metadata``: the raw
    MetricMetadata payloads (checked), in order. ``hits``: cache lookups answered by ``young``
    or ``old``; ``promoted``/``promoted_bytes``: entries copied from ``old`` to ``young`` and
    their size (key and encoded labels, bytes).
    """

    bodies: list[bytes]
    indexes: list[bytes]
    samples: list[int]
    series: list[int]
    dropped: dict[tuple[int, str], int]
    samples_in: int
    series_in: int
    metadata: list[bytes]
    hits: int
    promoted: int
    promoted_bytes: int


def entry_bytes(key: bytes, entry: Entry) -> int:
    """Bytes a cache entry holds: its raw label key and each destination's encoded labels
    (those equal to the key share its object: not counted twice)."""
    return len(key) + sum(
        len(item[0]) for item in entry if isinstance(item, tuple) and item[0] != key
    )


def scan_request_py(
    data: bytes,
    young: dict[bytes, Entry],
    old: dict[bytes, Entry],
    miss: Miss,
    filters: tuple[bool, ...],
    filt: Filter,
) -> Scan:
    """Split a decompressed write request (RW 1.0) into per-destination shares.

    ``young``/``old``: the routing cache (read; ``young`` also gets what ``old`` answered).
    ``miss(raw_labels)``: the outcome of a label set in neither (the caller caches it).
    ``filters[i]``: destination ``i`` takes only some of exemplars/histograms; then
    ``filt(i, raw_series)`` gives (the series' remaining raw fields, samples left). A series
    without samples, exemplars or histograms is looked up (its labels are checked) but not
    sent. Unknown top-level fields are skipped; unknown series fields travel with the samples.

    Raises DecodeError (a 400) for malformed framing, wire types or metadata, or whatever
    ``miss`` raises for invalid labels (the whole request is refused).
    """
    ndest = len(filters)
    bodies = [bytearray() for _ in range(ndest)]
    indexes = [bytearray() for _ in range(ndest)]
    samples, series = [0] * ndest, [0] * ndest
    dropped: dict[tuple[int, str], int] = {}
    metadata: list[bytes] = []
    samples_in = series_in = hits = promoted = promoted_bytes = 0
    pack = INDEX.pack
    for field, wire_type, _, start, end in fields(data, 0, len(data), "WriteRequest"):
        if field != 1 and field != 3:
            continue
        if wire_type != LEN:
            raise DecodeError(f"bad protobuf: WriteRequest field {field} is not a message")
        if field == 3:
            metadata.append(check_metadata(data, start, end))
            continue
        series_in += 1
        raw = split_series(data[start:end])
        key = raw.labels
        entry = young.get(key)
        if entry is not None:
            hits += 1
        else:
            entry = old.get(key)
            if entry is not None:
                hits += 1
                young[key] = entry
                promoted += 1
                promoted_bytes += entry_bytes(key, entry)
            else:
                entry = miss(key)
        n = raw.samples + raw.exemplars + raw.histograms
        if not n:
            continue
        samples_in += n
        for i, item in enumerate(entry):
            if item is None:
                continue
            if isinstance(item, str):
                dropped[(i, item)] = dropped.get((i, item), 0) + n
                continue
            labels, hashed = item
            rest, kept = raw.rest, n
            if filters[i] and (raw.exemplars or raw.histograms):
                rest, kept = filt(i, raw)
                if not kept:
                    dropped[(i, FILTERED)] = dropped.get((i, FILTERED), 0) + n
                    continue
            inner = len(labels) + len(rest)
            head = b"\x0a" + encode_varint(inner)
            body = bodies[i]
            body += head
            body += labels
            body += rest
            indexes[i] += pack(len(head) + inner, kept, hashed)
            samples[i] += kept
            series[i] += 1
    return Scan(
        [bytes(b) for b in bodies],
        [bytes(x) for x in indexes],
        samples,
        series,
        dropped,
        samples_in,
        series_in,
        metadata,
        hits,
        promoted,
        promoted_bytes,
    )


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


_PURE = (scan_request_py, codec.decode_labels, codec.encode_labels, index_totals_py,
         split_shards_py, False)  # fmt: skip


def _select() -> tuple[
    Callable[..., Scan], LabelDecoder, LabelEncoder, IndexTotals, ShardSplitter, bool
]:
    if os.environ.get("RWROUTER_NO_EXTENSIONS"):
        return _PURE
    try:
        from rwrouter.wire import _scan  # type: ignore[attr-defined]  # built by setup.py
    except ImportError:
        return _PURE

    def scan_request_c(
        data: bytes,
        young: dict[bytes, Entry],
        old: dict[bytes, Entry],
        miss: Miss,
        filters: tuple[bool, ...],
        filt: Filter,
    ) -> Scan:
        return Scan._make(_scan.scan_request(data, young, old, miss, filters, filt))

    return (scan_request_c, _scan.decode_labels, _scan.encode_labels, _scan.index_totals,
            _scan.split_shards, True)  # fmt: skip


scan_request, decode_labels, encode_labels, index_totals, split_shards, ACCELERATED = _select()
"""The per-series loop and the label codec in use (compiled when :data:`ACCELERATED`), with
the contracts of :func:`scan_request_py`, :func:`rwrouter.wire.codec.decode_labels` and
:func:`rwrouter.wire.codec.encode_labels`."""
