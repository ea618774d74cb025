"""Remote write 2.0 in on both paths: the compiled ``rw2_to_rw1`` and the pure-Python
reference ``rw2_in.to_rw1_py`` give the same RW1 form, counts and errors, on the benchmark
workload sent as RW 2.0, random requests of every shape, and mutated (malformed) bodies."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.workload import generate
from rwrouter.errors import DecodeError, TooLargeError
from rwrouter.routing import Router
from rwrouter.routing import router as router_module
from rwrouter.routing.scan import Scan, scan_request_py
from rwrouter.wire import remote_pb2, write_v2_pb2
from rwrouter.wire.rw2_in import to_rw1_py
from rwrouter.wire.walk import encode_varint
from tests.support.rw2 import symbolize
from tests.unit.test_scan_paths import make_routes

try:
    from rwrouter.wire import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the build
    _scan = None

pytestmark = pytest.mark.skipif(
    (_scan is None or not hasattr(_scan, "rw2_to_rw1")) and not os.environ.get("CI"),
    reason="the compiled accelerator is not built here (CI builds it and runs these)",
)


def outcome(convert: Callable[[bytes], Any], data: bytes) -> Any:
    try:
        return tuple(convert(data))
    except (DecodeError, TooLargeError) as exc:
        return ("error", type(exc).__name__, str(exc))


def same_on_both_paths(data: bytes, max_bytes: int | None = None) -> Any:
    assert _scan is not None
    fast = outcome(lambda d: _scan.rw2_to_rw1(d, max_bytes), data)
    assert fast == outcome(lambda d: to_rw1_py(d, max_bytes=max_bytes), data)
    return fast


# A metric name -> (type, help, unit) table for the workload's families.
WORKLOAD_METADATA = {
    "DCGM_FI_DEV_GPU_UTIL": (2, "GPU utilization (in %).", ""),
    "DCGM_FI_DEV_FB_USED": (2, "Framebuffer memory used (in MiB).", "mebibytes"),
    "node_cpu_seconds_total": (1, "Seconds the CPUs spent in each mode.", "seconds"),
}


@pytest.mark.parametrize("with_metadata", [False, True], ids=["no_metadata", "metadata"])
def test_benchmark_workload_as_rw2(with_metadata: bool) -> None:
    """The benchmark's workload (bench/workload.py), each request sent as RW 2.0 (the symbols
    table Prometheus's sender builds): both paths agree, and without metadata the RW1 form is
    the RW 1.0 request byte for byte; with it, one entry per family."""
    workload = generate(seed=7, nodes=3, scrapes=1)
    for body in workload.bodies:
        data = bytes(snappy.decompress(body))
        parsed = remote_pb2.WriteRequest()
        parsed.ParseFromString(data)
        v2 = symbolize(parsed, metadata=WORKLOAD_METADATA if with_metadata else None)
        got = same_on_both_paths(v2.SerializeToString())
        assert got[0] != "error"
        assert got[1:] == (sum(len(ts.samples) for ts in parsed.timeseries), 0, 0, False)
        converted = remote_pb2.WriteRequest()
        converted.ParseFromString(got[0])
        assert list(converted.timeseries) == list(parsed.timeseries)
        if not with_metadata:
            assert got[0] == data
            continue
        names = {
            lab.value for ts in parsed.timeseries for lab in ts.labels if lab.name == "__name__"
        }
        expected = sorted(n for n in WORKLOAD_METADATA if n in names)
        assert sorted(m.metric_family_name for m in converted.metadata) == expected


# -- random requests of every shape -------------------------------------------------------------

TEXTS = [
    "",
    "__name__",
    "up",
    "rpc_seconds_bucket",
    "job",
    "a",
    "le",
    "+Inf",
    "trace_id",
    "Help text.",
    "seconds",
    "http.server.duration",
    "ü",
]


def ld(field: int, payload: bytes) -> bytes:
    return encode_varint(field << 3 | 2) + encode_varint(len(payload)) + payload


def vi(field: int, value: int) -> bytes:
    return encode_varint(field << 3) + encode_varint(value)


def refs_fields(refs: list[int], how: str) -> list[bytes]:
    if how == "packed":
        return [ld(1, b"".join(encode_varint(r) for r in refs))]
    if how == "unpacked":
        return [vi(1, r) for r in refs]
    half = len(refs) // 2
    return [
        ld(1, b"".join(encode_varint(r) for r in refs[:half])),
        *(vi(1, r) for r in refs[half:]),
    ]


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` nine times in ten, else ``bad``."""
    return st.integers(0, 9).flatmap(lambda k: good if k else bad)


