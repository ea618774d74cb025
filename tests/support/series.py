"""Build and take apart remote write 1.0 bodies in tests (snappy block + protobuf).

Uses the generated ``rwrouter.wire.remote_pb2`` and python-snappy. Label sets are given as a
mapping or (name, value) pairs and are always encoded sorted by name (RW 1.0 requires it).
Sample values can be given as floats or as the exact 8 bytes (little-endian IEEE 754) to send,
so NaN payloads such as the staleness marker are preserved bit for bit.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.wire import remote_pb2, types_pb2

LabelSet = tuple[tuple[str, str], ...]
#: The staleness marker Prometheus writes (a NaN with a payload), as its 8 wire bytes.
STALE_NAN = struct.pack("<Q", 0x7FF0000000000002)

HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


def label_set(labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> LabelSet:
    """Normalise to a tuple of (name, value) pairs sorted by name."""
    return tuple(sorted(dict(labels).items()))


@dataclass(frozen=True)
class Series:
    """One series to send: labels, and samples as (timestamp ms, value float or 8 bytes)."""

    labels: LabelSet
    samples: Sequence[tuple[int, float | bytes]] = field(default_factory=tuple)


def _value(value: float | bytes) -> float:
    if isinstance(value, bytes):
        (decoded,) = struct.unpack("<d", value)
        return float(decoded)
    return value


def write_request(
    series: Iterable[Series], *, metadata: Iterable[types_pb2.MetricMetadata] = ()
) -> remote_pb2.WriteRequest:
    """The protobuf ``WriteRequest`` for ``series`` (labels sorted)."""
    request = remote_pb2.WriteRequest()
    for item in series:
        ts = request.timeseries.add()
        for name, value in label_set(item.labels):
            ts.labels.add(name=name, value=value)
        for timestamp_ms, sample in item.samples:
            ts.samples.add(value=_value(sample), timestamp=timestamp_ms)
    request.metadata.extend(metadata)
    return request


def encode(request: remote_pb2.WriteRequest) -> bytes:
    """Serialise and snappy-block-compress ``request`` (the HTTP body)."""
    return bytes(snappy.compress(request.SerializeToString()))


def build_body(series: Iterable[Series]) -> bytes:
    """The snappy-compressed remote write body for ``series``."""
    return encode(write_request(series))


def decode(body: bytes) -> tuple[remote_pb2.WriteRequest, bytes]:
    """Decompress and parse a body; returns the request and the raw protobuf bytes."""
    raw = bytes(snappy.decompress(body))
    request = remote_pb2.WriteRequest()
    request.ParseFromString(raw)
    return request, raw


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterable[tuple[int, int, bytes]]:
    """(field number, wire type, payload) of each field of a protobuf message."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            start = pos
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            start, pos = pos, pos + 8
        elif wire_type == 2:
            length, start = _varint(data, pos)
            pos = start + length
        elif wire_type == 5:
            start, pos = pos, pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        yield number, wire_type, data[start:pos]


def raw_sample_values(raw: bytes) -> list[list[bytes]]:
    """Per time series, the exact 8 bytes of each sample value, read from the protobuf wire.

    ``raw`` is the decompressed ``WriteRequest``. A sample whose value field is absent (0.0 is
    the proto3 default and may be omitted) gives eight zero bytes.
    """
    result = []
    for number, _, series in _fields(raw):
        if number != 1:  # WriteRequest.timeseries
            continue
        values = []
        for series_field, _, sample in _fields(series):
            if series_field == 2:  # TimeSeries.samples
                value = bytes(8)
                for sample_field, wire_type, payload in _fields(sample):
                    if sample_field == 1 and wire_type == 1:  # Sample.value (double)
                        value = payload
                values.append(value)
        result.append(values)
    return result
