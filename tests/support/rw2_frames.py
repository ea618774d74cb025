"""RW1-form frames and RW 2.0 Requests for tests of the RW 2.0 sender (rwrouter.wire.rw2_out).

A series is described as :class:`Frame` (labels, samples, histograms, exemplars), where
samples and histograms are the generated RW 2.0 messages (``write_v2_pb2.Sample`` /
``Histogram``): their encoding is an RW 1.0 Sample / Histogram plus the start timestamp
(fields 3 / 17), exactly what the queue's RW1 form holds. :func:`frames` encodes them as the
queue does (``0a len TimeSeries`` with the RW 1.0 field numbers); :func:`series_of` reads a
decoded RW 2.0 Request back into the same description, to compare.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rwrouter.wire import types_pb2, write_v2_pb2
from rwrouter.wire.rw2_out import Meta, Resolve

LabelPairs = tuple[tuple[str, str], ...]
MetaText = tuple[int, str, str]  # type, help, unit


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A LEN field ``number`` around ``payload``."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


@dataclass(frozen=True)
class Exemplar:
    labels: LabelPairs
    value_bits: bytes  # the 8 wire bytes of the double (eight zero bytes: absent)
    timestamp: int


@dataclass(frozen=True)
class Frame:
    """One series in comparable form: labels in order; samples and histograms as their
    serialized bytes (RW 2.0 messages = RW 1.0 ones plus start timestamps); exemplars."""

    labels: LabelPairs
    samples: tuple[bytes, ...] = ()
    histograms: tuple[bytes, ...] = ()
    exemplars: tuple[Exemplar, ...] = ()
    metadata: MetaText = (0, "", "")
    extra: bytes = field(default=b"", compare=False)  # raw bytes appended (unknown fields)


def _label(name: str, value: str) -> bytes:
    return bytes(types_pb2.Label(name=name, value=value).SerializeToString())


def _exemplar_rw1(ex: Exemplar) -> bytes:
    out = b"".join(field_bytes(1, _label(n, v)) for n, v in ex.labels)
    if ex.value_bits != bytes(8):
        out += b"\x11" + ex.value_bits
    if ex.timestamp:
        out += b"\x18" + _varint(ex.timestamp & (2**64 - 1))
    return out


def frame_bytes(frame: Frame) -> bytes:
    """One RW1-form frame: labels, samples (2), exemplars (3), histograms (4)."""
    inner = b"".join(field_bytes(1, _label(n, v)) for n, v in frame.labels)
    inner += b"".join(field_bytes(2, s) for s in frame.samples)
    inner += b"".join(field_bytes(3, _exemplar_rw1(e)) for e in frame.exemplars)
    inner += b"".join(field_bytes(4, h) for h in frame.histograms)
    return field_bytes(1, inner + frame.extra)


def frames(series: Iterable[Frame]) -> bytes:
    """A batch body: the frames concatenated."""
    return b"".join(frame_bytes(f) for f in series)


def _pairs(refs: Sequence[int], symbols: Sequence[str]) -> LabelPairs:
    assert len(refs) % 2 == 0, "labels_refs holds pairs"
    return tuple((symbols[refs[i]], symbols[refs[i + 1]]) for i in range(0, len(refs), 2))


def series_of(request: write_v2_pb2.Request) -> list[Frame]:
    """The series of a decoded RW 2.0 Request, symbols resolved."""
    symbols = list(request.symbols)
    assert symbols[:1] == [""], "symbols[0] must be the empty string"
    out = []
    for ts in request.timeseries:
        exemplars = tuple(
            Exemplar(_pairs(e.labels_refs, symbols), struct.pack("<d", e.value), e.timestamp)
            for e in ts.exemplars
        )
        meta = ts.metadata
        out.append(
            Frame(
                labels=_pairs(ts.labels_refs, symbols),
                samples=tuple(s.SerializeToString() for s in ts.samples),
                histograms=tuple(h.SerializeToString() for h in ts.histograms),
                exemplars=exemplars,
                metadata=(int(meta.type), symbols[meta.help_ref], symbols[meta.unit_ref]),
            )
        )
    return out


def decode_v2(raw: bytes) -> write_v2_pb2.Request:
    """Parse an uncompressed RW 2.0 Request."""
    request = write_v2_pb2.Request()
    request.ParseFromString(raw)
    return request


def resolver(book: dict[str, MetaText]) -> tuple[dict[bytes, Meta | None], Resolve]:
    """(memo, resolve) over ``book`` (metric name -> metadata), for ``encode_request``."""

    def resolve(name: bytes) -> Meta | None:
        found = book.get(name.decode())
        return None if found is None else (found[0], found[1].encode(), found[2].encode())

    return {}, resolve
