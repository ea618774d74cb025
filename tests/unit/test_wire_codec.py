"""The wire codec (rwrouter.wire.codec) against the generated protobuf code as the reference.

RW 1.0 spec: snappy block framing, WriteRequest{timeseries=1, metadata=3}, TimeSeries{labels=1,
samples=2, exemplars=3, histograms=4}, Label{name=1, value=2}, Sample{value=1 double,
timestamp=2 int64}. Samples travel as raw bytes, so NaN payloads must survive bit for bit.
"""

from __future__ import annotations

import struct
import time

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import DecodeError as ProtobufDecodeError  # type: ignore[import-untyped,unused-ignore]
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.errors import DecodeError, TooLargeError
from rwrouter.routing import Route, Router
from rwrouter.wire import (
    block,
    codec,
    compress,
    decode_labels,
    decompress,
    encode_labels,
    frame_metadata,
    metadata_family,
    remote_pb2,
    strip_fields,
    types_pb2,
)
from rwrouter.wire.walk import encode_varint
from tests.support.frames import frame_series, parse_write_request

STALE_BITS = 0x7FF0000000000002  # Prometheus staleness marker
PROM_NAN_BITS = 0x7FF8000000000001  # Prometheus "normal" NaN
LIMIT = 1 << 20

# ---------------------------------------------------------------------------------------------
# Hand-made protobuf bytes


def tag(field: int, wire_type: int) -> bytes:
    return encode_varint(field << 3 | wire_type)


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag(field, 2) + encode_varint(len(payload)) + payload


def label(name: bytes | str, value: bytes | str) -> bytes:
    """One TimeSeries ``labels`` field."""
    n = name.encode() if isinstance(name, str) else name
    v = value.encode() if isinstance(value, str) else value
    return ld(1, ld(1, n) + ld(2, v))


def sample(bits: int, timestamp: int) -> bytes:
    """One TimeSeries ``samples`` field with the value given as its 64 IEEE 754 bits."""
    return ld(2, tag(1, 1) + struct.pack("<Q", bits) + tag(2, 0) + encode_varint(timestamp))


def bits_of(value: float) -> int:
    (bits,) = struct.unpack("<Q", struct.pack("<d", value))
    return int(bits)


def series_bytes(*fields: bytes) -> bytes:
    """One WriteRequest ``timeseries`` field around the given TimeSeries fields."""
    return ld(1, b"".join(fields))


def parse_pb(data: bytes) -> remote_pb2.WriteRequest:
    request = remote_pb2.WriteRequest()
    request.ParseFromString(data)
    return request


def pb_labels(ts: types_pb2.TimeSeries) -> list[tuple[str, str]]:
    return [(lab.name, lab.value) for lab in ts.labels]


def reframe(data: bytes) -> bytes:
    """What the router sends for ``data`` with no rules: every series re-encoded + metadata."""
    parts = parse_write_request(data)
    out = [frame_series(encode_labels(decode_labels(s.labels)), s.rest) for s in parts.series]
    out += [frame_metadata(m) for m in parts.metadata]
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# decompress


def test_decompress_empty_body() -> None:
    with pytest.raises(DecodeError, match="empty body"):
        decompress(b"", max_decoded_bytes=LIMIT)


@pytest.mark.parametrize(
    "body",
    [
        bytes.fromhex("ff060000734e61507059"),
        bytes.fromhex("ff060000734e61507059") + bytes.fromhex("0108000031e0a6a9") + b"abc",
        bytes(snappy.StreamCompressor().add_chunk(b"hello")),
    ],
    ids=["magic_only", "magic_and_chunk", "stream_compressor_output"],
)
def test_decompress_refuses_framed_format(body: bytes) -> None:
    with pytest.raises(DecodeError, match="framed"):
        decompress(body, max_decoded_bytes=LIMIT)


