"""The RW 2.0 sender's loops: the compiled accelerator (``_rw2out.h``) gives the same output
and the same errors as the pure-Python references in rwrouter.wire.rw2_out, on the benchmark
workload, random series of every shape, and mutated (malformed) bodies."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rwrouter.wire import write_v2_pb2
from rwrouter.wire.rw2_out import encode_request_py, strip_start_timestamps_py
from tests.support.rw2_frames import Exemplar, Frame, field_bytes, frames

try:
    from rwrouter.wire import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the build
    _scan = None

needs_accelerator = pytest.mark.skipif(
    _scan is None and not os.environ.get("CI"),
    reason="the compiled accelerator is not built here (CI builds it and runs these)",
)

Meta = tuple[int, bytes, bytes] | None


def outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as exc:  # the same type and message on both paths
        return ("error", type(exc), str(exc))


def both_encode(body: bytes, book: dict[bytes, Meta], memo_names: frozenset[bytes]) -> None:
    """Encode on both paths with the same memo (some of ``book`` in it) and resolver."""

    def run(encode: Callable[..., Any]) -> Any:
        memo = {name: meta for name, meta in book.items() if name in memo_names}
        return outcome(lambda: tuple(encode(body, memo, book.get)))

    assert _scan is not None
    assert run(_scan.encode_v2) == run(encode_request_py)


def both_strip(body: bytes) -> None:
    assert _scan is not None
    assert outcome(lambda: _scan.strip_start_timestamps(body)) == outcome(
        lambda: strip_start_timestamps_py(body)
    )


# -- inputs -----------------------------------------------------------------------------------

text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=4)
metric = st.sampled_from(["up", "up_total", "h_bucket", "x", ""])
labels = st.lists(st.tuples(st.sampled_from(["__name__", "a", "b", "job", ""]), text), max_size=4)
int64 = st.integers(-(2**63), 2**63 - 1)
samples = st.builds(
    write_v2_pb2.Sample, value=st.floats(), timestamp=int64, start_timestamp=int64
).map(lambda s: s.SerializeToString())
histograms = st.builds(
    write_v2_pb2.Histogram,
    count_int=st.integers(0, 2**64 - 1),
    zero_count_float=st.floats(),
    timestamp=st.integers(0, 2**40),
    start_timestamp=st.integers(-(2**63), 2**63 - 1),
).map(lambda h: h.SerializeToString())
exemplars = st.builds(
    Exemplar,
    st.lists(st.tuples(text, text), max_size=2).map(tuple),
    st.binary(min_size=8, max_size=8),
    st.integers(0, 2**62),
)
frame = st.builds(
    Frame,
    st.tuples(metric, labels).map(lambda t: (("__name__", t[0]), *t[1]) if t[0] else tuple(t[1])),
    st.lists(samples, max_size=3).map(tuple),
    st.lists(histograms, max_size=2).map(tuple),
    st.lists(exemplars, max_size=2).map(tuple),
    extra=st.sampled_from([b"", b"\x28\x01", b"\x31" + bytes(8), b"\x3a\x00", b"\x0a\x00"]),
)
metas = st.one_of(
    st.none(), st.tuples(st.integers(0, 2**64 - 1), st.binary(max_size=6), st.binary(max_size=3))
)
books = st.dictionaries(st.sampled_from([b"up", b"up_total", b"h_bucket", b"x"]), metas)
memo_names = st.frozensets(st.sampled_from([b"up", b"h_bucket", b"x"]))


# -- identical output -------------------------------------------------------------------------


@needs_accelerator
def test_benchmark_workload_encodes_identically() -> None:
    """The benchmark's own workload (bench/workload.py): every request's frames."""
    from bench.workload import generate

    workload = generate(seed=7, nodes=2, scrapes=2)
    book: dict[bytes, Meta] = {
        b"DCGM_FI_DEV_GPU_UTIL": (2, b"GPU utilization (in %).", b""),
        b"node_cpu_seconds_total": (1, b"Seconds the CPUs spent in each mode.", b"seconds"),
    }
    for body in workload.bodies:
        data = snappy.decompress(body)
        both_encode(data, book, frozenset({b"DCGM_FI_DEV_GPU_UTIL"}))
        both_strip(data)
        assert _scan is not None
        assert _scan.strip_start_timestamps(data)[0] is data


@needs_accelerator
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    series=st.lists(frame, max_size=8),
    book=books,
    memo=memo_names,
    echoes=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 8), exemplars), max_size=4),
)
def test_random_frames_encode_and_strip_identically(
    series: list[Frame],
    book: dict[bytes, Meta],
    memo: frozenset[bytes],
    echoes: list[tuple[int, int, Exemplar]],
) -> None:
    """Random frames, and exemplar-only frames with the labels of some of them (adopted)."""
    for source, at, ex in echoes:
        if series:
            echo = Frame(series[source % len(series)].labels, exemplars=(ex,))
            series.insert(at % (len(series) + 1), echo)
    body = frames(series)
    both_encode(body, book, memo)
    both_strip(body)


@needs_accelerator
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    series=st.lists(frame, min_size=1, max_size=4),
    mutations=st.lists(
        st.tuples(
            st.sampled_from(["flip", "cut", "insert", "delete"]),
            st.integers(0, 10_000),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_mutated_bodies_give_the_same_result_or_error(
    series: list[Frame], mutations: list[tuple[str, int, int]]
) -> None:
    data = bytearray(frames(series))
    for kind, at, byte in mutations:
        at %= max(1, len(data))
        if kind == "flip" and data:
            data[at] ^= byte or 1
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data.insert(at, byte)
        elif data:
            del data[at]
    both_encode(bytes(data), {b"up": (1, b"h", b"u")}, frozenset())
    both_strip(bytes(data))


ODD = [
    ("empty", b""),
    ("metadata_field_at_top", b"\x1a\x02\x08\x01"),
    ("frame_then_unknown_top_field", field_bytes(1, b"\x0a\x00") + b"\x10\x01"),
    ("non_minimal_frame_tag", b"\x8a\x00\x02\x0a\x00"),
    ("label_with_unknown_fields", field_bytes(1, field_bytes(1, b"\x0a\x01a\x18\x05\x12\x01b"))),
    ("label_name_twice", field_bytes(1, field_bytes(1, b"\x0a\x01a\x0a\x01c\x12\x01b"))),
    (
        "name_label_twice",
        field_bytes(
            1,
            field_bytes(1, b"\x0a\x08__name__\x12\x02up")
            + field_bytes(1, b"\x0a\x08__name__\x12\x01x"),
        ),
    ),
    (
        "exemplar_fields_reordered",
        field_bytes(1, field_bytes(3, b"\x18\x05\x11" + bytes(8) + b"\x0a\x00")),
    ),
    ("huge_varint_value_in_sample", field_bytes(1, b"\x12\x0b\x10" + b"\xff" * 9 + b"\x7f")),
    ("group_in_series", field_bytes(1, b"\x0b\x0c")),
    ("label_wire_type_0", field_bytes(1, b"\x08\x01")),
    ("sample_st_wire_type_1", field_bytes(1, b"\x12\x09\x19" + bytes(8))),
    ("histogram_st_twice", field_bytes(1, field_bytes(4, b"\x88\x01\x01\x88\x01\x02"))),
]


@needs_accelerator
@pytest.mark.parametrize("body", [o[1] for o in ODD], ids=[o[0] for o in ODD])
def test_odd_bodies_identically(body: bytes) -> None:
    both_encode(body, {b"up": (1, b"", b"")}, frozenset())
    both_strip(body)


METAS = [
    ("none", None),
    ("type_too_large", (2**64, b"", b"")),
    ("negative_type", (-1, b"", b"")),
    ("not_a_tuple", [1, b"", b""]),
    ("text_not_bytes", (1, "help", "")),
    ("short_tuple", (1, b"")),
    ("max_type", (2**64 - 1, b"h" * 300, b"u")),
]


@needs_accelerator
@pytest.mark.parametrize("meta", [m[1] for m in METAS], ids=[m[0] for m in METAS])
def test_resolved_values_of_any_shape_identically(meta: Any) -> None:
    body = field_bytes(1, field_bytes(1, b"\x0a\x08__name__\x12\x02up") + b"\x12\x00")
    both_encode(body, {b"up": meta}, frozenset())
    both_encode(body, {b"up": meta}, frozenset({b"up"}))


@needs_accelerator
def test_resolve_errors_propagate() -> None:
    def broken(_name: bytes) -> Meta:
        raise RuntimeError("book broken")

    body = field_bytes(1, field_bytes(1, b"\x0a\x08__name__\x12\x02up") + b"\x12\x00")
    assert _scan is not None
    for encode in (_scan.encode_v2, encode_request_py):
        with pytest.raises(RuntimeError, match="book broken"):
            encode(body, {}, broken)


@needs_accelerator
def test_other_argument_types_go_to_the_reference() -> None:
    body = frames([Frame((("__name__", "up"),), (b"\x10\x01",))])
    assert _scan is not None
    scan = _scan
    none: Any = lambda _n: None  # noqa: E731
    for other in (bytearray(body), memoryview(body)):
        encoded = [
            outcome(lambda f=f, o=other: tuple(f(o, {}, none)))  # type: ignore[misc]
            for f in (scan.encode_v2, encode_request_py)
        ]
        assert encoded[0] == encoded[1]
        stripped = [
            outcome(lambda f=f, o=other: f(o))  # type: ignore[misc]
            for f in (scan.strip_start_timestamps, strip_start_timestamps_py)
        ]
        assert stripped[0] == stripped[1]
    assert scan.encode_v2(body, [], none) == encode_request_py(body, [], none)  # type: ignore[arg-type]


def test_pure_path_selected_by_environment() -> None:
    code = "from rwrouter.wire.rw2_out import ACCELERATED; print(ACCELERATED)"
    env = {**os.environ, "RWROUTER_NO_EXTENSIONS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "False"


@needs_accelerator
def test_accelerated_when_built() -> None:
    from rwrouter.wire.rw2_out import ACCELERATED

    assert (not os.environ.get("RWROUTER_NO_EXTENSIONS")) == ACCELERATED
