"""Framed series and their index (pure): :class:`Frames`, the value every stage after routing
moves, and the per-frame loops over an index.

An index gives per framed series its length in bytes, its samples (samples + exemplars +
histograms) and its shard hash, as ``<III`` (little-endian u32 each). A destination's share
of a request, a queue record read back and a chunk of the sending side are all
:class:`Frames` (a body, the frames concatenated, and such an index), so nothing walks the
protobuf again.

The compiled versions of :func:`index_totals_py` and :func:`split_shards_py` are picked by
:mod:`rwrouter.wire.accelerator` (:func:`index_totals`, :func:`split_shards`).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterator

from rwrouter.errors import DecodeError, InvariantError
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.block import decompress
from rwrouter.wire.walk import read_varint

__all__ = [
    "INDEX",
    "Frames",
    "Item",
    "index_totals",
    "index_totals_py",
    "metric_name_samples",
    "named_frames",
    "named_frames_list",
    "named_frames_py",
    "split_shards",
    "split_shards_py",
]

INDEX = struct.Struct("<III")  # per frame: frame bytes, samples, shard hash


Item = tuple[bytes, int]
"""One framed series (or framed metadata entry) and its count (samples, or 1 entry): what a
batch refused by its destination is split into."""

_set = object.__setattr__


class Frames:
    """Framed series and their index, immutable: ``body``, the framed ``timeseries`` fields
    (field 1 of ``prometheus.WriteRequest``, RW 1.0 spec) concatenated, so ``snappy(body)`` is
    a valid write request; ``index``, per frame :data:`INDEX` (frame bytes, samples, shard
    hash); ``samples`` (samples + exemplars + histograms) and ``series``, the totals over the
    index; ``nbytes``, the length of the body (bytes).

    The body may be given compressed instead: ``compressed``, its snappy block (as a queue
    record stores it: exactly a write request body), with ``nbytes``; it is decompressed on
    first use of :attr:`body`, once (DecodeError when it does not decompress).

    A routed share is a ``Frames``; a queue record read back
    (:class:`~rwrouter.queue.records.Record`) and a chunk of the sending side
    (:class:`~rwrouter.send.batching.Chunk`) are ``Frames`` with fields of their own. Raises
    ValueError when neither the body nor the compressed body and its size are given.
    """

    __slots__ = ("_body", "compressed", "index", "nbytes", "samples", "series")

    _body: bytes | None
    compressed: bytes | None
    index: bytes
    nbytes: int
    samples: int
    series: int

    def __init__(
        self,
        body: bytes | None,
        index: bytes,
        samples: int,
        series: int,
        *,
        compressed: bytes | None = None,
        nbytes: int | None = None,
    ) -> None:
        if body is not None:
            nbytes = len(body)
        elif compressed is None or nbytes is None:
            raise ValueError("frames need their body, or their compressed body and raw size")
        _set(self, "_body", body)
        _set(self, "compressed", compressed)
        _set(self, "index", index)
        _set(self, "nbytes", nbytes)
        _set(self, "samples", samples)
        _set(self, "series", series)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @property
    def body(self) -> bytes:
        """The frames concatenated (decompressed on first use when given compressed)."""
        body = self._body
        if body is None:
            if self.compressed is None:
                raise InvariantError("frames without their body have their compressed body")
            body = decompress(self.compressed, max_decoded_bytes=self.nbytes)
            _set(self, "_body", body)
        return body

    @property
    def decoded(self) -> bytes | None:
        """The body if it was given or decompressed already, else None."""
        return self._body

    @property
    def counts(self) -> list[int]:
        """Each frame's sample count (decodes the index: for tools and tests)."""
        return [n for _, n, _ in INDEX.iter_unpack(self.index)]

    @property
    def hashes(self) -> list[int]:
        """Each frame's shard hash (decodes the index: for tools and tests)."""
        return [h for _, _, h in INDEX.iter_unpack(self.index)]

    @property
    def frames(self) -> list[bytes]:
        """Each framed series (slices the body: for tools, tests and refusals, never the hot
        path)."""
        return [frame for frame, _ in self.items()]

    def items(self) -> list[Item]:
        """Each (framed series, samples), in order: to split a refused batch, or to keep its
        refused series."""
        body = self.body
        out, pos = [], 0
        for length, count, _ in INDEX.iter_unpack(self.index):
            out.append((body[pos : pos + length], count))
            pos += length
        return out

    def _compared(self) -> tuple[object, ...]:
        """What equality compares (a subclass adds its own fields)."""
        return (self.index, self.samples, self.series, self.body)

    def __eq__(self, other: object) -> bool:
        """Same kind, same frames and totals (however the body is held)."""
        if type(other) is not type(self) or not isinstance(other, Frames):
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash((self.index, self.samples, self.series))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(series={self.series}, samples={self.samples}, "
            f"nbytes={self.nbytes})"
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


_NAME_FIELD = b"\x0a\x08__name__\x12"  # Label.name = "__name__", then Label.value's tag


def label_name(data: bytes, at: int = 0, end: int | None = None) -> bytes:
    """The metric name (raw bytes; ``b""`` without one) of the Label fields (RW 1.0 wire
    schema: field 1, Label{name=1, value=2}, as the router encodes them) that start at ``at``
    of ``data`` and end at ``end`` or a field of another kind: the value of the first Label
    whose name is ``__name__``. The fields are walked, so a label value holding those bytes
    is never taken for the name."""
    end = len(data) if end is None else end
    try:
        while at < end and data[at] == 0x0A:
            size, start = read_varint(data, at + 1, end)
            if start + size > end:
                return b""
            if data.startswith(_NAME_FIELD, start, start + size):
                value_size, value = read_varint(data, start + len(_NAME_FIELD), start + size)
                if value + value_size > start + size:
                    return b""
                return data[value : value + value_size]
            at = start + size
    except DecodeError:  # a length cut short
        return b""
    return b""


def named_frames_py(body: bytes, index: bytes) -> Iterator[tuple[bytes, int, int]]:
    """Per framed series of a share (``body`` + :data:`INDEX`), in order: (its metric name as
    raw bytes, its samples, its shard hash): the status page and the audit.

    A frame (a framed TimeSeries, field 1 of WriteRequest) names its series with the value of
    its ``__name__`` Label (:func:`label_name` of its labels); a frame without one gives
    ``b""``. Raises ValueError when the index is not a whole number of entries."""
    if len(index) % INDEX.size:
        raise ValueError("index length is not a multiple of 12")
    pos = 0
    for length, samples, hashed in INDEX.iter_unpack(index):
        end = pos + length
        name = b""
        if pos < end and body[pos] == 0x0A:
            try:
                name = label_name(body, read_varint(body, pos + 1, end)[1], end)
            except DecodeError:  # the frame's length cut short
                name = b""
        yield name, samples, hashed
        pos = end


def metric_name_samples(body: bytes, index: bytes, *, max_frames: int) -> dict[str, int]:
    """Samples per metric name over the first ``max_frames`` framed series of a share
    (``body`` + :data:`INDEX`, names as :func:`named_frames` finds them): an estimate for the
    status page, never the hot path. A name that is not valid UTF-8 counts under ``""``."""
    counts: dict[bytes, int] = {}
    for name, samples, _ in itertools.islice(named_frames_py(body, index), max_frames):
        counts[name] = counts.get(name, 0) + samples
    out: dict[str, int] = {}
    for raw, samples in counts.items():
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            text = ""
        out[text] = out.get(text, 0) + samples
    return out


def named_frames_list(body: bytes, index: bytes) -> list[tuple[bytes, int, int]]:
    """:func:`named_frames_py` as a list (the reference of the compiled ``named_frames``)."""
    return list(named_frames_py(body, index))


IndexTotals = Callable[[bytes], tuple[int, int]]
NamedFrames = Callable[[bytes, bytes], list[tuple[bytes, int, int]]]
ShardSplitter = Callable[[bytes, bytes, int], list[tuple[bytes, bytes, int, int]]]

index_totals: IndexTotals = compiled("index_totals") or index_totals_py
split_shards: ShardSplitter = compiled("split_shards") or split_shards_py
named_frames: NamedFrames = compiled("named_frames") or named_frames_list
"""The per-frame loops in use (compiled when :data:`rwrouter.wire.accelerator.ACCELERATED`),
with the contracts of :func:`index_totals_py`, :func:`split_shards_py` and
:func:`named_frames_list` (whose search for a frame's name the compiled audit count of
:mod:`rwrouter.audit.count` shares)."""