def test_decompress_huge_declared_length_is_refused_before_decompressing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(*_: object, **__: object) -> bytes:
        raise AssertionError("snappy.decompress must not be called")

    monkeypatch.setattr(snappy, "decompress", boom)
    started = time.perf_counter()
    with pytest.raises(TooLargeError) as info:
        decompress(bytes.fromhex("ffffffff0f0061"), max_decoded_bytes=LIMIT)
    assert time.perf_counter() - started < 0.05
    assert info.value.status == 413
    assert "4294967295" in str(info.value)


@pytest.mark.parametrize(
    ("size", "limit", "too_large"),
    [(1000, 999, True), (1000, 1000, False), (0, 0, False), (1, 0, True)],
    ids=["one_over", "exactly_at_limit", "empty_at_zero_limit", "one_byte_over_zero_limit"],
)
def test_decompress_declared_length_limit(size: int, limit: int, too_large: bool) -> None:
    body = compress(b"x" * size)
    if too_large:
        with pytest.raises(TooLargeError):
            decompress(body, max_decoded_bytes=limit)
    else:
        assert decompress(body, max_decoded_bytes=limit) == b"x" * size


def test_decompress_single_zero_byte_is_an_empty_request() -> None:
    data = decompress(b"\x00", max_decoded_bytes=LIMIT)
    assert data == b""
    parts = parse_write_request(data)
    assert parts.series == [] and parts.metadata == []


@pytest.mark.parametrize(
    "body",
    [
        b"\x05\x00",
        b"\x0a\x08abc",
        b"\x02\x08abc",
        b"\x01\x00ab",
        snappy.compress(b"a" * 100)[:-1],
        b"\x80",
        b"\xff" * 11,
    ],
    ids=[
        "declared_5_literal_missing",
        "declared_more_than_produced",
        "declared_less_than_produced",
        "trailing_garbage",
        "truncated_copy",
        "truncated_length_varint",
        "overlong_length_varint",
    ],
)
def test_decompress_corrupt_block(body: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decompress(body, max_decoded_bytes=LIMIT)
    assert not isinstance(info.value, TooLargeError)
    assert info.value.status == 400


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=3000),
    cut=st.integers(min_value=0, max_value=40),
    flip=st.integers(min_value=0, max_value=255),
)
def test_decompress_in_place_as_python_snappy(data: bytes, cut: int, flip: int) -> None:
    """The accelerated decompress (the decoder writing into the bytes returned) and
    python-snappy's give the same bytes, and refuse the same damaged blocks."""
    body = compress(data)
    damaged = body[: max(1, len(body) - cut)]
    if flip and len(damaged) > 2:
        damaged = damaged[:2] + bytes([damaged[2] ^ flip]) + damaged[3:]
    for case in (body, damaged):
        outcomes: list[bytes | type[DecodeError]] = []
        for blank in (block._blank_bytes, None):
            saved = block._blank_bytes
            block._blank_bytes = blank
            try:
                outcomes.append(decompress(case, max_decoded_bytes=LIMIT))
            except DecodeError as exc:
                outcomes.append(type(exc))
            finally:
                block._blank_bytes = saved
        assert outcomes[0] == outcomes[1]


@settings(max_examples=200, deadline=None)
@given(data=st.one_of(st.binary(max_size=5000), st.binary(max_size=8).map(lambda b: b * 700)))
def test_compress_gives_python_snappys_block(data: bytes) -> None:
    assert compress(data) == snappy.compress(data)


def test_compress_round_trip() -> None:
    data = bytes(range(256)) * 10
    assert decompress(compress(data), max_decoded_bytes=LIMIT) == data
    assert snappy.decompress(compress(data)) == data


# splice_compressed: several snappy blocks as one, without decompressing them

SPLICE_CASES = [
    # id, decoded parts (each compressed alone, then spliced)
    ("one_block_as_is", [b"abc" * 100]),
    ("two_blocks", [b"abc" * 100, b"xyz" * 100]),
    ("with_an_empty_block", [b"", b"abc" * 40, b""]),
    ("copies_reach_back_in_their_own_block", [b"0123456789" * 7000, b"0123456789" * 7000]),
    ("a_block_over_64k", [bytes(range(256)) * 400, b"tail"]),
]


