"""Remote write 2.0 in: an ``io.prometheus.write.v2.Request`` in the RW1 form
(rwrouter.wire.rw2_in), field by field, every refusal, and the same series by either protocol
giving the same RW1 form (so the same routing cache key)."""

from __future__ import annotations

import os
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.workload import generate
from rwrouter.errors import DecodeError, TooLargeError
from rwrouter.routing import Route, Router
from rwrouter.wire import remote_pb2, rw2_in, types_pb2, write_v2_pb2
from rwrouter.wire.codec import split_series
from rwrouter.wire.rw2_in import Converted, to_rw1_py
from rwrouter.wire.validate import check_histogram, check_sample
from rwrouter.wire.walk import encode_varint, fields
from tests.support.rw2 import symbolize

try:
    from rwrouter.wire import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the build
    _scan = None

needs_accelerator = pytest.mark.skipif(
    (_scan is None or not hasattr(_scan, "rw2_to_rw1")) and not os.environ.get("CI"),
    reason="the compiled accelerator is not built here (CI builds it and runs these)",
)


def compiled(data: bytes, *, max_bytes: int | None = None) -> Converted:
    assert _scan is not None, "the compiled accelerator was not built"
    return Converted._make(_scan.rw2_to_rw1(data, max_bytes))


PATHS: list[Any] = [
    pytest.param(to_rw1_py, id="pure"),
    pytest.param(compiled, id="compiled", marks=needs_accelerator),
]

# -- wire builders (protobuf encoding spec) -----------------------------------------------------


def ld(field: int, payload: bytes) -> bytes:
    """A LEN field."""
    return encode_varint(field << 3 | 2) + encode_varint(len(payload)) + payload


def vi(field: int, value: int) -> bytes:
    """A VARINT field."""
    return encode_varint(field << 3) + encode_varint(value)


def f64(field: int, value: float) -> bytes:
    return encode_varint(field << 3 | 1) + struct.pack("<d", value)


def symbols(*texts: str | bytes) -> bytes:
    return b"".join(ld(4, t.encode() if isinstance(t, str) else t) for t in texts)


def refs(*values: int) -> bytes:
    """Packed labels_refs."""
    return ld(1, b"".join(encode_varint(v) for v in values))


def series(*parts: bytes) -> bytes:
    """An RW 2.0 TimeSeries field of a Request."""
    return ld(5, b"".join(parts))


def rw1_series(*parts: bytes) -> bytes:
    """An RW 1.0 TimeSeries field of a WriteRequest."""
    return ld(1, b"".join(parts))


def label(name: bytes, value: bytes) -> bytes:
    return ld(1, ld(1, name) + ld(2, value))


SAMPLE = f64(1, 1.5) + vi(2, 1_000)
SAMPLE_ST = SAMPLE + vi(3, 900)  # with a start timestamp (RW 2.0 rc.4)
HIST = vi(1, 3) + f64(3, 2.5) + vi(4, 0) + ld(11, vi(1, 0) + vi(2, 2)) + ld(12, b"\x02\x01")
HIST = HIST + vi(15, 1_000)
SYMS = symbols("", "__name__", "up", "job", "a", "trace_id", "t1", "help", "s")
UP = label(b"__name__", b"up") + label(b"job", b"a")
META_UP = ld(3, vi(1, 1) + ld(2, b"up") + ld(4, b"help") + ld(5, b"s"))  # RW1 MetricMetadata

