"""Remote write 1.0 codec: a label-only protobuf walk (pure); the snappy block framing is in
:mod:`rwrouter.wire.block`.

Protobuf primitives live in :mod:`rwrouter.wire.walk`, the checks of the messages forwarded
without decoding (samples, exemplars, histograms, metadata) in :mod:`rwrouter.wire.validate`.

The router never turns samples, exemplars or native histograms into Python numbers: a series is
split into the raw bytes of its ``Label`` fields (the routing cache key) and the raw bytes of
everything else (``rest``), which is forwarded bit for bit — so a staleness marker
(``0x7ff0000000000002``) arrives unchanged. Only labels are ever decoded and re-encoded.

Wire schema (RW 1.0 spec, field numbers from ``prompb``): WriteRequest{timeseries=1, metadata=3},
TimeSeries{labels=1, samples=2, exemplars=3, histograms=4}, Label{name=1, value=2},
Sample{value=1 double, timestamp=2 int64}, MetricMetadata{type=1, metric_family_name=2, help=4,
unit=5}. Everything forwarded is checked for well-formed framing and the wire type of every known
field, and every string for UTF-8, so one malformed request is refused whole (400) instead of
making a destination reject a batch that also carries other requests' series.
"""

from __future__ import annotations

from dataclasses import dataclass

from rwrouter.errors import DecodeError
from rwrouter.wire.validate import (
    check_exemplar,
    check_histogram,
    check_sample,
    decode_label,
)
from rwrouter.wire.walk import LEN, encode_varint, fields, read_varint


@dataclass(frozen=True, slots=True)
class RawSeries:
    """One TimeSeries as received.

    ``labels``: the raw bytes of its Label fields (each ``0a <len> <Label>``), in received order.
    ``rest``: the raw bytes of all its other fields (samples, exemplars, histograms), unchanged.
    ``samples``/``exemplars``/``histograms``: how many of each it carries.
    """

    labels: bytes
    rest: bytes
    samples: int
    exemplars: int
    histograms: int


def decode_labels(raw: bytes) -> tuple[tuple[str, str], ...]:
    """Decode the raw Label fields of a series (``RawSeries.labels``) into a valid label set.

    Returns (name, value) pairs sorted by name, with empty-valued labels removed (an empty value
    means "absent", RW 1.0 spec). Raises DecodeError for invalid UTF-8, an empty label name or a
    repeated label name.
    """
    labels: dict[str, str] = {}
    for field, _, _, start, end in fields(raw, 0, len(raw), "series"):
        if field != 1:
            continue
        name, value = decode_label(raw, start, end)
        if not name:
            raise DecodeError(f"label with an empty name (value {value!r})")
        if name in labels:
            raise DecodeError(f"duplicate label name {name!r}")
        labels[name] = value
    return tuple(sorted((n, v) for n, v in labels.items() if v))


def encode_labels(labels: tuple[tuple[str, str], ...]) -> bytes:
    """Encode a label set as the Label fields of a TimeSeries (``0a <len> <Label>`` each)."""
    out = bytearray()
    for name, value in labels:
        n = name.encode()
        v = value.encode()
        payload = b"\x0a" + encode_varint(len(n)) + n + b"\x12" + encode_varint(len(v)) + v
        out += b"\x0a" + encode_varint(len(payload)) + payload
    return bytes(out)


def frame_metadata(payload: bytes) -> bytes:
    """One ``metadata`` field of a WriteRequest around a raw MetricMetadata payload."""
    return b"\x1a" + encode_varint(len(payload)) + payload


def metadata_family(payload: bytes) -> str:
    """The ``metric_family_name`` of a raw (already validated) MetricMetadata payload."""
    family = ""
    for field, _, _, start, end in fields(payload, 0, len(payload), "metadata"):
        if field == 2:
            family = payload[start:end].decode("utf-8")
    return family


def split_series(ts: bytes) -> RawSeries:
    """Split one TimeSeries payload into raw label fields and raw other fields (see RawSeries).

    Fast path: labels come first and contiguous (what every sender does); interleaved fields are
    handled too. Raises DecodeError for malformed framing or wire types.
    """
    end = len(ts)
    pos = 0
    # Fast scan of the leading Label fields: tag 0x0a, one-byte length, payload.
    while pos < end and ts[pos] == 0x0A:
        if pos + 1 < end and ts[pos + 1] < 0x80:
            pos += 2 + ts[pos + 1]
        else:
            length, vstart = read_varint(ts, pos + 1, end)
            pos = vstart + length
    if pos > end:
        raise DecodeError("bad protobuf: label runs past the end of its series")
    labels_end = pos
    samples = _plain_samples(ts, pos, end)
    if samples:  # the usual shape: labels, then only well-formed samples
        return RawSeries(ts[:labels_end], ts[labels_end:], samples, 0, 0)
    return _split_general(ts, labels_end)


def _split_general(ts: bytes, labels_end: int) -> RawSeries:
    """:func:`split_series` after the leading labels, for any field layout (the slow path)."""
    end = len(ts)
    pos = labels_end
    samples = exemplars = histograms = 0
    extra_labels: list[bytes] = []
    rest_parts: list[bytes] = []
    rest_start = pos
    for field, wire_type, head, start, stop in fields(ts, pos, end, "series"):
        if wire_type != LEN and field in (1, 2, 3, 4):
            raise DecodeError(f"bad protobuf: series field {field} has wire type {wire_type}")
        if field == 2:
            samples += 1
            check_sample(ts, start, stop)
        elif field == 3:
            exemplars += 1
            check_exemplar(ts, start, stop)
        elif field == 4:
            histograms += 1
            check_histogram(ts, start, stop)
        elif field == 1:  # a label after other fields: move it to the label part
            rest_parts.append(ts[rest_start:head])
            extra_labels.append(ts[head:stop])
            rest_start = stop
    if not extra_labels:
        return RawSeries(ts[:labels_end], ts[labels_end:], samples, exemplars, histograms)
    rest_parts.append(ts[rest_start:])
    labels = ts[:labels_end] + b"".join(extra_labels)
    return RawSeries(labels, b"".join(rest_parts), samples, exemplars, histograms)


def _plain_samples(ts: bytes, pos: int, end: int) -> int:
    """How many samples make up all of ``ts[pos:end]`` when it is only Sample fields of the
    shapes senders write (``12 <len> [09 <8 bytes>] [10 <varint>]``); 0 when it is anything
    else (then the general walk decides). A fast path: no generator, no per-field dict."""
    count = 0
    while pos < end:
        if ts[pos] != 0x12 or pos + 1 >= end or ts[pos + 1] >= 0x80:
            return 0
        body, stop = pos + 2, pos + 2 + ts[pos + 1]
        if stop > end:
            return 0
        if body < stop and ts[body] == 0x09:  # value: 8 bytes
            body += 9
        if body < stop:  # timestamp: a varint ending exactly at stop
            if ts[body] != 0x10 or not 2 <= stop - body <= 11 or ts[stop - 1] >= 0x80:
                return 0
            if stop - body > 2 and min(ts[body + 1 : stop - 1]) < 0x80:
                return 0
        elif body > stop:
            return 0
        count += 1
        pos = stop
    return count


def strip_fields(rest: bytes, field_numbers: frozenset[int]) -> bytes:
    """``rest`` without the given TimeSeries fields (e.g. exemplars=3 when a destination has
    ``send_exemplars: false``); the other fields keep their bytes and order."""
    parts = [
        rest[head:stop]
        for field, _, head, _, stop in fields(rest, 0, len(rest), "series")
        if field not in field_numbers
    ]
    return b"".join(parts)