@pytest.mark.parametrize("parts", [c[1] for c in SPLICE_CASES], ids=[c[0] for c in SPLICE_CASES])
def test_splice_compressed_decodes_to_the_parts_concatenated(parts: list[bytes]) -> None:
    spliced = block.splice_compressed([compress(p) for p in parts])
    whole = b"".join(parts)
    assert decompress(spliced, max_decoded_bytes=LIMIT) == whole == snappy.decompress(spliced)
    assert block.declared_size(spliced) == len(whole)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=3000).map(lambda b: b * 3), min_size=1, max_size=6))
def test_splice_compressed_random_blocks(parts: list[bytes]) -> None:
    assert snappy.decompress(block.splice_compressed([compress(p) for p in parts])) == b"".join(
        parts
    )


def test_spliced_write_requests_are_one_write_request() -> None:
    """Protobuf encodings concatenate into their merge: the series of both, in order."""
    reqs = [remote_pb2.WriteRequest() for _ in range(2)]
    for i, req in enumerate(reqs):
        ts = req.timeseries.add()
        ts.labels.add(name="__name__", value=f"m{i}")
        ts.samples.add(value=float(i), timestamp=i)
    body = block.splice_compressed([compress(r.SerializeToString()) for r in reqs])
    merged = remote_pb2.WriteRequest.FromString(decompress(body, max_decoded_bytes=LIMIT))
    assert [ts.labels[0].value for ts in merged.timeseries] == ["m0", "m1"]


@pytest.mark.parametrize("bad", [b"", b"\xff" * 11], ids=["empty_block", "overlong_varint"])
def test_splice_compressed_refuses_an_unreadable_header(bad: bytes) -> None:
    with pytest.raises(DecodeError, match="uncompressed-length varint"):
        block.splice_compressed([compress(b"ok"), bad])


# ---------------------------------------------------------------------------------------------
# Taking a request apart (tests/support/frames.py) against the generated protobuf


def _request_samples_exemplars() -> remote_pb2.WriteRequest:
    req = remote_pb2.WriteRequest()
    ts = req.timeseries.add()
    ts.labels.add(name="__name__", value="gpu_util")
    ts.labels.add(name="gpu", value="0")
    ts.samples.add(value=0.5, timestamp=1_700_000_000_000)
    ts.samples.add(value=-1.25, timestamp=1_700_000_015_000)
    ex = ts.exemplars.add(value=0.5, timestamp=1_700_000_000_001)
    ex.labels.add(name="trace_id", value="abc")
    ts2 = req.timeseries.add()
    ts2.labels.add(name="__name__", value="up")
    ts2.samples.add(value=1, timestamp=-5)
    return req


def _request_histogram() -> remote_pb2.WriteRequest:
    req = remote_pb2.WriteRequest()
    ts = req.timeseries.add()
    ts.labels.add(name="__name__", value="latency_seconds")
    ts.labels.add(name="job", value="api")
    h = ts.histograms.add(
        count_int=12,
        sum=3.5,
        schema=-2,
        zero_threshold=1e-128,
        zero_count_int=1,
        negative_deltas=[1, -1],
        positive_deltas=[2, 3, -4],
        reset_hint=types_pb2.Histogram.NO,
        timestamp=1_700_000_000_000,
    )
    h.negative_spans.add(offset=-3, length=2)
    h.positive_spans.add(offset=0, length=2)
    h.positive_spans.add(offset=5, length=1)
    fh = ts.histograms.add(
        count_float=2.5,
        sum=1.0,
        schema=0,
        zero_count_float=0.5,
        positive_counts=[1.0, 1.0],
        custom_values=[0.1, 1.0],
        timestamp=1_700_000_001_000,
    )
    fh.positive_spans.add(offset=0, length=2)
    return req


def _request_metadata_only() -> remote_pb2.WriteRequest:
    req = remote_pb2.WriteRequest()
    req.metadata.add(
        type=types_pb2.MetricMetadata.COUNTER,
        metric_family_name="http_requests_total",
        help="Requests. ✓",
        unit="requests",
    )
    req.metadata.add(type=types_pb2.MetricMetadata.GAUGE, metric_family_name="up")
    return req


