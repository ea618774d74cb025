"""Checks of the remote write messages the router forwards without decoding them (pure):
samples, exemplars, native histograms (down to bucket spans and packed fields), metadata.

A receiver refuses a whole batch for one malformed message, so the router refuses the request
that carries it (400) instead. Field numbers and types: RW 1.0 spec (``prompb/types.proto``),
plus the start timestamps of RW 2.0 (spec 2.0-rc.4, ``io/prometheus/write/v2/types.proto``):
Sample field 3 and Histogram field 17, int64 varints, which the RW1 form keeps where they are.
"""

from __future__ import annotations

from rwrouter.errors import DecodeError
from rwrouter.wire.walk import I64, LEN, VARINT, check_message, fields, read_varint, utf8

# Expected wire types of the fields we forward; packed repeated scalars may also come as LEN.
_SAMPLE_FIELDS: dict[int, tuple[int, ...]] = {1: (I64,), 2: (VARINT,), 3: (VARINT,)}
_EXEMPLAR_FIELDS: dict[int, tuple[int, ...]] = {1: (LEN,), 2: (I64,), 3: (VARINT,)}
_HISTOGRAM_FIELDS: dict[int, tuple[int, ...]] = {
    1: (VARINT,),
    2: (I64,),
    3: (I64,),
    4: (VARINT,),
    5: (I64,),
    6: (VARINT,),
    7: (I64,),
    8: (LEN,),
    9: (LEN, VARINT),
    10: (LEN, I64),
    11: (LEN,),
    12: (LEN, VARINT),
    13: (LEN, I64),
    14: (VARINT,),
    15: (VARINT,),
    16: (LEN, I64),
    17: (VARINT,),
}
_METADATA_FIELDS: dict[int, tuple[int, ...]] = {1: (VARINT,), 2: (LEN,), 4: (LEN,), 5: (LEN,)}
_METADATA_STRINGS = frozenset((2, 4, 5))


def check_sample(ts: bytes, start: int, stop: int) -> None:
    """A Sample: framing and the wire types of value (double), timestamp and start timestamp
    (varints; the start timestamp is RW 2.0's field 3). Raises DecodeError."""
    check_message(ts, start, stop, _SAMPLE_FIELDS, "sample")


_BUCKET_SPAN_FIELDS: dict[int, tuple[int, ...]] = {1: (VARINT,), 2: (VARINT,)}
_SPANS, _PACKED_VARINTS, _PACKED_DOUBLES = (
    frozenset((8, 11)),
    frozenset((9, 12)),
    frozenset((10, 13, 16)),
)


def check_histogram(ts: bytes, start: int, stop: int) -> None:
    """A native histogram, down to its bucket spans and packed deltas/counts (a receiver
    would refuse the whole batch for one malformed histogram), and its start timestamp (RW
    2.0's field 17, a varint). Raises DecodeError."""
    for field, wire_type, _, vstart, vend in fields(ts, start, stop, "histogram"):
        allowed = _HISTOGRAM_FIELDS.get(field)
        if allowed is not None and wire_type not in allowed:
            raise DecodeError(f"bad protobuf: histogram field {field} has wire type {wire_type}")
        if wire_type != LEN:
            continue
        if field in _SPANS:
            check_message(ts, vstart, vend, _BUCKET_SPAN_FIELDS, "histogram bucket span")
        elif field in _PACKED_VARINTS:
            pos = vstart
            while pos < vend:
                pos = read_varint(ts, pos, vend)[1]
        elif field in _PACKED_DOUBLES and (vend - vstart) % 8:
            raise DecodeError(f"bad protobuf: packed doubles of histogram field {field} are cut")


def check_exemplar(ts: bytes, start: int, stop: int) -> None:
    for field, wire_type, _, vstart, vend in fields(ts, start, stop, "exemplar"):
        allowed = _EXEMPLAR_FIELDS.get(field)
        if allowed is not None and wire_type not in allowed:
            raise DecodeError(f"bad protobuf: exemplar field {field} has wire type {wire_type}")
        if field == 1:
            decode_label(ts, vstart, vend, "exemplar label")


def check_metadata(data: bytes, start: int, end: int) -> bytes:
    for field, wire_type, _, vstart, vend in fields(data, start, end, "metadata"):
        allowed = _METADATA_FIELDS.get(field)
        if allowed is not None and wire_type not in allowed:
            raise DecodeError(f"bad protobuf: metadata field {field} has wire type {wire_type}")
        if field in _METADATA_STRINGS:
            utf8(data, vstart, vend, "metadata")
    return data[start:end]


def decode_label(buf: bytes, start: int, end: int, what: str = "label") -> tuple[str, str]:
    """Decode one Label message payload into (name, value); checks UTF-8 (400 otherwise)."""
    name = value = ""
    for field, wire_type, _, vstart, vend in fields(buf, start, end, what):
        if field in (1, 2):
            if wire_type != LEN:
                raise DecodeError(f"bad protobuf: {what} field {field} has wire type {wire_type}")
            text = utf8(buf, vstart, vend, f"{what} {'name' if field == 1 else 'value'}")
            if field == 1:
                name = text
            else:
                value = text
    return name, value
