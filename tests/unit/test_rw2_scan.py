"""Remote write 2.0 routed in one pass: the compiled ``scan_rw2`` (the series' RW1 labels
written out one at a time, the rest of each request as it came) gives what its reference gives,
the request converted by ``rw2_in.to_rw1_py`` and then split by ``scan.scan_request_py``: the
same shares, counts and errors, cold and cached, on the benchmark workload, on requests of every
shape, on named edge cases of the one-pass loop and on mutated bodies."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.rw2 import encode_body
from bench.workload import generate
from rwrouter.errors import DecodeError, TooLargeError
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing import Router
from rwrouter.routing import router as router_module
from rwrouter.routing import scan as scan_module
from rwrouter.routing.escape import UNDERSCORES
from rwrouter.routing.outcome import REASONS, Route
from rwrouter.routing.scan import scan_request_py, scan_rw2_py
from rwrouter.wire import write_v2_pb2
from rwrouter.wire.rw2_in import to_rw1_py
from rwrouter.wire.rw2_out import Meta
from rwrouter.wire.walk import encode_varint
from tests.unit.test_rw2_paths import TEXTS, build, ld, series_strategy, tables, vi
from tests.unit.test_scan_paths import KEEP_CRITICAL, make_routes

try:
    from rwrouter.wire import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the build
    _scan = None

pytestmark = pytest.mark.skipif(
    (_scan is None or not hasattr(_scan, "scan_rw2")) and not os.environ.get("CI"),
    reason="the compiled accelerator is not built here (CI builds it and runs these)",
)

Routed = Any  # (first, second) RoutedRequest, or ("error", kind, message)


def routed(data: bytes, max_bytes: int | None, *, reference: bool, dicts: bool = False) -> Routed:
    """``data`` routed twice (cold, then cached) by a fresh router of the per-series loop
    tests' destinations: with the compiled loop, or with the pure reference; ``dicts``: the
    cache generations are dicts (the compiled loop's other lookup)."""
    with pytest.MonkeyPatch.context() as patch:
        if reference:
            patch.setattr(scan_module, "to_rw1", to_rw1_py)
            patch.setattr(scan_module, "scan_request", scan_request_py)
            patch.setattr(router_module, "scan_rw2", scan_rw2_py)
        router = Router(global_rules=(), routes=make_routes())
        if dicts:
            young: dict[bytes, bytes] = {}
            old: dict[bytes, bytes] = {}
            router._young, router._old = young, old
        try:
            first = router.route(data, rw2=True, max_bytes=max_bytes)
            return first, router.route(data, rw2=True, max_bytes=max_bytes)
        except (DecodeError, TooLargeError) as exc:
            return ("error", type(exc).__name__, str(exc))


def same_both_ways(data: bytes, max_bytes: int | None = None, *, dicts: bool = False) -> Routed:
    got = routed(data, max_bytes, reference=False, dicts=dicts)
    assert got == routed(data, max_bytes, reference=True, dicts=dicts)
    if got[0] != "error":
        assert got[0] == got[1]  # cached outcomes route as the cold ones did
    return got


def one_pass(data: bytes, max_bytes: int | None = None) -> bool:
    """Whether the compiled loop routed ``data`` itself (not handing it to the reference)."""
    assert _scan is not None
    router = Router(global_rules=(), routes=make_routes())
    args = (router._young, router._old, router._miss, router._filters, router._filter, REASONS)
    return _scan.scan_rw2(data, max_bytes, *args, None, (), False, None) is not None


# -- the benchmark workload ----------------------------------------------------------------------


@pytest.mark.parametrize("metadata", [False, True], ids=["no_metadata", "metadata"])
def test_workload_routes_as_its_rw1_requests(metadata: bool) -> None:
    """Each request of the benchmark workload as Prometheus 3 sends it in RW 2.0 (an empty
    Metadata per series, or type and help): routed in one pass, to the same shares as the
    RW 1.0 request, and as the reference routes it."""
    book: dict[bytes, Meta | None] = {}
    if metadata:
        book[b"DCGM_FI_DEV_GPU_UTIL"] = (2, b"GPU utilization (in %).", b"")
    for body in generate(seed=3, nodes=2, scrapes=1).bodies:
        rw1 = bytes(snappy.decompress(body))
        data = encode_body(body, book).request
        assert one_pass(data)
        first, _ = same_both_ways(data)
        plain = Router(global_rules=(), routes=make_routes()).route(rw1)
        assert first.shares == plain.shares
        assert first.written.samples == plain.samples_in
        assert len(first.metadata[0]) == (1 if metadata else 0)


# -- the routing cache's key space ----------------------------------------------------------------


def _keep_routes() -> list[Route]:
    """The benchmark routing: keep rules only (misses go the template shortcut's way)."""
    return [
        Route("workspace", parse_relabel_configs(KEEP_CRITICAL, "t")),
        Route("s", fallback=True),
    ]


def _escaping_routes() -> list[Route]:
    return [*_keep_routes(), Route("escaped", escaping=UNDERSCORES)]


class _OwnResults(Router):
    """A router with results of its own (as the per-tenant one): no compiled miss path."""

    def _results(self, labels: Any) -> Any:
        return super()._results(labels)


# (id, routes, dict generations, whether an RW 2.0 series finds the entry of its RW 1.0 form,
# router class)
KEY_SPACES = [
    ("compiled_miss_path", make_routes, False, False, Router),
    ("template_shortcut", _keep_routes, False, False, Router),
    ("escaping_route", _escaping_routes, False, True, Router),
    ("dict_generations", make_routes, True, True, Router),
    ("every_miss_by_miss", make_routes, False, True, _OwnResults),
]


@pytest.mark.parametrize(
    ("routes", "dicts", "shared", "cls"),
    [k[1:] for k in KEY_SPACES],
    ids=[k[0] for k in KEY_SPACES],
)
def test_rw2_series_are_cached_by_their_folded_digest(
    routes: Any, dicts: bool, shared: bool, cls: type[Router]
) -> None:
    """A series of the usual shape is cached under the digest folded from its label pairs
    (LabelCache generations, no escaping route, misses answered by the compiled loop: the
    plan or templates): its second request is all hits, whichever way the miss was answered;
    it does not find the entry its RW 1.0 form made, except where the keys stay the bytes (an
    escaping route, dict generations, a router whose every miss ``miss()`` answers, which
    would otherwise cache each under both digests)."""
    body = generate(seed=5, nodes=1, scrapes=1).bodies[0]
    rw1, rw2 = bytes(snappy.decompress(body)), encode_body(body, {}).request

    def fresh() -> Router:
        router = cls(global_rules=(), routes=routes())
        if dicts:
            young: dict[bytes, bytes] = {}
            old: dict[bytes, bytes] = {}
            router._young, router._old = young, old
        return router

    router = fresh()  # RW 2.0 first: misses answered by miss() (no template learnt yet) too
    n = router.route(rw2, rw2=True).series_in
    misses = router.misses
    assert router.route(rw2, rw2=True).series_in == n and router.misses == misses
    router = fresh()
    assert router.route(rw1).series_in == n
    misses = router.misses
    first = router.route(rw2, rw2=True)
    assert router.misses - misses == (0 if shared else n)
    assert len(router._young) == (n if shared else 2 * n)
    misses = router.misses
    second = router.route(rw2, rw2=True)
    assert router.misses == misses and second == first
    assert first.shares == router.route(rw1).shares


def test_folded_digest_tells_label_orders_apart() -> None:
    """The same label pairs in another order are another label set (its RW1 bytes differ):
    another cache entry, and the outcome the reference gives it."""
    data = request(SYMBOLS, [refs(1, 5, 6, 7, 3, 4) + SAMPLE, refs(3, 4, 6, 7, 1, 5) + SAMPLE])
    router = Router(global_rules=(), routes=make_routes())  # misses cached here only
    first = router.route(data, rw2=True)
    assert len(router._young) == 2
    assert first == routed(data, None, reference=True)[0]


# -- named edge cases of the one-pass loop --------------------------------------------------------

SAMPLE = ld(2, write_v2_pb2.Sample(value=1.5, timestamp=1_700_000_000_000).SerializeToString())
HISTOGRAM = ld(3, write_v2_pb2.Histogram(count_int=3, sum=2.0, schema=0).SerializeToString())
EXEMPLAR = ld(4, ld(1, bytes([1, 2])) + write_v2_pb2.Exemplar(value=1.0).SerializeToString())
STARTED = ld(2, write_v2_pb2.Sample(value=1.0, timestamp=5, start_timestamp=4).SerializeToString())


def request(symbols: list[str], series: list[bytes]) -> bytes:
    return b"".join(ld(4, s.encode()) for s in ["", *symbols]) + b"".join(ld(5, s) for s in series)


def refs(*pairs: int) -> bytes:
    return ld(1, b"".join(encode_varint(r) for r in pairs))


# symbols: 1 __name__, 2 up, 3 job, 4 node, 5 DCGM_FI_DEV_GPU_UTIL, 6 gpu, 7 0, 8 help text
SYMBOLS = ["__name__", "up", "job", "node", "DCGM_FI_DEV_GPU_UTIL", "gpu", "0", "Help."]
UP = refs(1, 2, 3, 4)
GPU = refs(1, 5, 6, 7, 3, 4)


def plain(n: int) -> list[bytes]:
    """n plain series, alternating two label sets (hits after the first two)."""
    return [(UP if i % 2 else GPU) + SAMPLE for i in range(n)]


def long_values(n: int, size: int) -> tuple[list[str], list[bytes]]:
    """n series with a value of `size` bytes each, all distinct."""
    symbols = [*SYMBOLS, *(f"{i:0{size}d}" for i in range(n))]
    return symbols, [refs(1, 2, 3, len(SYMBOLS) + 1 + i) + SAMPLE for i in range(n)]


# a table of over 16384 symbols: refs of three bytes (the loop's slow way) among shorter ones
HUGE_TABLE = [*SYMBOLS, *(f"v{i}" for i in range(17_000))]
THREE_BYTE_REFS = (
    HUGE_TABLE,
    [*plain(2), refs(1, 2, 3, 16_500) + SAMPLE, refs(1, 5, 16_600, 300, 3, 4) + SAMPLE, *plain(2)],
)


def _cases() -> Iterator[Any]:
    for n in (0, 1, 4, 7, 8, 9, 17):  # around the look-ahead of R2_AHEAD = 8 series
        yield pytest.param(request(SYMBOLS, plain(n)), None, id=f"plain_{n}")
    yield pytest.param(
        request(SYMBOLS, [*plain(5), GPU + HISTOGRAM, *plain(5), UP + SAMPLE + EXEMPLAR]),
        None,
        id="other_shapes_between_plain_ones",
    )
    yield pytest.param(request(SYMBOLS, [UP + STARTED, *plain(3)]), None, id="start_timestamp")
    yield pytest.param(request(SYMBOLS, [UP + SAMPLE + vi(6, 9), *plain(3)]), None, id="unknown")
    yield pytest.param(request(SYMBOLS, [SAMPLE + UP, *plain(3)]), None, id="refs_after_samples")
    yield pytest.param(
        request(SYMBOLS, [UP + SAMPLE + SAMPLE + SAMPLE, UP + SAMPLE + HISTOGRAM + SAMPLE]),
        None,
        id="samples_not_together",
    )
    yield pytest.param(request(SYMBOLS, [UP, GPU]), None, id="no_samples")
    meta = ld(5, vi(1, 2) + vi(3, 8))
    yield pytest.param(
        request(SYMBOLS, [GPU + SAMPLE + meta, UP + SAMPLE + ld(5, b""), GPU + SAMPLE + meta]),
        None,
        id="metadata_on_plain_series",
    )
    yield pytest.param(request(SYMBOLS, [refs(1, 2, 3) + SAMPLE]), None, id="odd_refs")
    yield pytest.param(request(SYMBOLS, [refs(1, 99) + SAMPLE]), None, id="ref_outside_table")
    large = [*SYMBOLS, *(f"v{i}" for i in range(200))]  # 209 symbols: one-byte refs all inside
    yield pytest.param(
        request(large, [*plain(3), refs(1, 200) + SAMPLE, refs(1, 300) + SAMPLE]),
        None,
        id="ref_outside_a_large_table",
    )
    yield pytest.param(
        request(large, [*plain(2), ld(1, bytes([1, 0x85])) + SAMPLE]), None, id="ref_cut_short"
    )
    yield pytest.param(request(*THREE_BYTE_REFS), None, id="three_byte_refs")
    yield pytest.param(request([*SYMBOLS, "Grüße"], [refs(1, 9) + SAMPLE]), None, id="utf8_value")
    bad = b"".join(ld(4, s) for s in [b"", b"__name__", b"\xff\xfe"]) + ld(5, refs(1, 2) + SAMPLE)
    yield pytest.param(bad, None, id="invalid_utf8_label")
    yield pytest.param(request(SYMBOLS, plain(20)), 1_000, id="over_max_bytes")
    yield pytest.param(request(SYMBOLS, plain(20)), 0, id="max_bytes_zero")
    yield pytest.param(request(*long_values(12, 300)), None, id="labels_longer_than_a_copy")
    yield pytest.param(request(*long_values(2_500, 500)), None, id="more_labels_than_remembered")
    yield pytest.param(request(*long_values(10, 40)), None, id="labels_between_copy_sizes")
    yield pytest.param(
        request(SYMBOLS, [refs(1, 5, 6) + refs(7, 3, 4) + SAMPLE, *plain(3)]),
        None,
        id="pair_split_between_refs_fields",
    )
    unpacked = b"".join(vi(1, r) for r in (1, 5, 6, 7, 3, 4))
    yield pytest.param(request(SYMBOLS, [unpacked + SAMPLE, *plain(3)]), None, id="unpacked_refs")
    yield pytest.param(
        request(SYMBOLS, [refs(1, 2, 3) + refs(4) + SAMPLE + refs(1, 2)]),
        None,
        id="refs_after_split_pair_and_samples",
    )
    yield pytest.param(request(*long_values(1, 3_000)), 1_000, id="labels_alone_over_max_bytes")
    yield pytest.param(request(SYMBOLS, [SAMPLE, *plain(2)]), None, id="no_labels")
    yield pytest.param(
        request(SYMBOLS, [ld(5, vi(1, 2) + vi(3, 8)) + GPU + SAMPLE, *plain(2)]),
        None,
        id="metadata_before_refs",
    )
    yield pytest.param(
        request([*SYMBOLS, ""], [refs(1, 9, 1, 5) + SAMPLE + ld(5, vi(1, 2))]),
        None,
        id="empty_name_value_then_a_name",
    )


@pytest.mark.parametrize(("data", "max_bytes"), list(_cases()))
@pytest.mark.parametrize("dicts", [False, True], ids=["label_cache", "dicts"])
def test_edge_cases_route_as_the_reference(data: bytes, max_bytes: int | None, dicts: bool) -> None:
    same_both_ways(data, max_bytes, dicts=dicts)


ONE_PASS_CASES = [
    ("plain", request(SYMBOLS, plain(9)), None, True),
    ("histogram", request(SYMBOLS, [*plain(3), GPU + HISTOGRAM]), None, True),
    ("exemplar", request(SYMBOLS, [*plain(3), UP + SAMPLE + EXEMPLAR]), None, True),
    ("metadata", request(SYMBOLS, [GPU + SAMPLE + ld(5, vi(1, 2) + vi(3, 8))]), None, True),
    ("three_byte_refs", request(*THREE_BYTE_REFS), None, True),
    ("odd_refs", request(SYMBOLS, [*plain(3), refs(1, 2, 3) + SAMPLE]), None, False),
    ("over_max_bytes", request(SYMBOLS, plain(20)), 1_000, False),
    (
        "invalid_utf8",
        b"".join(ld(4, s) for s in [b"", b"a", b"\xff"]) + ld(5, refs(1, 2)),
        None,
        False,
    ),
]


@pytest.mark.parametrize(
    ("data", "max_bytes", "expected"),
    [c[1:] for c in ONE_PASS_CASES],
    ids=[c[0] for c in ONE_PASS_CASES],
)
def test_what_the_one_pass_loop_hands_to_the_reference(
    data: bytes, max_bytes: int | None, expected: bool
) -> None:
    """Other shapes are converted one series at a time; only what the reference refuses (it
    gives its own error) goes to it."""
    assert one_pass(data, max_bytes) is expected


# -- requests of every shape, and mutated ones ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    table=tables,
    series=st.lists(series_strategy, max_size=12),
    symbols_at=st.integers(0, 12),
    limit=st.one_of(st.none(), st.floats(0, 1.5)),
)
def test_random_requests_route_as_the_reference(
    table: list[str], series: list[dict[str, Any]], symbols_at: int, limit: float | None
) -> None:
    data = build(table, series, symbols_at)
    same_both_ways(data, None if limit is None else int(limit * 5 * len(data)))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    series=st.lists(series_strategy, min_size=1, max_size=10),
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
def test_mutated_requests_route_as_the_reference(
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
    same_both_ways(bytes(data))


def test_unusual_argument_types_go_to_the_reference() -> None:
    """A bytearray request, a limit that is not a non-negative int: the reference's (None
    from the compiled loop; the selected scan_rw2 then gives the reference's result)."""
    assert _scan is not None
    data = request(SYMBOLS, plain(3))
    router = Router(global_rules=(), routes=make_routes())
    args = (router._young, router._old, router._miss, router._filters, router._filter, REASONS)
    for what, limit in ((bytearray(data), None), (data, 1.5), (data, -1)):
        assert _scan.scan_rw2(what, limit, *args, None, (), False, None) is None
    with pytest.raises(TypeError):
        _scan.scan_rw2(data, None)
    assert scan_module.scan_rw2(data, None, *args, None, (), False, None).scan.series_in == 3