def _request_mixed() -> remote_pb2.WriteRequest:
    req = _request_samples_exemplars()
    req.MergeFrom(_request_histogram())
    req.MergeFrom(_request_metadata_only())
    return req


@pytest.mark.parametrize(
    ("build", "counts"),
    [
        (_request_samples_exemplars, [(2, 1, 0), (1, 0, 0)]),
        (_request_histogram, [(0, 0, 2)]),
        (_request_metadata_only, []),
        (_request_mixed, [(2, 1, 0), (1, 0, 0), (0, 0, 2)]),
        (remote_pb2.WriteRequest, []),
    ],
    ids=["samples_and_exemplars", "native_histograms", "metadata_only", "mixed", "empty"],
)
def test_round_trip_matches_protobuf(build: object, counts: list[tuple[int, int, int]]) -> None:
    assert callable(build)
    request = build()
    data = request.SerializeToString()
    parts = parse_write_request(data)
    assert [(s.samples, s.exemplars, s.histograms) for s in parts.series] == counts
    assert len(parts.metadata) == len(request.metadata)
    again = reframe(data)
    assert again == data  # sorted labels, nothing changed: bit-identical
    assert parse_pb(again) == request


def test_metadata_family_and_payload() -> None:
    request = _request_metadata_only()
    parts = parse_write_request(request.SerializeToString())
    assert [metadata_family(m) for m in parts.metadata] == ["http_requests_total", "up"]
    assert parts.metadata == [m.SerializeToString() for m in request.metadata]


def test_labels_sent_unsorted_are_sorted_on_output() -> None:
    data = series_bytes(
        label("zone", "b"), label("__name__", "m"), label("a", "1"), sample(bits_of(1.0), 7)
    )
    (raw,) = parse_write_request(data).series
    assert decode_labels(raw.labels) == (("__name__", "m"), ("a", "1"), ("zone", "b"))
    out = parse_pb(reframe(data))
    assert pb_labels(out.timeseries[0]) == [("__name__", "m"), ("a", "1"), ("zone", "b")]
    assert out.timeseries[0].samples[0].value == 1.0


def test_labels_interleaved_after_samples() -> None:
    s1, s2 = sample(bits_of(1.0), 1), sample(bits_of(2.0), 2)
    unknown = tag(9, 0) + encode_varint(42)
    data = series_bytes(
        label("job", "a"), s1, label("__name__", "m"), unknown, s2, label("instance", "h")
    )
    (raw,) = parse_write_request(data).series
    assert raw.labels == label("job", "a") + label("__name__", "m") + label("instance", "h")
    assert raw.rest == s1 + unknown + s2
    assert raw.samples == 2
    assert decode_labels(raw.labels) == (("__name__", "m"), ("instance", "h"), ("job", "a"))
    reference = parse_pb(data)
    out = parse_pb(reframe(data))
    assert sorted(pb_labels(reference.timeseries[0])) == pb_labels(out.timeseries[0])
    assert list(out.timeseries[0].samples) == list(reference.timeseries[0].samples)


def test_label_with_multibyte_length_and_fast_path() -> None:
    long_value = "v" * 300  # lengths > 127 need a two-byte varint
    data = series_bytes(label("__name__", "m"), label("long", long_value), sample(0, 1))
    (raw,) = parse_write_request(data).series
    assert decode_labels(raw.labels) == (("__name__", "m"), ("long", long_value))
    assert raw.rest == sample(0, 1)


def test_empty_label_values_are_dropped() -> None:
    raw = label("__name__", "m") + label("env", "") + label("job", "a")
    assert decode_labels(raw) == (("__name__", "m"), ("job", "a"))
    assert (
        parse_pb(frame_series(encode_labels(decode_labels(raw)), b"")).timeseries[0].labels[1].name
        == "job"
    )


