"""The RW 2.0 sender's encoding (rwrouter.wire.rw2_out): RW1-form frames -> an
``io.prometheus.write.v2.Request``, and start timestamps stripped for an RW 1.0 destination.

Rules: RW 2.0 spec 2.0-rc.4 and ``prompb/io/prometheus/write/v2/types.proto`` (field numbers,
symbols[0] = ""), gogo's marshalling as Prometheus 3 sends it (field-number order, an empty
non-nullable Metadata as ``2a 00``), Prometheus ``populateV2TimeSeries`` / ``SymbolsTable``.
Results are read back with the generated ``write_v2_pb2`` (never with our own code).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from google.protobuf.unknown_fields import UnknownFieldSet  # type: ignore[import-untyped,unused-ignore]
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.errors import DecodeError
from rwrouter.wire import remote_pb2, rw2_out, types_pb2, write_v2_pb2
from rwrouter.wire.rw2_out import encode_request_py, strip_start_timestamps_py
from tests.support.rw2_frames import (
    Exemplar,
    Frame,
    MetaText,
    decode_v2,
    field_bytes,
    frame_bytes,
    frames,
    resolver,
    series_of,
)

STALE = struct.pack("<Q", 0x7FF0000000000002)
UP = (("__name__", "up"), ("job", "node"))
BUCKET = (("__name__", "rpc_seconds_bucket"), ("le", "1"))


def sample(value: float = 1.0, ts: int = 1_000, start: int = 0) -> bytes:
    out = write_v2_pb2.Sample(value=value, timestamp=ts, start_timestamp=start)
    return bytes(out.SerializeToString())


def stale_sample(ts: int = 2_000) -> bytes:
    return b"\x09" + STALE + b"\x10" + bytes((ts & 0x7F | 0x80, ts >> 7))


def histogram(*, start: int = 0, floats: bool = False) -> bytes:
    h = write_v2_pb2.Histogram(
        sum=2.5,
        schema=3,
        zero_threshold=1e-128,
        timestamp=3_000,
        start_timestamp=start,
        reset_hint=write_v2_pb2.Histogram.RESET_HINT_NO,
    )
    if floats:
        h.count_float = 4.0
        h.zero_count_float = 1.0
        h.positive_counts.extend([1.0, 2.0])
    else:
        h.count_int = 4
        h.zero_count_int = 1
        h.positive_deltas.extend([1, -1])
    h.positive_spans.add(offset=-2, length=2)
    return bytes(h.SerializeToString())


def exemplar(trace: str = "abc", value: float = 0.5, ts: int = 1_000) -> Exemplar:
    return Exemplar((("trace_id", trace),), struct.pack("<d", value), ts)


COUNTER: MetaText = (1, "Whether up.", "")
BOOK = {"up": COUNTER, "rpc_seconds_bucket": (3, "RPC latency.", "seconds")}

# (id, input frames, expected series)
CASES: list[tuple[str, list[Frame], list[Frame]]] = [
    (
        "sample_copied_metadata_found",
        [Frame(UP, (sample(),))],
        [Frame(UP, (sample(),), metadata=COUNTER)],
    ),
    (
        "no_metadata_empty_message",
        [Frame((("__name__", "x"),), (sample(),))],
        [Frame((("__name__", "x"),), (sample(),))],
    ),
    (
        "no_metric_name_empty_metadata",
        [Frame((("a", "b"),), (sample(),))],
        [Frame((("a", "b"),), (sample(),))],
    ),
    (
        "staleness_marker_kept",
        [Frame(UP, (stale_sample(),))],
        [Frame(UP, (stale_sample(),), metadata=COUNTER)],
    ),
    (
        "start_timestamp_kept",
        [Frame(UP, (sample(start=500),))],
        [Frame(UP, (sample(start=500),), metadata=COUNTER)],
    ),
    (
        "several_samples_in_order",
        [Frame(UP, (sample(1.0, 1), sample(2.0, 2)))],
        [Frame(UP, (sample(1.0, 1), sample(2.0, 2)), metadata=COUNTER)],
    ),
    (
        "int_histogram_tag_moved",
        [Frame(BUCKET, histograms=(histogram(start=7),))],
        [Frame(BUCKET, histograms=(histogram(start=7),), metadata=BOOK["rpc_seconds_bucket"])],
    ),
    (
        "float_histogram",
        [Frame(BUCKET, histograms=(histogram(floats=True),))],
        [Frame(BUCKET, histograms=(histogram(floats=True),), metadata=BOOK["rpc_seconds_bucket"])],
    ),
    (
        "exemplar_labels_as_refs",
        [Frame(UP, (sample(),), exemplars=(exemplar(),))],
        [Frame(UP, (sample(),), exemplars=(exemplar(),), metadata=COUNTER)],
    ),
    (
        "exemplar_without_labels",
        [Frame(UP, (sample(),), exemplars=(Exemplar((), bytes(8), 5),))],
        [Frame(UP, (sample(),), exemplars=(Exemplar((), bytes(8), 5),), metadata=COUNTER)],
    ),
    (
        "samples_and_histograms_split_in_two",
        [Frame(UP, (sample(),), (histogram(),), (exemplar(),))],
        [
            Frame(UP, (sample(),), exemplars=(exemplar(),), metadata=COUNTER),
            Frame(UP, histograms=(histogram(),), metadata=COUNTER),
        ],
    ),
    (
        "exemplar_only_joins_earlier_series",
        [Frame(UP, (sample(),)), Frame(BUCKET, (sample(),)), Frame(UP, exemplars=(exemplar(),))],
        [
            Frame(UP, (sample(),), exemplars=(exemplar(),), metadata=COUNTER),
            Frame(BUCKET, (sample(),), metadata=BOOK["rpc_seconds_bucket"]),
        ],
    ),
    (
        "exemplar_only_joins_later_series",
        [Frame(UP, exemplars=(exemplar("a"),)), Frame(UP, (sample(),), exemplars=(exemplar("b"),))],
        [Frame(UP, (sample(),), exemplars=(exemplar("b"), exemplar("a")), metadata=COUNTER)],
    ),
    (
        "exemplar_only_joins_first_of_two",
        [
            Frame(UP, (sample(1.0, 1),)),
            Frame(UP, (sample(2.0, 2),)),
            Frame(UP, exemplars=(exemplar(),)),
        ],
        [
            Frame(UP, (sample(1.0, 1),), exemplars=(exemplar(),), metadata=COUNTER),
            Frame(UP, (sample(2.0, 2),), metadata=COUNTER),
        ],
    ),
    (
        "exemplar_only_joins_histogram_series",
        [Frame(BUCKET, histograms=(histogram(),)), Frame(BUCKET, exemplars=(exemplar(),))],
        [
            Frame(
                BUCKET,
                histograms=(histogram(),),
                exemplars=(exemplar(),),
                metadata=BOOK["rpc_seconds_bucket"],
            )
        ],
    ),
    # an exemplar-only series with no series of its labels in the request (an orphan) is left
    # out: a Prometheus 3 receiver refuses it (the orphan counts: test_encoding)
    ("exemplar_only_orphan_left_out", [Frame(UP, exemplars=(exemplar(),))], []),
    (
        "exemplar_only_other_labels_left_out",
        [Frame(UP, (sample(),)), Frame((("__name__", "up"),), exemplars=(exemplar(),))],
        [Frame(UP, (sample(),), metadata=COUNTER)],
    ),
    (
        "label_order_kept",
        [Frame((("job", "node"), ("__name__", "up")), (sample(),))],
        [Frame((("job", "node"), ("__name__", "up")), (sample(),), metadata=COUNTER)],
    ),
    (
        "unknown_series_fields_dropped",
        [Frame(UP, (sample(),), extra=b"\x28\x01\x3a\x01x")],
        [Frame(UP, (sample(),), metadata=COUNTER)],
    ),
    (
        "utf8_names",
        [Frame((("__name__", "http.server.duration"), ("service.name", "é")), (sample(),))],
        [Frame((("__name__", "http.server.duration"), ("service.name", "é")), (sample(),))],
    ),
    ("empty_body", [], []),
]


@pytest.mark.parametrize(
    ("given_frames", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize(
    "encode", [encode_request_py, rw2_out.encode_request], ids=["pure", "used"]
)
def test_encoding(given_frames: list[Frame], expected: list[Frame], encode: Any) -> None:
    memo, resolve = resolver(BOOK)
    encoded = encode(frames(given_frames), memo, resolve)
    request = decode_v2(encoded.request)
    assert series_of(request) == expected
    assert len(set(request.symbols)) == len(request.symbols)  # each string once
    counts = (encoded.samples, encoded.histograms, encoded.exemplars)
    assert counts == (
        sum(len(f.samples) for f in expected),
        sum(len(f.histograms) for f in expected),
        sum(len(f.exemplars) for f in expected),
    )
    assert encoded.orphan_exemplars == (
        sum(len(f.exemplars) for f in given_frames) - encoded.exemplars
    )


def test_bytes_as_prometheus_writes_them() -> None:
    """gogo order: symbols (22) first, then per series labels_refs (0a, packed), samples (12),
    exemplars (22), metadata (2a) always present; ``""`` is symbol 0 and written."""
    body = frame_bytes(
        Frame((("__name__", "a"),), (sample(1.0, 1),), exemplars=(Exemplar((), bytes(8), 2),))
    )
    encoded = encode_request_py(body, {}, lambda _name: None)
    series = (
        b"\x0a\x02\x01\x02" + field_bytes(2, sample(1.0, 1)) + b"\x22\x02\x18\x02" + b"\x2a\x00"
    )
    expected = b"\x22\x00" + b"\x22\x08__name__" + b"\x22\x01a" + field_bytes(5, series)
    assert encoded.request == expected
    assert rw2_out.encode_request(body, {}, lambda _name: None).request == expected


def test_symbols_in_first_use_order() -> None:
    """Per series: labels, exemplar labels, help, unit; strings seen before keep their ref."""
    given_frames = [
        Frame((("b", "1"), ("__name__", "m")), (sample(),), exemplars=(exemplar("t"),)),
        Frame((("__name__", "m"), ("b", "2")), (sample(),)),
    ]
    memo, resolve = resolver({"m": (2, "help of m", "bytes")})
    for encode in (encode_request_py, rw2_out.encode_request):
        request = decode_v2(encode(frames(given_frames), memo, resolve).request)
        assert list(request.symbols) == [
            "",
            "b",
            "1",
            "__name__",
            "m",
            "trace_id",
            "t",
            "help of m",
            "bytes",
            "2",
        ]
        assert [list(ts.labels_refs) for ts in request.timeseries] == [[1, 2, 3, 4], [3, 4, 1, 9]]


def test_memo_is_asked_before_resolve() -> None:
    calls: list[bytes] = []

    def resolve(name: bytes) -> tuple[int, bytes, bytes] | None:
        calls.append(name)
        return (2, b"from resolve", b"")

    memo: dict[bytes, Any] = {b"up": (1, b"from memo", b""), b"none": None}
    body = frames(
        [
            Frame(UP, (sample(),)),
            Frame((("__name__", "none"),), (sample(),)),
            Frame((("__name__", "other"),), (sample(),)),
        ]
    )
    for encode in (encode_request_py, rw2_out.encode_request):
        calls.clear()
        got = [f.metadata for f in series_of(decode_v2(encode(body, memo, resolve).request))]
        assert got == [(1, "from memo", ""), (0, "", ""), (2, "from resolve", "")]
        assert calls == [b"other"]


MALFORMED = [
    ("truncated", b"\x0a\x05\x0a\x03"),
    ("series_not_a_message", b"\x08\x01"),
    ("samples_wire_type_0", field_bytes(1, b"\x10\x01")),
    ("label_name_not_a_string", field_bytes(1, field_bytes(1, b"\x08\x01"))),
    ("exemplar_label_wire_type", field_bytes(1, field_bytes(3, b"\x08\x01"))),
    ("group_wire_type", field_bytes(1, b"\x0b")),
]


@pytest.mark.parametrize("body", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_frames_raise_decode_error(body: bytes) -> None:
    for encode in (encode_request_py, rw2_out.encode_request):
        with pytest.raises(DecodeError):
            encode(body, {}, lambda _name: None)


# -- round trips ------------------------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=5)
label_sets = st.dictionaries(names, names, min_size=1, max_size=4).map(
    lambda d: tuple(sorted({**d, "__name__": d.get("__name__", "m")}.items()))
)
v2_samples = st.builds(
    write_v2_pb2.Sample,
    value=st.floats(allow_nan=False),
    timestamp=st.integers(-(2**40), 2**40),
    start_timestamp=st.integers(0, 2**40),
)
v2_histograms = st.builds(
    write_v2_pb2.Histogram,
    count_int=st.integers(0, 2**40),
    sum=st.floats(allow_nan=False),
    schema=st.integers(-4, 8),
    timestamp=st.integers(0, 2**40),
    start_timestamp=st.integers(0, 2**40),
)
v2_exemplars = st.tuples(
    st.dictionaries(names, names, max_size=2), st.floats(allow_nan=False), st.integers(0, 2**40)
)
v2_series = st.tuples(
    label_sets,
    st.booleans(),
    st.lists(v2_samples, min_size=1, max_size=3),
    st.lists(v2_histograms, min_size=1, max_size=2),
    st.lists(v2_exemplars, max_size=2),
)
metadata_types = st.tuples(st.integers(0, 7), st.text(max_size=8), st.text(max_size=4))


def build_v2(series: list[Any], book: dict[str, MetaText]) -> write_v2_pb2.Request:
    """An RW 2.0 Request as a sender would write it (each series: samples or histograms;
    metadata from ``book`` by metric name), with its own symbols table."""
    symbols: dict[str, int] = {"": 0}

    def ref(text: str) -> int:
        return symbols.setdefault(text, len(symbols))

    request = write_v2_pb2.Request()
    for labels, floats, samples, histograms, exemplars in series:
        ts = request.timeseries.add()
        for name, value in labels:
            ts.labels_refs.extend([ref(name), ref(value)])
        if floats:
            ts.samples.extend(samples)
        else:
            ts.histograms.extend(histograms)
        for ex_labels, value, timestamp in exemplars:
            ex = ts.exemplars.add(value=value, timestamp=timestamp)
            for name, v in sorted(ex_labels.items()):
                ex.labels_refs.extend([ref(name), ref(v)])
        kind, help_text, unit = book.get(dict(labels)["__name__"], (0, "", ""))
        ts.metadata.type = kind
        ts.metadata.help_ref, ts.metadata.unit_ref = ref(help_text), ref(unit)
    request.symbols.extend(symbols)
    return request


def pairs(refs: Any, symbols: list[str]) -> list[tuple[str, str]]:
    refs = list(refs)
    return [(symbols[a], symbols[b]) for a, b in zip(refs[::2], refs[1::2], strict=True)]


def to_rw1_frames(request: write_v2_pb2.Request) -> bytes:
    """The RW1 form of an RW 2.0 Request, by hand: labels resolved into Label messages,
    samples and histograms as they are, exemplars rebuilt with the generated RW 1.0 protos."""
    symbols = list(request.symbols)
    out = []
    for ts in request.timeseries:
        rw1 = types_pb2.TimeSeries()
        for name, value in pairs(ts.labels_refs, symbols):
            rw1.labels.add(name=name, value=value)
        for e in ts.exemplars:
            ex = rw1.exemplars.add(value=e.value, timestamp=e.timestamp)
            for name, value in pairs(e.labels_refs, symbols):
                ex.labels.add(name=name, value=value)
        inner = rw1.SerializeToString()
        inner += b"".join(field_bytes(2, s.SerializeToString()) for s in ts.samples)
        inner += b"".join(field_bytes(4, h.SerializeToString()) for h in ts.histograms)
        out.append(field_bytes(1, inner))
    return b"".join(out)


@settings(max_examples=150, deadline=None)
@given(
    series=st.lists(v2_series, max_size=6),
    book=st.dictionaries(st.sampled_from(["m", "a", "up"]), metadata_types),
)
def test_rw2_to_rw1_to_rw2_gives_the_same_data(
    series: list[Any], book: dict[str, MetaText]
) -> None:
    original = build_v2(series, book)
    memo, resolve = resolver(book)
    for encode in (encode_request_py, rw2_out.encode_request):
        again = decode_v2(encode(to_rw1_frames(original), memo, resolve).request)
        assert series_of(again) == series_of(original)


@settings(max_examples=150, deadline=None)
@given(series=st.lists(v2_series, max_size=6))
def test_rw1_to_rw2_decodes_to_the_rw1_data(series: list[Any]) -> None:
    """What the generated RW 1.0 protos read from the frames is what RW 2.0 carries."""
    body = to_rw1_frames(build_v2(series, {}))
    rw1 = remote_pb2.WriteRequest()
    rw1.ParseFromString(body)
    got = decode_v2(encode_request_py(body, {}, lambda _n: None).request)
    symbols = list(got.symbols)
    assert len(got.timeseries) == len(rw1.timeseries)
    for v1, v2 in zip(rw1.timeseries, got.timeseries, strict=True):
        assert [(lab.name, lab.value) for lab in v1.labels] == pairs(v2.labels_refs, symbols)
        assert [(s.value, s.timestamp) for s in v1.samples] == [
            (s.value, s.timestamp) for s in v2.samples
        ]
        assert [h.SerializeToString() for h in v1.histograms] == [
            types_pb2.Histogram.FromString(h.SerializeToString()).SerializeToString()
            for h in v2.histograms
        ]
        assert [(e.value, e.timestamp) for e in v1.exemplars] == [
            (e.value, e.timestamp) for e in v2.exemplars
        ]


# -- start timestamps for RW 1.0 --------------------------------------------------------------

STRIP_CASES = [
    ("none", [Frame(UP, (sample(),), (histogram(),))], 0),
    ("sample", [Frame(UP, (sample(start=5), sample(start=0), sample(start=6)))], 2),
    ("histogram", [Frame(BUCKET, histograms=(histogram(start=9), histogram()))], 1),
    (
        "several_frames",
        [
            Frame(UP, (sample(start=1),)),
            Frame(BUCKET, (sample(),)),
            Frame(BUCKET, (sample(start=300),), (histogram(start=2),), (exemplar(),)),
        ],
        3,
    ),
]


def rw1_clean(frame: Frame) -> Frame:
    """What an RW 1.0 receiver may get: the same data without start timestamps."""

    def without(blob: bytes, cls: Any) -> bytes:
        message = cls.FromString(blob)
        message.start_timestamp = 0
        return bytes(message.SerializeToString())

    return Frame(
        frame.labels,
        tuple(without(s, write_v2_pb2.Sample) for s in frame.samples),
        tuple(without(h, write_v2_pb2.Histogram) for h in frame.histograms),
        frame.exemplars,
    )


@pytest.mark.parametrize(
    ("given_frames", "removed"), [c[1:] for c in STRIP_CASES], ids=[c[0] for c in STRIP_CASES]
)
@pytest.mark.parametrize(
    "strip", [strip_start_timestamps_py, rw2_out.strip_start_timestamps], ids=["pure", "used"]
)
def test_strip_start_timestamps(given_frames: list[Frame], removed: int, strip: Any) -> None:
    body = frames(given_frames)
    out, count = strip(body)
    assert count == removed
    assert out == frames([rw1_clean(f) for f in given_frames])
    if not removed:
        assert out is body  # nothing to do: the stored bytes as they are
    rw1 = remote_pb2.WriteRequest.FromString(out)  # valid RW 1.0, nothing unknown left
    parts = [m for ts in rw1.timeseries for m in (*ts.samples, *ts.histograms)]
    assert all(len(UnknownFieldSet(m)) == 0 for m in parts)


def test_strip_keeps_other_fields_and_top_level_bytes() -> None:
    odd = b"\x12\x0b" + b"\x09" + bytes(8) + b"\x18\x07"  # a sample: value, start timestamp only
    body = field_bytes(1, field_bytes(1, b"\x0a\x01a") + odd + b"\x28\x05") + b"\x1a\x02\x08\x01"
    for strip in (strip_start_timestamps_py, rw2_out.strip_start_timestamps):
        out, count = strip(body)
        assert count == 1
        assert (
            out
            == field_bytes(
                1, field_bytes(1, b"\x0a\x01a") + b"\x12\x09\x09" + bytes(8) + b"\x28\x05"
            )
            + b"\x1a\x02\x08\x01"
        )


def test_strip_malformed_raises_decode_error() -> None:
    for strip in (strip_start_timestamps_py, rw2_out.strip_start_timestamps):
        with pytest.raises(DecodeError):
            strip(field_bytes(1, b"\x12\x03\x18"))