_pairs = st.lists(
    st.tuples(st.integers(0, len(TEXTS) - 1), st.integers(0, len(TEXTS) - 1)), max_size=4
).map(lambda pairs: [r for pair in pairs for r in pair])
refs_strategy = _mostly(_pairs, st.lists(st.integers(0, len(TEXTS) + 1), max_size=7))
_ref = _mostly(st.integers(0, len(TEXTS) - 1), st.integers(0, 2**33))
encodings = st.sampled_from(["packed", "unpacked", "split"])
histograms = st.builds(
    write_v2_pb2.Histogram,
    count_int=st.integers(0, 2**64 - 1),
    sum=st.floats(allow_nan=False),
    schema=st.integers(-4, 8),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    positive_deltas=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    positive_spans=st.lists(
        st.builds(write_v2_pb2.BucketSpan, offset=st.integers(-5, 5), length=st.integers(0, 4)),
        max_size=2,
    ),
    custom_values=st.lists(st.floats(allow_nan=False), max_size=2),
    start_timestamp=st.integers(-(2**63), 2**63 - 1),
)
samples = st.builds(
    write_v2_pb2.Sample,
    value=st.floats(),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    start_timestamp=st.one_of(st.just(0), st.integers(-(2**63), 2**63 - 1)),
)
series_strategy = st.fixed_dictionaries(
    {
        "refs": refs_strategy,
        "how": encodings,
        "samples": st.lists(samples, max_size=3),
        "histograms": st.lists(histograms, max_size=2),
        "exemplars": st.lists(
            st.tuples(refs_strategy, encodings, st.floats(), st.integers(0, 2**63 - 1)), max_size=2
        ),
        "metadata": st.one_of(st.none(), st.tuples(st.integers(0, 9), _ref, _ref)),
        "unknown": st.booleans(),
        "shuffle": st.randoms(use_true_random=False),
    }
)


def build(table: list[str], series: list[dict[str, Any]], symbols_at: int) -> bytes:
    parts: list[bytes] = []
    for s in series:
        fields = refs_fields(s["refs"], s["how"])
        fields += [ld(2, sample.SerializeToString()) for sample in s["samples"]]
        fields += [ld(3, h.SerializeToString()) for h in s["histograms"]]
        for refs, how, value, timestamp in s["exemplars"]:
            ex = write_v2_pb2.Exemplar(value=value, timestamp=timestamp).SerializeToString()
            fields.append(ld(4, b"".join(refs_fields(refs, how)) + ex))
        if s["metadata"] is not None:
            kind, help_ref, unit_ref = s["metadata"]
            fields.append(ld(5, vi(1, kind) + vi(3, help_ref) + vi(4, unit_ref)))
        if s["unknown"]:
            fields.append(vi(6, 12345))  # rc.3's created_timestamp
        s["shuffle"].shuffle(fields)
        parts.append(ld(5, b"".join(fields)))
    parts.insert(min(symbols_at, len(parts)), b"".join(ld(4, t.encode()) for t in table))
    return b"".join(parts)


tables = _mostly(st.just(TEXTS), st.lists(st.sampled_from(TEXTS), max_size=10))


@settings(max_examples=400, deadline=None)
@given(
    table=tables,
    series=st.lists(series_strategy, max_size=6),
    symbols_at=st.integers(0, 6),
    limit=st.one_of(st.none(), st.floats(0, 1.5)),
)
def test_random_requests_convert_identically(
    table: list[str], series: list[dict[str, Any]], symbols_at: int, limit: float | None
) -> None:
    data = build(table, series, symbols_at)
    max_bytes = None if limit is None else int(limit * 5 * len(data))
    got = same_on_both_paths(data, max_bytes)
    if got[0] != "error":  # the RW1 form routes (or is refused) the same on either RW1 loop
        assert route(compiled_scan, got[0]) == route(scan_request_py, got[0])


def compiled_scan(*args: Any) -> Scan:
    assert _scan is not None
    return Scan._make(_scan.scan_request(*args))


def route(scan: Callable[..., Scan], data: bytes) -> Any:
    """Route the RW1 form ``data`` twice (cold, then cached) with a fresh router of the
    per-series loop tests' destinations, whose loop is ``scan``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(router_module, "scan_request", scan)
        try:
            router = Router(global_rules=(), routes=make_routes())
            return router.route(data), router.route(data)
        except DecodeError as exc:
            return ("error", str(exc))


@settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    series=st.lists(series_strategy, min_size=1, max_size=3),
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
    series: list[dict[str, Any]], mutations: list[tuple[str, int, int]]
) -> None:
    data = bytearray(build(TEXTS, series, 0))
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
    same_on_both_paths(bytes(data))


def test_metadata_of_many_families_deduplicated_identically() -> None:
    """More distinct metadata entries than the compiled table starts with (it grows)."""
    rnd = random.Random(5)
    table = ["", "__name__", "h", "u"] + [f"m{i}_count" for i in range(300)]
    series = []
    sample = ld(2, write_v2_pb2.Sample(value=1.0, timestamp=1).SerializeToString())
    for _ in range(2000):
        name = rnd.randrange(4, len(table))
        metadata = vi(1, rnd.choice([0, 2, 5])) + vi(3, 2) + vi(4, rnd.choice([0, 3]))
        refs = encode_varint(1) + encode_varint(name)
        series.append(ld(5, ld(1, refs) + sample + ld(5, metadata)))
    data = b"".join(ld(4, t.encode()) for t in table) + b"".join(series)
    got = same_on_both_paths(data)
    request = remote_pb2.WriteRequest()
    request.ParseFromString(got[0])
    entries = [(m.metric_family_name, m.type, m.unit) for m in request.metadata]
    assert len(entries) == len(set(entries)) > 300