def test_label_fields_missing_mean_empty() -> None:
    # Label{value=2} only: an empty name; Label{name=1} only: an empty value (dropped).
    assert decode_labels(ld(1, ld(1, b"a")) + label("__name__", "m")) == (("__name__", "m"),)
    with pytest.raises(DecodeError, match="empty name"):
        decode_labels(ld(1, ld(2, b"x")))


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (label("a", "1") + label("a", "2"), "duplicate label name 'a'"),
        (label("a", "1") + label("b", "x") + label("a", "1"), "duplicate label name 'a'"),
        (label("a", "") + label("a", "x"), "duplicate"),
        (label("", "x"), "empty name"),
        (label("", ""), "empty name"),
        (label("f", bytes.fromhex("66fffe")), r"invalid UTF-8 in label value: b'f\\xff\\xfe'"),
        (label(bytes.fromhex("66fffe"), "v"), "invalid UTF-8 in label name"),
        (label("a", b"\xed\xa0\x80"), "invalid UTF-8"),  # an encoded surrogate
        (label("a", b"\xc0\xaf"), "invalid UTF-8"),  # overlong encoding
        (ld(1, tag(1, 0) + b"\x01"), "wire type 0"),
        (ld(1, tag(2, 5) + b"\x00\x00\x00\x00"), "wire type 5"),
        (ld(1, ld(1, b"abc")[:-1]), "past the end"),
    ],
    ids=[
        "duplicate_name",
        "duplicate_name_not_adjacent",
        "duplicate_name_one_empty",
        "empty_name",
        "empty_name_and_value",
        "invalid_utf8_value",
        "invalid_utf8_name",
        "utf8_surrogate",
        "utf8_overlong",
        "name_wrong_wire_type",
        "value_wrong_wire_type",
        "label_truncated",
    ],
)
def test_decode_labels_refuses(raw: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match) as info:
        decode_labels(raw)
    assert info.value.status == 400


def test_invalid_utf8_is_also_refused_by_protobuf() -> None:
    """Reference check: Python protobuf refuses the same bytes (we answer 400)."""
    data = series_bytes(label("f", bytes.fromhex("66fffe")))
    with pytest.raises(ProtobufDecodeError):
        parse_pb(data)