# (id, RW 2.0 request, RW1 form, (samples, histograms, exemplars), start timestamps)
CONVERSIONS = [
    (
        "one_sample",
        SYMS + series(refs(1, 2, 3, 4), ld(2, SAMPLE)),
        rw1_series(UP, ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "labels_keep_the_sender_order",
        SYMS + series(refs(3, 4, 1, 2), ld(2, SAMPLE)),
        rw1_series(label(b"job", b"a"), label(b"__name__", b"up"), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "unpacked_refs",
        SYMS + series(vi(1, 1), vi(1, 2), vi(1, 3), vi(1, 4), ld(2, SAMPLE)),
        rw1_series(UP, ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "refs_over_two_fields_and_after_samples",
        SYMS + series(refs(1, 2), ld(2, SAMPLE), vi(1, 3), refs(4)),
        rw1_series(UP, ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "symbols_after_the_series",
        series(refs(1, 2, 3, 4), ld(2, SAMPLE)) + SYMS,
        rw1_series(UP, ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "symbols_between_series",
        symbols("", "__name__")
        + series(refs(1, 2), ld(2, SAMPLE))
        + symbols("up")
        + series(refs(1, 2), ld(2, SAMPLE), ld(2, SAMPLE)),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE))
        + rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE), ld(2, SAMPLE)),
        (3, 0, 0),
        False,
    ),
    (
        "empty_value_kept_for_the_rw1_path_to_drop",
        SYMS + series(refs(1, 2, 3, 0), ld(2, SAMPLE)),
        rw1_series(label(b"__name__", b"up"), label(b"job", b""), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "sample_start_timestamp_stays_inside",
        SYMS + series(refs(1, 2), ld(2, SAMPLE_ST)),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE_ST)),
        (1, 0, 0),
        True,
    ),
    (
        "zero_start_timestamp_is_unset",
        SYMS + series(refs(1, 2), ld(2, SAMPLE + vi(3, 0))),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE + vi(3, 0))),
        (1, 0, 0),
        False,
    ),
    (
        "histogram_moves_to_field_4",
        SYMS + series(refs(1, 2), ld(3, HIST)),
        rw1_series(label(b"__name__", b"up"), ld(4, HIST)),
        (0, 1, 0),
        False,
    ),
    (
        "histogram_start_timestamp_stays_as_17",
        SYMS + series(refs(1, 2), ld(3, HIST + vi(17, 900))),
        rw1_series(label(b"__name__", b"up"), ld(4, HIST + vi(17, 900))),
        (0, 1, 0),
        True,
    ),
    (
        "float_histogram",
        SYMS + series(refs(1, 2), ld(3, f64(2, 3.0) + ld(13, f64(1, 1.0)[1:]))),
        rw1_series(label(b"__name__", b"up"), ld(4, f64(2, 3.0) + ld(13, f64(1, 1.0)[1:]))),
        (0, 1, 0),
        False,
    ),
    (
        "exemplar_rebuilt_with_labels",
        SYMS + series(refs(1, 2), ld(2, SAMPLE), ld(4, refs(5, 6) + f64(2, 0.5) + vi(3, 999))),
        rw1_series(
            label(b"__name__", b"up"),
            ld(2, SAMPLE),
            ld(3, label(b"trace_id", b"t1") + f64(2, 0.5) + vi(3, 999)),
        ),
        (1, 0, 1),
        False,
    ),
    (
        "exemplar_unpacked_refs_and_unknown_field",
        SYMS + series(refs(1, 2), ld(4, vi(3, 7) + vi(1, 5) + vi(9, 1) + vi(1, 6))),
        rw1_series(label(b"__name__", b"up"), ld(3, label(b"trace_id", b"t1") + vi(3, 7))),
        (0, 0, 1),
        False,
    ),
    (
        "fields_in_rw1_order",
        SYMS + series(ld(3, HIST), ld(4, refs()), ld(2, SAMPLE), refs(1, 2)),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE), ld(3, b""), ld(4, HIST)),
        (1, 1, 1),
        False,
    ),
    (
        "metadata_to_a_request_entry",
        SYMS + series(refs(1, 2, 3, 4), ld(2, SAMPLE), ld(5, vi(1, 1) + vi(3, 7) + vi(4, 8))),
        rw1_series(UP, ld(2, SAMPLE)) + META_UP,
        (1, 0, 0),
        False,
    ),
    (
        "metadata_once_per_family_and_content",
        SYMS
        + series(refs(1, 2, 3, 4), ld(2, SAMPLE), ld(5, vi(1, 1) + vi(3, 7) + vi(4, 8)))
        + series(refs(1, 2, 3, 6), ld(2, SAMPLE), ld(5, vi(1, 1) + vi(3, 7) + vi(4, 8)))
        + series(refs(1, 2), ld(2, SAMPLE), ld(5, vi(1, 2))),
        rw1_series(UP, ld(2, SAMPLE))
        + rw1_series(label(b"__name__", b"up"), label(b"job", b"t1"), ld(2, SAMPLE))
        + rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE))
        + META_UP
        + ld(3, vi(1, 2) + ld(2, b"up")),
        (3, 0, 0),
        False,
    ),
    (
        "metadata_merged_over_two_fields",
        SYMS
        + series(
            refs(1, 2, 3, 4), ld(5, vi(1, 2) + vi(3, 7)), ld(2, SAMPLE), ld(5, vi(1, 1) + vi(4, 8))
        ),
        rw1_series(UP, ld(2, SAMPLE)) + META_UP,
        (1, 0, 0),
        False,
    ),
    (
        "empty_metadata_is_none",
        SYMS + series(refs(1, 2), ld(2, SAMPLE), ld(5, b"")),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "metadata_refs_to_empty_strings_is_none",
        symbols("", "__name__", "up", "") + series(refs(1, 2), ld(2, SAMPLE), ld(5, vi(3, 3))),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "no_metadata_without_a_metric_name",
        SYMS + series(refs(3, 4), ld(2, SAMPLE), ld(5, vi(1, 1))),
        rw1_series(label(b"job", b"a"), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "help_only_metadata",
        SYMS + series(refs(1, 2), ld(5, vi(3, 7)), ld(2, SAMPLE)),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE)) + ld(3, ld(2, b"up") + ld(4, b"help")),
        (1, 0, 0),
        False,
    ),
    (
        "unknown_metric_type_is_unknown",
        SYMS + series(refs(1, 2), ld(2, SAMPLE), ld(5, vi(1, 42) + vi(4, 8))),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE)) + ld(3, ld(2, b"up") + ld(5, b"s")),
        (1, 0, 0),
        False,
    ),
    (
        "rc3_created_timestamp_dropped",
        SYMS + series(refs(1, 2), ld(2, SAMPLE), vi(6, 900)),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "unknown_series_fields_dropped",
        SYMS + series(refs(1, 2), ld(9, b"xyz"), f64(7, 1.0), ld(2, SAMPLE)),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "reserved_and_unknown_request_fields_skipped",
        vi(1, 5) + ld(2, b"x") + SYMS + ld(3, b"y") + series(refs(1, 2), ld(2, SAMPLE)) + vi(20, 1),
        rw1_series(label(b"__name__", b"up"), ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "series_without_labels",
        SYMS + series(ld(2, SAMPLE)),
        rw1_series(ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
    (
        "series_without_samples",
        SYMS + series(refs(1, 2)),
        rw1_series(label(b"__name__", b"up")),
        (0, 0, 0),
        False,
    ),
    ("empty_request", b"", b"", (0, 0, 0), False),
    ("symbols_only", SYMS, b"", (0, 0, 0), False),
    (
        "empty_symbols_table_and_no_refs",
        series(ld(2, SAMPLE)),
        rw1_series(ld(2, SAMPLE)),
        (1, 0, 0),
        False,
    ),
]


@pytest.mark.parametrize("convert", PATHS)
@pytest.mark.parametrize(
    ("data", "rw1", "counts", "starts"),
    [c[1:] for c in CONVERSIONS],
    ids=[c[0] for c in CONVERSIONS],
)
def test_conversion(
    convert: Callable[[bytes], Converted],
    data: bytes,
    rw1: bytes,
    counts: tuple[int, int, int],
    starts: bool,
) -> None:
    out = convert(data)
    assert out.data == rw1
    assert (out.samples, out.histograms, out.exemplars) == counts
    assert out.start_timestamps is starts
    assert out.written.total == sum(counts)
    remote_pb2.WriteRequest().ParseFromString(out.data)  # a WriteRequest for protobuf too


class Handed(Exception):
    """The compiled conversion handed the request to the reference."""


def _no_reference(data: bytes, *, max_bytes: int | None = None) -> Converted:
    raise Handed


@needs_accelerator
@pytest.mark.parametrize(
    ("data", "rw1"), [c[1:3] for c in CONVERSIONS], ids=[c[0] for c in CONVERSIONS]
)
def test_compiled_path_converts_these_itself(
    data: bytes, rw1: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rw2_in, "to_rw1_py", _no_reference)
    assert compiled(data).data == rw1


# (id, metric name, type, family of the RW1 MetricMetadata)
FAMILIES = [
    ("histogram_bucket", "rpc_seconds_bucket", 3, "rpc_seconds"),
    ("histogram_sum", "rpc_seconds_sum", 3, "rpc_seconds"),
    ("histogram_count", "rpc_seconds_count", 3, "rpc_seconds"),
    ("native_histogram", "rpc_seconds", 3, "rpc_seconds"),
    ("gauge_histogram_gsum", "queue_gsum", 4, "queue"),
    ("gauge_histogram_gcount", "queue_gcount", 4, "queue"),
    ("gauge_histogram_bucket", "queue_bucket", 4, "queue"),
    ("gauge_histogram_sum_is_another_name", "queue_sum", 4, "queue_sum"),
    ("summary_sum", "rpc_sum", 5, "rpc"),
    ("summary_count", "rpc_count", 5, "rpc"),
    ("summary_quantile_series", "rpc", 5, "rpc"),
    ("summary_bucket_is_another_name", "rpc_bucket", 5, "rpc_bucket"),
    ("counter_keeps_total", "http_requests_total", 1, "http_requests_total"),
    ("gauge_keeps_count", "pool_count", 2, "pool_count"),
    ("suffix_alone_stays", "_count", 5, "_count"),
    ("utf8_name", "http.server.duration_bucket", 3, "http.server.duration"),
]


@pytest.mark.parametrize("convert", PATHS)
@pytest.mark.parametrize(
    ("name", "metric_type", "family"), [f[1:] for f in FAMILIES], ids=[f[0] for f in FAMILIES]
)
def test_metadata_family(
    convert: Callable[[bytes], Converted], name: str, metric_type: int, family: str
) -> None:
    data = symbols("", "__name__", name, "Help.") + series(
        refs(1, 2), ld(2, SAMPLE), ld(5, vi(1, metric_type) + vi(3, 3))
    )
    request = remote_pb2.WriteRequest()
    request.ParseFromString(convert(data).data)
    assert [(m.type, m.metric_family_name, m.help) for m in request.metadata] == [
        (metric_type, family, "Help.")
    ]


HUGE = encode_varint(1 << 40)
# (id, RW 2.0 request, fragment of the reason)
REFUSED = [
    (
        "symbols_0_not_empty",
        symbols("x", "__name__") + series(refs(1, 0)),
        "symbols[0] must be the empty string",
    ),
    (
        "label_ref_outside_the_table",
        SYMS + series(refs(1, 2)) + series(refs(1, 9), ld(2, SAMPLE)),
        "timeseries[1]: label ref 9 is outside the symbols table (size 9)",
    ),
    ("huge_label_ref", SYMS + series(ld(1, b"\x01" + HUGE)), "outside the symbols table"),
    ("label_ref_in_an_empty_table", series(refs(0, 0)), "outside the symbols table (size 0)"),
    (
        "odd_refs",
        SYMS + series(refs(1, 2, 3), ld(2, SAMPLE)),
        "timeseries[0]: odd number of labels_refs (3)",
    ),
    (
        "odd_exemplar_refs",
        SYMS + series(refs(1, 2), ld(4, refs(5))),
        "timeseries[0]: exemplars[0]: odd number of labels_refs (1)",
    ),
    (
        "exemplar_ref_outside",
        SYMS + series(refs(1, 2), ld(4, refs(5, 6)), ld(4, refs(5, 60))),
        "timeseries[0]: exemplars[1]: label ref 60 is outside",
    ),
    (
        "help_ref_outside",
        SYMS + series(refs(1, 2), ld(5, vi(3, 99))),
        "timeseries[0]: metadata help_ref 99 is outside the symbols table",
    ),
    (
        "unit_ref_outside",
        SYMS + series(refs(1, 2), ld(5, vi(4, 10))),
        "metadata unit_ref 10 is outside",
    ),
    ("symbols_not_a_string", vi(4, 1) + SYMS, "field 4 (symbols) has wire type 0"),
    ("timeseries_not_a_message", SYMS + vi(5, 1), "field 5 (timeseries) has wire type 0"),
    ("refs_of_wire_type_i64", SYMS + series(f64(1, 1.0)), "labels_refs has wire type 1"),
    ("truncated_packed_refs", SYMS + series(ld(1, b"\x01\x82")), "truncated or overlong varint"),
    (
        "samples_not_a_message",
        SYMS + series(refs(1, 2), vi(2, 1)),
        "series field 2 has wire type 0",
    ),
    (
        "histograms_not_a_message",
        SYMS + series(refs(1, 2), f64(3, 1.0)),
        "series field 3 has wire type 1",
    ),
    (
        "metadata_not_a_message",
        SYMS + series(refs(1, 2), vi(5, 1)),
        "series field 5 has wire type 0",
    ),
    (
        "sample_value_varint",
        SYMS + series(refs(1, 2), ld(2, vi(1, 1))),
        "field 1 of sample has wire type 0",
    ),
    (
        "sample_start_timestamp_double",
        SYMS + series(refs(1, 2), ld(2, SAMPLE + f64(3, 1.0))),
        "field 3 of sample has wire type 1",
    ),
    (
        "histogram_start_timestamp_string",
        SYMS + series(refs(1, 2), ld(3, HIST + ld(17, b"1"))),
        "histogram field 17 has wire type 2",
    ),
    (
        "histogram_bad_span",
        SYMS + series(refs(1, 2), ld(3, ld(8, f64(1, 1.0)))),
        "histogram bucket span",
    ),
    (
        "histogram_cut_doubles",
        SYMS + series(refs(1, 2), ld(3, ld(10, b"\x00" * 7))),
        "packed doubles",
    ),
    (
        "exemplar_value_varint",
        SYMS + series(refs(1, 2), ld(4, vi(2, 1))),
        "exemplar field 2 has wire type 0",
    ),
    (
        "exemplar_timestamp_double",
        SYMS + series(refs(1, 2), ld(4, f64(3, 1.0))),
        "exemplar field 3 has wire type 1",
    ),
    (
        "metadata_type_double",
        SYMS + series(refs(1, 2), ld(5, f64(1, 1.0))),
        "metadata field 1 has wire type 1",
    ),
    ("series_runs_past_its_end", SYMS + ld(5, b"\x12\x20" + SAMPLE), "runs past the end of series"),
    ("request_runs_past_its_end", SYMS + b"\x2a\x40\x0a", "runs past the end of RW 2.0 Request"),
    ("group_wire_type", SYMS + b"\x2b", "wire type 3"),
    ("field_number_zero", b"\x02\x00", "field number 0"),
    ("overlong_varint", b"\x2a" + b"\xff" * 11, "truncated or overlong varint"),
]


@pytest.mark.parametrize("convert", PATHS)
@pytest.mark.parametrize(("data", "reason"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_with_a_one_line_reason(
    convert: Callable[[bytes], Converted], data: bytes, reason: str
) -> None:
    with pytest.raises(DecodeError) as caught:
        convert(data)
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)
    assert caught.value.status == 400


@needs_accelerator
@pytest.mark.parametrize("data", [r[1] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_compiled_path_hands_what_it_refuses_to_the_reference(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rw2_in, "to_rw1_py", _no_reference)
    with pytest.raises(Handed):
        compiled(data)


@pytest.mark.parametrize("convert", PATHS)
@pytest.mark.parametrize("data", [c[1] for c in CONVERSIONS], ids=[c[0] for c in CONVERSIONS])
def test_max_bytes_bounds_the_rw1_form_exactly(
    convert: Callable[..., Converted], data: bytes
) -> None:
    size = len(to_rw1_py(data).data)
    assert convert(data, max_bytes=size) == to_rw1_py(data)
    if size:
        with pytest.raises(TooLargeError, match=f"over {size - 1} bytes"):
            convert(data, max_bytes=size - 1)


BOMBS = [
    ("labels", symbols("", "__name__", "x" * 1_000_000) + series(refs(*[1, 2] * 2000))),
    (
        "exemplar_labels",
        symbols("", "x" * 1_000_000) + series(*[ld(4, refs(*[1, 1] * 100)) for _ in range(100)]),
    ),
    (
        "metadata",
        symbols("", "__name__", "h" * 1_000_000, *[f"m{i}" for i in range(200)])
        + b"".join(series(refs(1, 3 + i), ld(5, vi(3, 2))) for i in range(200)),
    ),
]


@pytest.mark.parametrize("convert", PATHS)
@pytest.mark.parametrize("data", [b[1] for b in BOMBS], ids=[b[0] for b in BOMBS])
def test_refs_to_a_long_symbol_cannot_blow_up(
    convert: Callable[..., Converted], data: bytes
) -> None:
    """A few bytes of refs to a long symbol: refused (413) before the labels are written."""
    with pytest.raises(TooLargeError) as caught:
        convert(data, max_bytes=64 * 1024 * 1024)
    assert caught.value.status == 413 and "server.max_decoded_bytes" in str(caught.value)


EMPTY_SYMBOLS = b"\x22\x00" * 100_000  # 2 bytes a symbol: the most symbols a byte can hold
# (id, RW 2.0 request): large symbols tables of short strings (at 64 MiB decoded, about 3 MB
# compressed), accepted or refused only once the table was read.
SYMBOL_TABLES = [
    ("accepted", EMPTY_SYMBOLS + series(refs(0, 0))),
    ("symbols_0_not_empty", symbols("ab") + EMPTY_SYMBOLS),
    ("malformed_last_series", EMPTY_SYMBOLS + series(refs(0, 0)) + b"\x2a\x02\x0a\x05"),
    ("two_byte_symbols", symbols("") + b"\x22\x02ab" * 100_000 + series(refs(1, 2))),
]


@pytest.mark.parametrize("convert", PATHS)
@pytest.mark.parametrize("data", [t[1] for t in SYMBOL_TABLES], ids=[t[0] for t in SYMBOL_TABLES])
def test_a_large_symbols_table_costs_little_memory(
    convert: Callable[..., Converted], data: bytes
) -> None:
    """The symbols table is held as offsets into the request, at most 4 bytes a request byte
    (a bytes object per symbol cost 20 times the request: 1.2 GB for a 3 MB request)."""
    tracemalloc.start()
    try:
        convert(data, max_bytes=64 * 1024 * 1024)
    except DecodeError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak <= 4 * len(data) + 64 * 1024, f"{peak} bytes traced for {len(data)}"


def route(data: bytes) -> Any:
    router = Router(global_rules=(), routes=[Route("all")])
    try:
        return router.route(data)
    except DecodeError as exc:
        return ("error", str(exc))


BAD = b"\xc3\x28"  # not UTF-8
# (id, symbols after "", series fields with refs into them): every string forwarded is checked
UTF8 = [
    ("label_value", ["__name__", "up", "job", BAD], refs(1, 2, 3, 4)),
    ("label_name", ["__name__", "up", BAD, "a"], refs(1, 2, 3, 4)),
    ("metric_name", ["__name__", BAD], refs(1, 2)),
    ("exemplar_label", ["__name__", "up", "trace_id", BAD], refs(1, 2) + ld(4, refs(3, 4))),
    ("help", ["__name__", "up", BAD], refs(1, 2) + ld(5, vi(1, 1) + vi(3, 3))),
    ("unit", ["__name__", "up", BAD], refs(1, 2) + ld(5, vi(1, 1) + vi(4, 3))),
    ("metric_name_of_metadata", ["__name__", BAD], refs(1, 2) + ld(5, vi(1, 2))),
]


@pytest.mark.parametrize("convert", PATHS)
@pytest.mark.parametrize(("texts", "fields"), [u[1:] for u in UTF8], ids=[u[0] for u in UTF8])
def test_invalid_utf8_in_a_used_symbol_is_refused_by_the_rw1_path(
    convert: Callable[[bytes], Converted], texts: list[str | bytes], fields: bytes
) -> None:
    data = symbols("", *texts) + series(fields, ld(2, SAMPLE))
    outcome = route(convert(data).data)
    assert outcome[0] == "error" and "invalid UTF-8" in outcome[1], outcome


def test_invalid_utf8_in_an_unused_symbol_is_not_forwarded() -> None:
    data = symbols("", "__name__", "up", BAD) + series(refs(1, 2), ld(2, SAMPLE))
    routed = route(to_rw1_py(data).data)
    assert not isinstance(routed, tuple) and routed.samples_in == 1
    assert BAD not in routed.shares[0].body


# -- the same series by either protocol ---------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
label_sets = st.dictionaries(names, names, min_size=1, max_size=6)


def rw1_request(labels: dict[str, str], *, exemplar: bool, histogram: bool) -> bytes:
    """Prometheus's RW 1.0 encoding of one series (sorted labels), as protobuf gives it."""
    request = remote_pb2.WriteRequest()
    ts = request.timeseries.add()
    for name in sorted(labels, key=str.encode):
        ts.labels.add(name=name, value=labels[name])
    ts.samples.add(value=0.25, timestamp=1_700_000_000_000)
    if exemplar:
        ex = ts.exemplars.add(value=1.0, timestamp=5)
        ex.labels.add(name="trace_id", value="abc")
    if histogram:
        ts.histograms.add(
            count_int=4,
            sum=2.0,
            schema=1,
            timestamp=9,
            positive_spans=[types_pb2.BucketSpan(offset=-1, length=2)],
            positive_deltas=[2, -1],
        )
    return bytes(request.SerializeToString())


def first_labels(data: bytes) -> bytes:
    """The raw Label fields of the first series of an RW1 WriteRequest."""
    for _, _, _, start, end in fields(data, 0, len(data), "WriteRequest"):
        return split_series(data[start:end]).labels
    raise AssertionError("no series")


@needs_accelerator
@settings(max_examples=200, deadline=None)
@given(labels=label_sets, exemplar=st.booleans(), histogram=st.booleans())
def test_rw2_with_sorted_refs_gives_prometheus_rw1_bytes(
    labels: dict[str, str], exemplar: bool, histogram: bool
) -> None:
    data = rw1_request(labels, exemplar=exemplar, histogram=histogram)
    parsed = remote_pb2.WriteRequest()
    parsed.ParseFromString(data)
    v2 = symbolize(parsed).SerializeToString()
    for convert in (to_rw1_py, compiled):
        out = convert(v2)
        assert first_labels(out.data) == first_labels(data)  # the routing cache key
        assert out.data == data  # and the whole request


def test_rw1_and_rw2_route_to_the_same_cache_entries_and_bytes() -> None:
    workload = generate(seed=3, nodes=2, scrapes=1)
    by_rw1 = Router(global_rules=(), routes=[Route("a"), Route("b", fallback=True)])
    by_rw2 = Router(global_rules=(), routes=[Route("a"), Route("b", fallback=True)])
    for body in workload.bodies:
        data = bytes(snappy.decompress(body))
        parsed = remote_pb2.WriteRequest()
        parsed.ParseFromString(data)
        converted = to_rw1_py(symbolize(parsed).SerializeToString())
        assert converted.data == data
        assert by_rw2.route(converted.data) == by_rw1.route(data)
    assert sorted(by_rw1._young.items()) == sorted(by_rw2._young.items())


# -- the RW1 checks of what RW 2.0 adds ----------------------------------------------------------

CHECKS = [
    ("sample_start_timestamp", check_sample, SAMPLE_ST, None),
    (
        "sample_start_timestamp_i32",
        check_sample,
        SAMPLE + b"\x1d\x00\x00\x00\x00",
        "field 3 of sample has wire type 5",
    ),
    ("histogram_start_timestamp", check_histogram, HIST + vi(17, 1), None),
    (
        "histogram_start_timestamp_i64",
        check_histogram,
        HIST + f64(17, 1.0),
        "histogram field 17 has wire type 1",
    ),
]


@pytest.mark.parametrize(
    ("check", "payload", "error"), [c[1:] for c in CHECKS], ids=[c[0] for c in CHECKS]
)
def test_start_timestamps_are_checked_as_varints(
    check: Callable[[bytes, int, int], None], payload: bytes, error: str | None
) -> None:
    if error is None:
        check(payload, 0, len(payload))
        return
    with pytest.raises(DecodeError, match=error):
        check(payload, 0, len(payload))


def test_generated_module_is_the_rw2_schema() -> None:
    """The committed write_v2_pb2 (tests and tools only) has the spec's field numbers."""
    fields = {f.name: f.number for f in write_v2_pb2.TimeSeries.DESCRIPTOR.fields}
    assert fields == {
        "labels_refs": 1,
        "samples": 2,
        "histograms": 3,
        "exemplars": 4,
        "metadata": 5,
    }
    request = {f.name: f.number for f in write_v2_pb2.Request.DESCRIPTOR.fields}
    assert request == {"symbols": 4, "timeseries": 5}
    assert write_v2_pb2.Sample.DESCRIPTOR.fields_by_name["start_timestamp"].number == 3
    assert write_v2_pb2.Histogram.DESCRIPTOR.fields_by_name["start_timestamp"].number == 17
    assert {f.name: f.number for f in write_v2_pb2.Metadata.DESCRIPTOR.fields} == {
        "type": 1,
        "help_ref": 3,
        "unit_ref": 4,
    }