MALFORMED: list[tuple[str, bytes]] = [
    # WriteRequest level
    ("top_truncated_key_varint", b"\x80"),
    ("top_truncated_length_varint", b"\x0a\x80"),
    ("top_length_missing", b"\x0a"),
    ("top_length_past_end", b"\x0a\x05\x0a\x00"),
    ("top_timeseries_wire_type_varint", b"\x08\x01"),
    ("top_metadata_wire_type_i64", b"\x19" + b"\x00" * 8),
    ("top_field_number_0", b"\x02\x00"),
    ("top_field_number_0_varint", b"\x00\x00"),
    ("top_wire_type_3_start_group", b"\x0b"),
    ("top_wire_type_4_end_group", b"\x0c"),
    ("top_wire_type_6", b"\x0e"),
    ("top_wire_type_7", b"\x0f"),
    ("top_unknown_i64_truncated", tag(7, 1) + b"\x00\x00\x00"),
    ("top_unknown_i32_truncated", tag(7, 5) + b"\x00"),
    ("top_unknown_varint_truncated", tag(7, 0) + b"\xff"),
    ("top_overlong_varint", tag(7, 0) + b"\xff" * 10 + b"\x01"),
    # TimeSeries level
    ("series_label_wire_type_varint", series_bytes(b"\x08\x01")),
    ("series_samples_wire_type_varint", series_bytes(label("a", "b"), b"\x10\x01")),
    ("series_exemplars_wire_type_i64", series_bytes(tag(3, 1) + b"\x00" * 8)),
    ("series_histograms_wire_type_i32", series_bytes(tag(4, 5) + b"\x00" * 4)),
    ("series_label_length_past_end", series_bytes(b"\x0a\x09\x0a\x01a")),
    ("series_label_length_past_end_2byte", series_bytes(b"\x0a\x80\x01\x0a\x01a")),
    ("series_label_truncated_length", series_bytes(b"\x0a")),
    ("series_sample_truncated", series_bytes(label("a", "b"), ld(2, b"\x09\x00\x00"))),
    ("series_field_number_0", series_bytes(label("a", "b"), b"\x00\x01")),
    ("series_unknown_wire_type_7", series_bytes(label("a", "b"), tag(9, 7))),
    ("series_label_after_sample_wire_type", series_bytes(sample(0, 1), b"\x08\x01")),
    # Sample, exemplar, histogram, metadata contents
    ("sample_value_wire_type_varint", series_bytes(ld(2, b"\x08\x01"))),
    ("sample_timestamp_wire_type_i64", series_bytes(ld(2, tag(2, 1) + b"\x00" * 8))),
    ("sample_field_number_0", series_bytes(ld(2, b"\x00\x00"))),
    ("sample_timestamp_tag_without_varint", series_bytes(label("a", "b"), ld(2, b"\x10"))),
    (
        "sample_timestamp_varint_unterminated",
        series_bytes(label("a", "b"), ld(2, b"\x09" + b"\x00" * 8 + b"\x10\x80\x80")),
    ),
    ("sample_value_cut", series_bytes(label("a", "b"), ld(2, b"\x09\x00\x00"))),
    (
        "sample_timestamp_varint_11_bytes",
        series_bytes(label("a", "b"), ld(2, b"\x10" + b"\xff" * 10 + b"\x01")),
    ),
    ("exemplar_label_invalid_utf8", series_bytes(ld(3, ld(1, ld(2, b"\xff"))))),
    ("exemplar_label_wire_type", series_bytes(ld(3, ld(1, b"\x08\x01")))),
    ("exemplar_value_wire_type_varint", series_bytes(ld(3, b"\x10\x01"))),
    ("histogram_schema_wire_type_i64", series_bytes(ld(4, tag(4, 1) + b"\x00" * 8))),
    ("histogram_span_wire_type_varint", series_bytes(ld(4, tag(8, 0) + b"\x01"))),
    ("histogram_truncated_double", series_bytes(ld(4, tag(3, 1) + b"\x00"))),
    ("histogram_span_payload_truncated", series_bytes(ld(4, ld(11, b"\xff")))),
    ("histogram_span_offset_wire_type", series_bytes(ld(4, ld(8, tag(1, 1) + b"\x00" * 8)))),
    ("histogram_packed_deltas_truncated", series_bytes(ld(4, ld(12, b"\x02\xff")))),
    ("histogram_packed_counts_cut", series_bytes(ld(4, ld(13, b"\x00" * 12)))),
    ("histogram_packed_custom_values_cut", series_bytes(ld(4, ld(16, b"\x00" * 7)))),
    ("metadata_type_wire_type_len", ld(3, ld(1, b""))),
    ("metadata_family_wire_type_varint", ld(3, tag(2, 0) + b"\x01")),
    ("metadata_family_invalid_utf8", ld(3, ld(2, b"a\xff"))),
    ("metadata_help_invalid_utf8", ld(3, ld(4, b"\xfe"))),
    ("metadata_unit_invalid_utf8", ld(3, ld(5, b"\x80"))),
    ("metadata_truncated", ld(3, ld(2, b"abc")[:-1])),
]


@pytest.mark.parametrize("data", [d for _, d in MALFORMED], ids=[n for n, _ in MALFORMED])
def test_malformed_requests_are_refused(data: bytes) -> None:
    """The receive path (the router's loop over the request) refuses each one whole (400), and
    so does the reference reader the other tests here use."""
    router = Router(global_rules=(), routes=[Route(name="d")])
    with pytest.raises(DecodeError) as info:
        router.route(data)
    assert info.value.status == 400
    with pytest.raises(DecodeError):
        parts = parse_write_request(data)
        for raw in parts.series:  # labels are validated lazily, per distinct label set
            decode_labels(raw.labels)


@pytest.mark.parametrize(
    "unknown",
    [
        tag(5, 0) + encode_varint(300),
        ld(6, b"opaque\xff"),
        tag(7, 1) + b"\x01" * 8,
        tag(8, 5) + b"\x02" * 4,
        tag(1000, 0) + b"\x00",
    ],
    ids=["varint", "len_not_utf8", "i64", "i32", "large_field_number"],
)
def test_unknown_series_fields_are_kept_in_rest(unknown: bytes) -> None:
    s = sample(bits_of(3.0), 10)
    data = series_bytes(label("__name__", "m"), s, unknown)
    (raw,) = parse_write_request(data).series
    assert raw.rest == s + unknown
    again = reframe(data)
    assert again == data
    reparsed = parse_pb(again)
    assert reparsed.SerializeToString() == data  # protobuf keeps unknown fields too


@pytest.mark.parametrize(
    "unknown",
    [
        ld(2, b"reserved field 2"),
        tag(4, 0) + b"\x07",
        tag(15, 1) + b"\x00" * 8,
        tag(16, 5) + b"\x00" * 4,
        ld(99, b"\xff\xfe"),
    ],
    ids=["reserved_2", "varint_4", "i64_15", "i32_16", "len_99_not_utf8"],
)
def test_unknown_top_level_fields_are_skipped(unknown: bytes) -> None:
    s = series_bytes(label("__name__", "m"), sample(0, 1))
    m = ld(3, ld(2, b"m"))
    parts = parse_write_request(unknown + s + unknown + m + unknown)
    assert len(parts.series) == 1 and len(parts.metadata) == 1
    assert reframe(unknown + s + unknown + m + unknown) == s + m


@pytest.mark.parametrize(
    "bits",
    [
        STALE_BITS,
        PROM_NAN_BITS,
        0x7FF8000000000000,
        0xFFF8000000000000,
        0x7FF0000000000000,
        0x8000000000000000,
        0x0000000000000001,
        0xFFFFFFFFFFFFFFFF,
    ],
    ids=[
        "staleness_marker",
        "prometheus_nan",
        "quiet_nan",
        "negative_nan",
        "inf",
        "minus_zero",
        "denormal",
        "all_ones_nan",
    ],
)
def test_sample_bits_survive(bits: int) -> None:
    s = sample(bits, 1_700_000_000_000)
    data = series_bytes(label("__name__", "m"), s)
    (raw,) = parse_write_request(data).series
    assert raw.rest == s
    again = reframe(data)
    assert struct.pack("<Q", bits) in again
    assert again == data


# ---------------------------------------------------------------------------------------------
# Encoders against protobuf


@pytest.mark.parametrize(
    "labels",
    [
        (),
        (("__name__", "up"),),
        (("__name__", "m"), ("a", "é✓"), ("b", "x" * 200), ("ü", "🙂")),
        (("__name__", "m"), ("k", "v" * 20000)),
    ],
    ids=["empty", "one", "unicode_and_two_byte_lengths", "three_byte_length"],
)
def test_encode_labels_parses_with_protobuf(labels: tuple[tuple[str, str], ...]) -> None:
    rest = sample(bits_of(1.5), 99)
    framed = frame_series(encode_labels(labels), rest)
    (ts,) = parse_pb(framed).timeseries
    assert tuple(pb_labels(ts)) == labels
    assert [(x.value, x.timestamp) for x in ts.samples] == [(1.5, 99)]
    assert decode_labels(encode_labels(labels)) == labels


def test_frame_metadata_parses_with_protobuf() -> None:
    md = types_pb2.MetricMetadata(
        type=types_pb2.MetricMetadata.HISTOGRAM, metric_family_name="x", help="h" * 300, unit="s"
    )
    (got,) = parse_pb(frame_metadata(md.SerializeToString())).metadata
    assert got == md


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (frozenset({3}), "se_h_u"),
        (frozenset({4}), "sex_u"),
        (frozenset({3, 4}), "se_u"),
        (frozenset(), "sex_h_u"),
    ],
    ids=["exemplars", "histograms", "both", "nothing"],
)
def test_strip_fields(fields: frozenset[int], expected: str) -> None:
    pieces = {
        "s": sample(bits_of(1.0), 1),
        "e": sample(STALE_BITS, 2),
        "x": ld(3, ld(1, ld(1, b"trace_id") + ld(2, b"t")) + tag(2, 1) + b"\x00" * 8),
        "h": ld(4, tag(1, 0) + b"\x05" + tag(15, 0) + b"\x01"),
        "u": tag(9, 0) + b"\x03",
        "_": b"",
    }
    rest = pieces["s"] + pieces["e"] + pieces["x"] + pieces["h"] + pieces["u"]
    assert strip_fields(rest, fields) == b"".join(pieces[c] for c in expected)


# ---------------------------------------------------------------------------------------------
# Property: decode -> re-encode -> frame is what protobuf sees, samples bit for bit

_names = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)
_values = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
_label_sets = st.dictionaries(_names, _values, max_size=8).flatmap(
    lambda d: st.permutations(list(d.items()))
)
_samples = st.lists(
    st.tuples(
        st.one_of(
            st.integers(0, 2**64 - 1),
            st.sampled_from([STALE_BITS, PROM_NAN_BITS, 0x7FF8000000000000, 0xFFF0000000000001]),
        ),
        st.integers(-(2**63), 2**63 - 1),
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(labels=_label_sets, samples=_samples)
def test_property_reencode_round_trip(
    labels: list[tuple[str, str]], samples: list[tuple[int, int]]
) -> None:
    sample_bytes = b"".join(
        ld(2, tag(1, 1) + struct.pack("<Q", bits) + tag(2, 0) + encode_varint(ts % 2**64))
        for bits, ts in samples
    )
    data = series_bytes(*(label(n, v) for n, v in labels), sample_bytes)
    (raw,) = parse_write_request(data).series
    assert raw.samples == len(samples)
    assert raw.rest == sample_bytes
    framed = frame_series(encode_labels(decode_labels(raw.labels)), raw.rest)
    expected = sorted(((n, v) for n, v in labels if v), key=lambda kv: kv[0].encode())
    (ts,) = parse_pb(framed).timeseries
    assert pb_labels(ts) == expected
    assert [x.timestamp for x in ts.samples] == [t for _, t in samples]
    assert framed.endswith(sample_bytes)
    assert framed == series_bytes(*(label(n, v) for n, v in expected), sample_bytes)


def _sample_field(sample: tuple[int, int]) -> bytes:
    bits, timestamp = sample
    return ld(2, tag(1, 1) + struct.pack("<Q", bits) + tag(2, 0) + encode_varint(timestamp % 2**64))


@settings(max_examples=500, deadline=None)
@given(
    rest=st.lists(
        st.one_of(
            st.binary(max_size=14).map(lambda b: ld(2, b)),  # a sample field, any payload
            st.binary(max_size=3),  # garbage
            st.tuples(st.integers(0, 2**64 - 1), st.integers(-(2**63), 2**63 - 1)).map(
                _sample_field
            ),
        ),
        max_size=4,
    ).map(b"".join)
)
def test_property_sample_fast_path_agrees_with_the_general_walk(rest: bytes) -> None:
    """Whatever the fast path accepts, the general walk accepts with the same count."""
    data = label("__name__", "m") + rest
    labels_end = len(label("__name__", "m"))
    fast = codec._plain_samples(data, labels_end, len(data))
    if fast:
        assert codec._split_general(data, labels_end).samples == fast


@settings(max_examples=200, deadline=None)
@given(
    samples=st.lists(
        st.tuples(st.floats(allow_nan=False), st.integers(-(2**63), 2**63 - 1)),
        min_size=1,
        max_size=4,
    )
)
def test_property_protobuf_encoded_samples_take_the_fast_path(
    samples: list[tuple[float, int]],
) -> None:
    """protobuf omits zero values and timestamps; the fast path still counts every sample."""
    ts = types_pb2.TimeSeries()
    ts.labels.add(name="__name__", value="m")
    for value, timestamp in samples:
        ts.samples.add(value=value, timestamp=timestamp)
    data = ts.SerializeToString()
    labels_end = len(label("__name__", "m"))
    assert codec._plain_samples(data, labels_end, len(data)) == len(samples)
    assert codec.split_series(data).samples == len(samples)
