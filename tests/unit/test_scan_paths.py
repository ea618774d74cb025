"""The receive path's per-series loop: the compiled accelerator, the pure-Python loop and a
straightforward reference (decode everything with protobuf, relabel, encode) give the same
content, and the two loops the same errors for malformed bodies."""

from __future__ import annotations

import os
import random
import re
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rwrouter.errors import DecodeError
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing import Route, RoutedRequest, Router
from rwrouter.routing import router as router_module
from rwrouter.routing.cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CACHE_MAX_AGE,
    DEFAULT_CACHE_SIZE,
    Cache,
    Entry,
    keeps_at,
    new_cache,
    pack_entry,
    slot_at,
    unpack_entry,
)
from rwrouter.routing.outcome import REASONS
from rwrouter.routing.scan import Scan, scan_request_py, signature_py
from rwrouter.routing.tenants import TenantRouter
from rwrouter.wire import codec, remote_pb2, types_pb2
from rwrouter.wire.accelerator import ACCELERATED
from rwrouter.wire.codec import split_series
from rwrouter.wire.walk import encode_varint, read_varint

try:
    from rwrouter.wire import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the build
    _scan = None

needs_accelerator = pytest.mark.skipif(
    _scan is None and not os.environ.get("CI"),
    reason="the compiled accelerator is not built here (CI builds it and runs these)",
)


def compiled(*args: Any) -> Scan:
    assert _scan is not None, "the compiled accelerator was not built"
    return Scan._make(_scan.scan_request(*args))


KEEP_CRITICAL = [
    {
        "source_labels": ["__name__"],
        "action": "keep",
        "regex": "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_MEM_COPY_UTIL|DCGM_FI_PROF_.*",  # noqa: E501
    }
]


def make_routes() -> list[Route]:
    """The benchmark routing (allowlist + fallback), plus a destination that rewrites labels
    and filters exemplars and histograms."""
    return [
        Route("workspace", parse_relabel_configs(KEEP_CRITICAL, "t")),
        Route("selfhosted", fallback=True),
        Route(
            "rewrite",
            parse_relabel_configs(
                [
                    {"target_label": "cluster", "replacement": "c9"},
                    {"action": "labeldrop", "regex": "UUID|pod"},
                ],
                "t",
            ),
            send_exemplars=False,
            send_native_histograms=False,
        ),
    ]


def route_with(scan: Callable[..., Scan], data: bytes, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Route ``data`` with a fresh router whose loop is ``scan``; the result, or the error."""
    monkeypatch.setattr(router_module, "scan_request", scan)
    router = Router(global_rules=(), routes=make_routes())
    try:
        first = router.route(data)
        second = router.route(data)  # the cached outcomes too
    except DecodeError as exc:
        return ("error", type(exc), str(exc))
    assert first == second
    return first


def reference(data: bytes, router: Router | None = None) -> list[list[types_pb2.TimeSeries]]:
    """Decode everything (protobuf), relabel each series with ``router`` (a fresh one of
    :func:`make_routes` by default), encode it again: per destination, the series it gets."""
    router = Router(global_rules=(), routes=make_routes()) if router is None else router
    request = remote_pb2.WriteRequest()
    request.ParseFromString(data)
    out: list[list[types_pb2.TimeSeries]] = [[] for _ in router.routes]
    for ts in request.timeseries:
        labels = tuple(sorted((lab.name, lab.value) for lab in ts.labels if lab.value))
        if not (len(ts.samples) + len(ts.exemplars) + len(ts.histograms)):
            continue
        for i, res in enumerate(router.route_labels(labels)):
            if not isinstance(res, bytes):
                continue
            copy = types_pb2.TimeSeries()
            copy.ParseFromString(res)  # the encoded output labels
            copy.samples.extend(ts.samples)
            route = router.routes[i]
            if route.send_exemplars:
                copy.exemplars.extend(ts.exemplars)
            if route.send_native_histograms:
                copy.histograms.extend(ts.histograms)
            if len(copy.samples) + len(copy.exemplars) + len(copy.histograms):
                out[i].append(copy)
    return out


def content(routed: RoutedRequest) -> list[list[types_pb2.TimeSeries]]:
    out = []
    for share in routed.shares:
        request = remote_pb2.WriteRequest()
        request.ParseFromString(share.body)
        out.append(list(request.timeseries))
    return out


# -- inputs -----------------------------------------------------------------------------------

DCGM_FIELDS = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_POWER_USAGE",
]


def fleet_request(nodes: int, seed: int) -> bytes:
    """A DCGM-shaped request as Prometheus sends it (sorted labels, one sample each)."""
    rnd = random.Random(seed)
    request = remote_pb2.WriteRequest()
    for node in range(nodes):
        for gpu in range(8):
            for name in DCGM_FIELDS:
                labels = {
                    "__name__": name,
                    "Hostname": f"ip-10-0-0-{node}",
                    "UUID": f"GPU-{node}-{gpu}",
                    "gpu": str(gpu),
                    "job": "dcgm-exporter",
                    "pod": f"dcgm-{node}",
                }
                ts = request.timeseries.add()
                for key in sorted(labels):
                    ts.labels.add(name=key, value=labels[key])
                ts.samples.add(value=rnd.random(), timestamp=1_700_000_000_000 + node)
        ts = request.timeseries.add()
        ts.labels.add(name="__name__", value="node_load1")
        ts.labels.add(name="instance", value=f"n{node}")
        ts.samples.add(value=float(node), timestamp=1_700_000_000_000)
    request.metadata.add(type=types_pb2.MetricMetadata.GAUGE, metric_family_name="node_load1")
    return bytes(request.SerializeToString())


label_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)
series_strategy = st.fixed_dictionaries(
    {
        "name": st.sampled_from([*DCGM_FIELDS, "node_load1", "up", ""]),
        "labels": st.dictionaries(
            st.sampled_from(["UUID", "gpu", "job", "pod", "a", "zz"]), label_text, max_size=4
        ),
        "shuffle": st.randoms(use_true_random=False),
        "samples": st.lists(
            st.tuples(st.floats(allow_nan=False), st.integers(-(2**63), 2**63 - 1)), max_size=3
        ),
        "exemplars": st.integers(0, 2),
        "histograms": st.integers(0, 2),
    }
)


def build_request(series: Sequence[dict[str, Any]]) -> bytes:
    request = remote_pb2.WriteRequest()
    for s in series:
        ts = request.timeseries.add()
        labels = list({**s["labels"], "__name__": s["name"]}.items())
        s["shuffle"].shuffle(labels)
        for name, value in labels:
            ts.labels.add(name=name, value=value)
        for value, timestamp in s["samples"]:
            ts.samples.add(value=value, timestamp=timestamp)
        for i in range(s["exemplars"]):
            ex = ts.exemplars.add(value=float(i), timestamp=i)
            ex.labels.add(name="trace_id", value=f"t{i}")
        for i in range(s["histograms"]):
            ts.histograms.add(count_int=i, sum=1.0, timestamp=i)
    return bytes(request.SerializeToString())


@needs_accelerator
def test_benchmark_workload_routes_identically_on_all_three_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The benchmark's own workload (bench/workload.py, workload.md): every request."""
    from bench.workload import generate

    workload = generate(seed=7, nodes=3, scrapes=1)
    for body in workload.bodies:
        data = snappy.decompress(body)
        fast = route_with(compiled, data, monkeypatch)
        pure = route_with(scan_request_py, data, monkeypatch)
        assert fast == pure
        assert content(fast) == reference(data)


# -- identical output -------------------------------------------------------------------------

WORKLOADS = [("one_node", 1, 1), ("eight_nodes", 8, 2), ("empty", 0, 0)]


@needs_accelerator
@pytest.mark.parametrize(
    ("nodes", "seed"), [w[1:] for w in WORKLOADS], ids=[w[0] for w in WORKLOADS]
)
def test_workload_routes_identically_on_all_three_paths(
    nodes: int, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = fleet_request(nodes, seed)
    fast = route_with(compiled, data, monkeypatch)
    pure = route_with(scan_request_py, data, monkeypatch)
    assert fast == pure
    assert content(fast) == reference(data)
    assert fast.samples_in == 41 * nodes


@needs_accelerator
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(series=st.lists(series_strategy, max_size=8))
def test_random_series_route_identically(
    series: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = build_request(series)
    fast = route_with(compiled, data, monkeypatch)
    pure = route_with(scan_request_py, data, monkeypatch)
    assert fast == pure
    if not isinstance(fast, tuple):  # not an error: the reference agrees on the content
        assert content(fast) == reference(data)


@needs_accelerator
@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    series=st.lists(series_strategy, min_size=1, max_size=4),
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
def test_malformed_bodies_give_the_same_errors(
    series: list[dict[str, Any]],
    mutations: list[tuple[str, int, int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = bytearray(build_request(series))
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
    fast = route_with(compiled, bytes(data), monkeypatch)
    pure = route_with(scan_request_py, bytes(data), monkeypatch)
    assert fast == pure


MALFORMED = [
    ("truncated_varint", b"\x0a\xff"),
    ("series_not_a_message", b"\x08\x01"),
    ("field_zero", b"\x00\x01"),
    ("runs_past_the_end", b"\x0a\x05\x0a\x01"),
    ("wire_type_3", b"\x0b"),
    ("overlong_varint", b"\x0a" + b"\xff" * 11),
    ("label_runs_past_series", b"\x0a\x04\x0a\x09\x0a\x01"),
    ("bad_utf8_label", b"\x0a\x0b\x0a\x09\x0a\x01\xff\x12\x01x\x12\x00"),
    ("bad_metadata", b"\x1a\x02\x10\x80"),
    ("huge_field_number", b"\xf8\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00"),
]


@needs_accelerator
@pytest.mark.parametrize("data", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_known_malformed_bodies_same_error(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = route_with(compiled, data, monkeypatch)
    pure = route_with(scan_request_py, data, monkeypatch)
    assert fast == pure
    assert isinstance(fast, tuple) and fast[0] == "error"


def test_pure_path_selected_by_environment() -> None:
    code = "from rwrouter.wire.accelerator import ACCELERATED; print(ACCELERATED)"
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
    from rwrouter.wire.accelerator import ACCELERATED

    assert (not os.environ.get("RWROUTER_NO_EXTENSIONS")) == ACCELERATED


def test_compressed_workload_is_what_prometheus_sends() -> None:
    """Sanity of the generator: it round-trips through snappy as a remote write body."""
    data = fleet_request(2, 3)
    assert snappy.decompress(snappy.compress(data)) == data


# -- the label codec (the cache's miss path) ----------------------------------------------------

label_sets = st.lists(st.tuples(label_text, label_text), max_size=6)


@needs_accelerator
@settings(max_examples=400, deadline=None)
@given(
    labels=label_sets,
    mutations=st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), max_size=2),
)
def test_label_codec_compiled_equals_pure(
    labels: list[tuple[str, str]], mutations: list[tuple[int, int]]
) -> None:
    assert _scan is not None
    pairs = tuple(labels)
    raw = codec.encode_labels(pairs)
    assert _scan.encode_labels(pairs) == raw
    data = bytearray(raw)
    for at, byte in mutations:  # also malformed: the same result or the same error
        if data:
            data[at % len(data)] = byte
    assert decode_outcome(_scan.decode_labels, bytes(data)) == decode_outcome(
        codec.decode_labels, bytes(data)
    )


def decode_outcome(decode: Callable[[bytes], Any], raw: bytes) -> Any:
    try:
        return decode(raw)
    except DecodeError as exc:
        return ("error", str(exc))


# -- the compact cache entry --------------------------------------------------------------------

entry_items = st.lists(
    st.one_of(
        st.none(),
        st.integers(0, 1),
        st.tuples(st.binary(max_size=40), st.integers(0, 2**32 - 1)),
        st.just("same"),
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=30), raw_items=entry_items)
def test_entry_round_trips(key: bytes, raw_items: list[Any]) -> None:
    items = [(key, 7) if item == "same" else item for item in raw_items]
    entry = pack_entry(key, items)
    assert unpack_entry(key, entry) == items
    same = sum(1 for item in items if isinstance(item, tuple) and item[0] == key)
    assert len(entry) == sum(
        1
        if item is None
        else 2
        if isinstance(item, int)
        else 5
        if item[0] == key
        else 9 + len(item[0])
        for item in items
    )
    assert same >= raw_items.count("same")


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=30), raw_items=entry_items, mask=st.integers(0, 2**6 - 1))
def test_one_slot_and_kept_at_equal_the_unpacked_entry(
    key: bytes, raw_items: list[Any], mask: int
) -> None:
    """slot_at and keeps_at (a series budget's review of misses) read what unpack_entry
    reads, without unpacking the whole entry."""
    items = [(key, 7) if item == "same" else item for item in raw_items]
    entry = pack_entry(key, items)
    assert [slot_at(key, entry, i) for i in range(len(items))] == items
    kept = any(isinstance(item, tuple) for i, item in enumerate(items) if mask >> i & 1)
    assert keeps_at(entry, mask) is kept


# -- the miss path's shortcut for canonical label sets -------------------------------------------

ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=0, max_size=5)
WANTED = (b"__name__", b"gpu", b"job")


@needs_accelerator
@settings(max_examples=400, deadline=None)
@given(
    labels=st.dictionaries(
        st.sampled_from(["__name__", "Hostname", "gpu", "job", "a", "zz", ""]),
        st.one_of(ascii_text, label_text),
        max_size=5,
    ),
    shuffle=st.randoms(use_true_random=False),
    mutation=st.one_of(st.none(), st.tuples(st.integers(0, 300), st.integers(0, 255))),
)
def test_signature_compiled_equals_pure_and_means_canonical(
    labels: dict[str, str], shuffle: random.Random, mutation: tuple[int, int] | None
) -> None:
    assert _scan is not None
    pairs = list(labels.items())
    shuffle.shuffle(pairs)
    data = bytearray(codec.encode_labels(tuple(pairs)))
    if mutation and data:
        data[mutation[0] % len(data)] = mutation[1]
    raw = bytes(data)
    values = _scan.signature(raw, WANTED)
    assert values == signature_py(raw, WANTED)
    if values is not None:  # canonical: decoding keeps the order, encoding gives raw back
        decoded = codec.decode_labels(raw)
        assert codec.encode_labels(decoded) == raw
        got = dict(decoded)
        assert values == tuple(
            got[n.decode()].encode() if n.decode() in got else None for n in WANTED
        )


FILTER_ROUTES = [
    Route("a", parse_relabel_configs(KEEP_CRITICAL, "t")),
    Route(
        "b",
        parse_relabel_configs(
            [{"action": "drop", "source_labels": ["job", "gpu"], "regex": "dcgm;[0-3]"}], "t"
        ),
    ),
    Route(
        "c",
        parse_relabel_configs(
            [{"action": "keepequal", "source_labels": ["gpu"], "target_label": "device"}], "t"
        ),
    ),
    Route("rest", fallback=True),
]


@settings(max_examples=300, deadline=None)
@given(series=st.lists(series_strategy, min_size=1, max_size=6))
def test_template_shortcut_gives_the_full_paths_entries(series: list[dict[str, Any]]) -> None:
    data = build_request(series)
    shortcut = Router(global_rules=(), routes=FILTER_ROUTES)
    assert shortcut._signature_names is not None  # filter-only: the shortcut is on
    full = Router(global_rules=(), routes=FILTER_ROUTES)
    full._signature_names = None
    for _ in range(2):  # the second time from templates learned by other series
        for router in (shortcut, full):
            router._young = new_cache()  # forget the label sets, keep the templates
        try:
            first = shortcut.route(data)
        except DecodeError as exc:
            with pytest.raises(DecodeError, match=re.escape(str(exc))):
                full.route(data)
            return
        assert first == full.route(data)
        assert dict(shortcut._young.items()) == dict(full._young.items())


# -- per tenant (rwrouter.routing.tenants): the same three paths agree for every tenant -------

TENANT_ROUTES = [
    Route(
        "a",
        parse_relabel_configs(
            [{"source_labels": ["__tenant__"], "regex": "team-a", "action": "keep"}], "t"
        ),
    ),
    Route(
        "b",
        parse_relabel_configs(
            [
                {"source_labels": ["__tenant__"], "target_label": "tenant"},
                {"action": "labeldrop", "regex": "UUID|pod"},
            ],
            "t",
        ),
        send_exemplars=False,
    ),
    Route("rest", fallback=True),
]
FILTER_TENANT_ROUTES = [
    *FILTER_ROUTES[:-1],
    Route(
        "t",
        parse_relabel_configs(
            [{"source_labels": ["__tenant__", "job"], "regex": "team-a;.*", "action": "keep"}],
            "t",
        ),
    ),
    FILTER_ROUTES[-1],
]
TENANTS = st.sampled_from([None, "team-a", "team-b"])


def _own_tenant(s: dict[str, Any]) -> dict[str, Any]:
    """Some series (one exemplar) carry a ``__tenant__`` label of their own."""
    if s["exemplars"] != 1:
        return s
    return {**s, "labels": {**s["labels"], "__tenant__": s["labels"].get("a", "team-a")}}


tenant_series_strategy = series_strategy.map(_own_tenant)


def tenant_router(routes: list[Route], tenant: str | None) -> TenantRouter:
    return TenantRouter(
        tenant=tenant,
        global_rules=(),
        routes=routes,
        cache_size=DEFAULT_CACHE_SIZE,
        cache_bytes=DEFAULT_CACHE_BYTES,
        cache_max_age=DEFAULT_CACHE_MAX_AGE,
    )


def route_tenant_with(
    scan: Callable[..., Scan], data: bytes, tenant: str | None, monkeypatch: pytest.MonkeyPatch
) -> Any:
    monkeypatch.setattr(router_module, "scan_request", scan)
    router = tenant_router(TENANT_ROUTES, tenant)
    try:
        first = router.route(data)
        second = router.route(data)
    except DecodeError as exc:
        return ("error", type(exc), str(exc))
    assert first == second
    return first


@needs_accelerator
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(series=st.lists(tenant_series_strategy, max_size=8), tenant=TENANTS)
def test_random_series_route_identically_per_tenant(
    series: list[dict[str, Any]], tenant: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = build_request(series)
    fast = route_tenant_with(compiled, data, tenant, monkeypatch)
    pure = route_tenant_with(scan_request_py, data, tenant, monkeypatch)
    assert fast == pure
    if not isinstance(fast, tuple):
        assert content(fast) == reference(data, tenant_router(TENANT_ROUTES, tenant))
        for share in content(fast):
            assert all(lab.name != "__tenant__" for ts in share for lab in ts.labels)


@settings(max_examples=300, deadline=None)
@given(series=st.lists(tenant_series_strategy, min_size=1, max_size=6), tenant=TENANTS)
def test_template_shortcut_gives_the_full_paths_entries_per_tenant(
    series: list[dict[str, Any]], tenant: str | None
) -> None:
    """With a rule reading __tenant__, a sender's own __tenant__ (replaced) never takes the
    template of a set without one."""
    data = build_request(series)
    shortcut = tenant_router(FILTER_TENANT_ROUTES, tenant)
    assert shortcut._signature_names is not None and b"__tenant__" in shortcut._signature_names
    full = tenant_router(FILTER_TENANT_ROUTES, tenant)
    full._signature_names = None
    for _ in range(2):
        for router in (shortcut, full):
            router._young = new_cache()
        try:
            first = shortcut.route(data)
        except DecodeError as exc:
            with pytest.raises(DecodeError, match=re.escape(str(exc))):
                full.route(data)
            return
        assert first == full.route(data)
        assert dict(shortcut._young.items()) == dict(full._young.items())


def test_rules_that_change_labels_turn_the_shortcut_off() -> None:
    routes = [Route("a", parse_relabel_configs([{"target_label": "x", "replacement": "y"}], "t"))]
    assert Router(global_rules=(), routes=routes)._signature_names is None
    assert Router(global_rules=(), routes=[Route("a")])._signature_names == (b"__name__",)


def test_template_shortcut_on_the_workload_is_taken_and_equal() -> None:
    data = fleet_request(4, 5)
    shortcut = Router(global_rules=(), routes=FILTER_ROUTES)
    full = Router(global_rules=(), routes=FILTER_ROUTES)
    full._signature_names = None
    assert shortcut.route(data) == full.route(data)
    assert dict(shortcut._young.items()) == dict(full._young.items())
    assert 0 < len(shortcut._templates) <= len(DCGM_FIELDS) * 8 + 1  # per name and gpu


# (name, label sets in the order they are first seen): the template shortcut must not let one
# decide the other's outcome (the empty set is dropped as "relabel", a set without __name__
# as "invalid", and both have no value for every label the rules read).
TEMPLATE_ORDER_CASES = [
    ("empty_set_then_no_name", [(), (("a", "x"),)]),
    ("no_name_then_empty_set", [(("a", "x"),), ()]),
    ("empty_set_then_no_name_then_named", [(), (("zz", "1"),), (("__name__", "up"),)]),
]


@pytest.mark.parametrize(
    ("labels_seen",),
    [c[1:] for c in TEMPLATE_ORDER_CASES],
    ids=[c[0] for c in TEMPLATE_ORDER_CASES],
)
def test_template_shortcut_keeps_empty_and_nameless_sets_apart(
    labels_seen: list[tuple[tuple[str, str], ...]],
) -> None:
    shortcut = Router(global_rules=(), routes=FILTER_ROUTES)
    assert shortcut._signature_names is not None
    for labels in labels_seen:
        data = frame(codec.encode_labels(labels) + ONE_SAMPLE)
        full = Router(global_rules=(), routes=FILTER_ROUTES)
        full._signature_names = None
        assert shortcut.route(data).dropped == full.route(data).dropped, labels


# -- regressions: inputs on which the compiled functions once differed from the references ------

UP = codec.encode_labels((("__name__", "up"),))
X = codec.encode_labels((("__name__", "x"),))
ONE_SAMPLE = b"\x12\x09\x09" + b"\x00" * 8


def frame(payload: bytes) -> bytes:
    return b"\x0a" + bytes((len(payload),)) + payload


def label(payload: bytes) -> bytes:
    return b"\x0a" + bytes((len(payload),)) + payload


def alternate_drops(ndest: int, first: int) -> bytes:
    return b"".join(bytes((3, (first + i) % 2)) for i in range(ndest))


def padded_series(payload: bytes, extra: int) -> bytes:
    """A series field whose length varint takes ``extra`` bytes more than it needs (valid
    protobuf: a parser reads the same length)."""
    n, out = len(payload), bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out += bytes((n | 0x80,)) + b"\x80" * (extra - 1) + b"\x00" if extra else bytes((n,))
    return b"\x0a" + bytes(out) + payload


GPU = codec.encode_labels((("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", "0")))
NODE = codec.encode_labels((("__name__", "node_load1"), ("instance", "n1")))
LONG = codec.encode_labels((("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("instance", "n" * 200)))

# (name, request): series fields framed as a parser reads them but not as rwrouter writes them
# (the length in more bytes than it needs): every path sends them re-framed, the same bytes.
FRAMINGS = [
    ("padded_one_byte", padded_series(GPU + ONE_SAMPLE, 1)),
    (
        "padded_between_plain",
        frame(NODE + ONE_SAMPLE) + padded_series(GPU + ONE_SAMPLE, 2) + frame(GPU + ONE_SAMPLE),
    ),
    ("padded_two_bytes", padded_series(LONG + ONE_SAMPLE, 1)),
    ("plain_two_bytes", padded_series(LONG + ONE_SAMPLE, 0)),
    ("padded_labels_only", padded_series(NODE, 1) + frame(NODE + ONE_SAMPLE)),
    # a label after the samples: its key is all its labels, not the leading ones (the same
    # leading labels as the series before it, whose outcome it once took)
    (
        "label_after_a_sample",
        frame(GPU + ONE_SAMPLE) + frame(GPU + ONE_SAMPLE + codec.encode_labels((("job", "x"),))),
    ),
]


@needs_accelerator
@pytest.mark.parametrize("data", [f[1] for f in FRAMINGS], ids=[f[0] for f in FRAMINGS])
def test_unusual_framing_routes_identically(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """(The routes of :func:`make_routes` include one that rewrites labels and drops some.)"""
    fast = route_with(compiled, data, monkeypatch)
    pure = route_with(scan_request_py, data, monkeypatch)
    assert fast == pure
    assert content(fast) == reference(data)
    for share in fast.shares:  # re-framed: each series' length in the fewest bytes
        pos = 0
        while pos < len(share.body):
            assert share.body[pos] == 0x0A
            length, at = read_varint(share.body, pos + 1, len(share.body))
            assert at - pos - 1 == len(encode_varint(length))
            pos = at + length


# (name, data, destinations, young, old): the scan of ``data`` with these caches (and a miss
# that caches every label set as dropped by all destinations).
SCAN_REGRESSIONS: list[tuple[str, bytes, int, dict[bytes, bytes], dict[bytes, bytes]]] = [
    # an unknown top-level field whose varint value is over 64 bits (10 bytes: the reference
    # accepts it) after a series answered by the old generation: the promotion was not counted
    (
        "overlong_varint_in_unknown_field_after_promotion",
        frame(UP + ONE_SAMPLE) + b"\x10" + b"\xff" * 9 + b"\x7f",
        1,
        {},
        {UP: b"\x01\0\0\0\0"},
    ),
    (
        "overlong_varint_after_a_missed_series",
        frame(X + ONE_SAMPLE) + b"\x78" + b"\xff" * 9 + b"\x02",
        2,
        {},
        {},
    ),
    # more than 64 (destination, reason) kinds of dropped samples in one request: the
    # promotion and the miss were counted again by a second scan
    (
        "eighty_drop_kinds",
        frame(UP + ONE_SAMPLE) + frame(X + ONE_SAMPLE),
        40,
        {},
        {UP: alternate_drops(40, 0)},
    ),
    # series with nothing after their labels (the compiled loop takes them itself): looked
    # up, counted as received, never sent; an empty one is the empty label set
    (
        "labels_only_and_empty_series",
        frame(UP) + frame(b"") + frame(X + ONE_SAMPLE) + frame(UP) + frame(b"") + frame(X),
        2,
        {},
        {X: b"\x01\0\0\0\0\x00"},
    ),
    ("labels_only_key_goes_to_miss", frame(UP) + frame(label(b"\x0a\x01\xff\x12\x01a")), 1, {}, {}),
]


@needs_accelerator
@pytest.mark.parametrize(
    ("data", "ndest", "young", "old"),
    [r[1:] for r in SCAN_REGRESSIONS],
    ids=[r[0] for r in SCAN_REGRESSIONS],
)
def test_scan_regressions_compiled_equals_pure(
    data: bytes, ndest: int, young: dict[bytes, bytes], old: dict[bytes, bytes]
) -> None:
    def run(scan: Callable[..., Scan]) -> Any:
        caches = (dict(young), dict(old))
        misses: list[bytes] = []

        def miss(key: bytes) -> bytes:
            misses.append(key)
            caches[0][key] = entry = alternate_drops(ndest, 1)
            return entry

        try:
            result: Any = scan(data, *caches, miss, (False,) * ndest, None, REASONS)
        except DecodeError as exc:
            result = ("error", str(exc))
        return result, caches, misses

    assert run(compiled) == run(scan_request_py)


# (name, raw label fields): decode_labels gives the same labels or the same error.
DECODE_REGRESSIONS = [
    # a Label's name (or value) field twice, the first one invalid UTF-8: the reference checks
    # every occurrence, the compiled one only the last
    ("repeated_name_first_invalid_utf8", label(b"\x0a\x01\xff\x0a\x01a\x12\x01b")),
    ("repeated_value_first_invalid_utf8", label(b"\x0a\x01a\x12\x01\xff\x12\x01b")),
    ("repeated_name_after_an_empty_value", label(b"\x12\x00\x0a\x01\xff\x0a\x01a")),
    ("repeated_valid_fields", label(b"\x0a\x01a\x12\x01b\x0a\x01c\x12\x01d")),
]


@needs_accelerator
@pytest.mark.parametrize(
    "raw", [r[1] for r in DECODE_REGRESSIONS], ids=[r[0] for r in DECODE_REGRESSIONS]
)
def test_decode_regressions_compiled_equals_pure(raw: bytes) -> None:
    assert _scan is not None
    assert decode_outcome(_scan.decode_labels, raw) == decode_outcome(codec.decode_labels, raw)


# (name, shards): split_shards with a shard count whose per-shard arrays cannot be allocated
# raises MemoryError (as the reference does, eventually) instead of overflowing the size of
# its allocation or taking the hash modulo a truncated (zero) count: a crash.
HUGE_SHARDS = [
    ("two_to_the_62", 2**62),
    ("two_to_the_62_plus_1", 2**62 + 1),
    ("two_to_the_32", 2**32),
    ("ssize_max", 2**63 - 1),
]


@needs_accelerator
@pytest.mark.parametrize("shards", [r[1] for r in HUGE_SHARDS], ids=[r[0] for r in HUGE_SHARDS])
def test_split_shards_huge_count_is_a_memory_error(shards: int) -> None:
    assert _scan is not None
    index = b"\x02\0\0\0\x01\0\0\0\x05\0\0\0"
    with pytest.raises(MemoryError):
        _scan.split_shards(b"ab", index, shards)


# (name, labels): encode_labels of arguments other than a tuple of (str, str) tuples gives the
# reference's result or its error (it raised TypeError for what the reference encodes, or
# for what it refuses with AttributeError/ValueError).
ENCODE_REGRESSIONS: list[tuple[str, Callable[[], Any]]] = [
    ("list_pairs", lambda: [["__name__", "up"], ["a", "b"]]),
    ("two_character_string_pair", lambda: ["ab"]),
    ("generator", lambda: ((n, v) for n, v in (("__name__", "up"), ("a", "b")))),
    ("int_value", lambda: (("a", 1),)),
    ("bytes_name", lambda: ((b"a", "b"),)),
    ("three_tuple", lambda: (("a", "b", "c"),)),
    ("one_tuple", lambda: (("a",),)),
    ("surrogate_name", lambda: (("\ud800", "b"),)),
]


@needs_accelerator
@pytest.mark.parametrize(
    "make", [r[1] for r in ENCODE_REGRESSIONS], ids=[r[0] for r in ENCODE_REGRESSIONS]
)
def test_encode_regressions_compiled_equals_pure(make: Callable[[], Any]) -> None:
    assert _scan is not None
    assert call_outcome(_scan.encode_labels, make()) == call_outcome(codec.encode_labels, make())


def call_outcome(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # the same type and message on both paths
        return ("error", type(exc), str(exc))


INDEX_2 = b"\x02\0\0\0\x01\0\0\0\x05\0\0\0"

# (name, compiled, pure, arguments): the queue side's functions on arguments of other types
# (they raised TypeError for bytes-like arguments the references take).
QUEUE_REGRESSIONS: list[tuple[str, str, str, tuple[Any, ...]]] = [
    ("index_totals_bytearray", "index_totals", "index_totals_py", (bytearray(INDEX_2),)),
    ("index_totals_memoryview", "index_totals", "index_totals_py", (memoryview(INDEX_2),)),
    ("index_totals_str", "index_totals", "index_totals_py", ("abc",)),
    (
        "split_shards_bytearray_body",
        "split_shards",
        "split_shards_py",
        (bytearray(b"ab"), INDEX_2, 2),
    ),
    (
        "split_shards_bytearray_index",
        "split_shards",
        "split_shards_py",
        (b"ab", bytearray(INDEX_2), 2),
    ),
    ("split_shards_bool_shards", "split_shards", "split_shards_py", (b"ab", INDEX_2, True)),
    ("split_shards_float_shards", "split_shards", "split_shards_py", (b"ab", INDEX_2, 2.0)),
    ("split_shards_two_arguments", "split_shards", "split_shards_py", (b"ab", INDEX_2)),
    ("named_frames_bytearray", "named_frames", "named_frames_list", (bytearray(b"ab"), INDEX_2)),
    ("named_frames_index_past_body", "named_frames", "named_frames_list", (b"a", INDEX_2)),
    ("named_frames_ragged_index", "named_frames", "named_frames_list", (b"ab", INDEX_2[:5])),
    ("named_frames_one_argument", "named_frames", "named_frames_list", (b"ab",)),
]

_NAME = b"\x0a\x08__name__\x12"


@st.composite
def framed_share(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A share body and its index: frames with a framed __name__ Label somewhere (or none),
    length varints cut short or too long, names repeated from frame to frame."""
    body, index = b"", b""
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from([b"", b"gpu_util", b"gpu_util", b"\xff\x80", b"x" * 200]))
        size = len(name) if draw(st.booleans()) else draw(st.integers(0, 300))
        varint = codec_varint(size)
        if draw(st.booleans()):
            varint = varint[:1]  # cut short: the continuation bit of a longer one stays
        label = b"" if draw(st.booleans()) else _NAME + varint + name
        frame = draw(st.binary(max_size=4)) + label + draw(st.binary(max_size=4))
        body += frame
        index += struct.pack(
            "<III", len(frame), draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**32 - 1))
        )
    return body, index


def codec_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


@needs_accelerator
@settings(max_examples=300, deadline=None)
@given(share=framed_share())
def test_named_frames_compiled_equals_pure(share: tuple[bytes, bytes]) -> None:
    from rwrouter.wire import index

    assert _scan is not None
    body, idx = share
    assert _scan.named_frames(body, idx) == index.named_frames_list(body, idx)


@needs_accelerator
@pytest.mark.parametrize(
    ("fast", "pure", "args"),
    [r[1:] for r in QUEUE_REGRESSIONS],
    ids=[r[0] for r in QUEUE_REGRESSIONS],
)
def test_queue_regressions_compiled_equals_pure(
    fast: str, pure: str, args: tuple[Any, ...]
) -> None:
    from rwrouter.wire import index

    assert call_outcome(getattr(_scan, fast), *args) == call_outcome(getattr(index, pure), *args)


# -- the compiled cache generation ----------------------------------------------------------------


@needs_accelerator
@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["set", "get", "in", "clear"]),
            st.binary(max_size=12),
            st.binary(max_size=12),  # up to 8 bytes are kept in the slot, longer ones apart
        ),
        max_size=300,
    )
)
def test_label_cache_behaves_like_a_dict(ops: list[tuple[str, bytes, bytes]]) -> None:
    """Including a key set again to a value kept the other way (in the slot / as bytes)."""
    assert _scan is not None
    cache, model = _scan.LabelCache(), {}
    for op, key, value in ops:
        if op == "set":
            cache[key] = value
            model[key] = value
        elif op == "get":
            assert cache.get(key) == model.get(key)
            assert cache.get(key, b"d") == model.get(key, b"d")
        elif op == "in":
            assert (key in cache) == (key in model)
        else:
            cache.clear()
            model.clear()
        assert len(cache) == len(model)
    assert sorted(value for _, value in cache.items()) == sorted(model.values())
    assert all(cache[key] == value for key, value in model.items())
    assert all(len(digest) == 16 for digest, _ in cache.items())  # keys are kept as digests


# id, the values one key is set to in turn: kept in the slot (1-8 bytes) or as a bytes object
VALUE_KINDS = [
    ("in_slot_then_object", [b"\x00", b"123456789"]),
    ("object_then_in_slot", [b"123456789", b"\x00\x00"]),
    ("empty_is_an_object", [b"", b"x", b""]),
    ("eight_bytes_in_slot", [b"\xff" * 8, b"\x00" * 8]),
]


@needs_accelerator
@pytest.mark.parametrize("values", [v[1] for v in VALUE_KINDS], ids=[v[0] for v in VALUE_KINDS])
def test_label_cache_values_of_every_size(values: list[bytes]) -> None:
    """Every value reads back exactly, through a resize too, whichever way it is kept."""
    assert _scan is not None
    cache = _scan.LabelCache()
    for value in values:
        cache[b"key"] = value
        assert cache[b"key"] == value and cache.get(b"key") == value and len(cache) == 1
    for i in range(3000):  # resizes: the slots move
        cache[b"k%d" % i] = values[i % len(values)]
    assert cache[b"key"] == values[-1]
    assert all(cache[b"k%d" % i] == values[i % len(values)] for i in range(3000))
    assert sorted(v for _, v in cache.items()).count(values[-1]) >= 1


@needs_accelerator
def test_label_cache_grows_and_refuses_what_it_does_not_hold() -> None:
    assert _scan is not None
    cache = _scan.LabelCache()
    for i in range(100_000):  # many resizes
        cache[b"labels-%d" % i] = b"%d" % i
    assert len(cache) == 100_000
    assert all(cache.get(b"labels-%d" % i) == b"%d" % i for i in range(0, 100_000, 997))
    assert cache.get(b"labels-100000") is None and "x" not in cache
    with pytest.raises(TypeError):
        cache["str key"] = b"x"
    with pytest.raises(TypeError):
        cache[b"k"] = "str value"
    with pytest.raises(KeyError):
        cache[b"absent"]
    with pytest.raises(TypeError):
        del cache[b"labels-1"]


@needs_accelerator
@pytest.mark.parametrize(
    ("expected", "error"),
    [(0, None), (3_000, None), (-1, ValueError), (1 << 40, ValueError), ("3", TypeError)],
    ids=["none", "some", "negative", "too_many", "not_a_number"],
)
def test_label_cache_room_for_expected_entries(
    expected: Any, error: type[Exception] | None
) -> None:
    """LabelCache(expected): room from the start (the routing cache's next young generation);
    it still grows past it and holds what it is given."""
    assert _scan is not None
    if error is not None:
        with pytest.raises(error):
            _scan.LabelCache(expected)
        return
    cache = _scan.LabelCache(expected)
    for i in range(2 * expected + 10):
        cache[b"k%d" % i] = b"%d" % i
    assert len(cache) == 2 * expected + 10
    assert all(cache[b"k%d" % i] == b"%d" % i for i in range(0, 2 * expected + 10, 7))


def _label_cache_clear(cache: Any) -> None:
    cache.clear()


def _label_cache_insert(cache: Any) -> None:
    cache[b"one more"] = b"x"  # the 513th entry: the slot array doubles first


@needs_accelerator
@pytest.mark.parametrize(
    "operation", [_label_cache_clear, _label_cache_insert], ids=["clear", "insert_that_resizes"]
)
def test_label_cache_without_memory_stays_as_it_was(operation: Callable[[Any], None]) -> None:
    """An operation that allocates a new slot array (clear, an insert that resizes) and cannot
    raises MemoryError and leaves the cache whole (its entries, and usable after), never
    without slots. CPython's fault injection (``_testcapi.set_nomemory``) fails the next
    allocation, which is that array's."""
    testcapi = pytest.importorskip("_testcapi")
    assert _scan is not None
    cache = _scan.LabelCache()
    entries = {b"labels-%d" % i: b"%d" % i for i in range(512)}  # full up to the resize point
    for key, value in entries.items():
        cache[key] = value
    with pytest.raises(MemoryError):
        testcapi.set_nomemory(0, 1)  # from here: nothing allocates before the slot array
        try:
            operation(cache)
        finally:
            testcapi.remove_mem_hooks()
    assert len(cache) == len(entries) and b"one more" not in cache
    assert all(cache.get(key) == value for key, value in entries.items())
    operation(cache)  # with memory: done
    assert len(cache) in (0, len(entries) + 1)


@needs_accelerator
@pytest.mark.parametrize(("nodes", "seed"), [(3, 1), (1, 9)], ids=["three_nodes", "one_node"])
def test_compiled_loop_same_with_dict_or_label_cache_generations(nodes: int, seed: int) -> None:
    assert _scan is not None
    data = fleet_request(nodes, seed)
    keys = [split_series(ts.SerializeToString()).labels for ts in _parse_raw(data).timeseries]
    results = []
    makers: tuple[Callable[[], Cache], ...] = (dict[bytes, Entry], _scan.LabelCache)
    for make in makers:
        router = Router(global_rules=(), routes=make_routes())
        router._young, router._old = make(), make()
        out = [router.route(data, now=0.0), router.route(data, now=0.0)]
        router._rotate(1.0)  # everything old: the next request promotes it
        out.append(router.route(data, now=1.0))
        cached = sorted(router._young.get(key) or b"" for key in keys)
        results.append((out, router.hits, router.misses, router.cached_bytes, cached))
    assert results[0] == results[1]


def _parse_raw(data: bytes) -> remote_pb2.WriteRequest:
    request = remote_pb2.WriteRequest()
    request.ParseFromString(data)
    return request


def count_miss_calls(router: Router) -> list[bytes]:
    """The label sets ``router`` asks its Python ``_miss`` about from now on (the list grows
    as it routes; the misses are still answered)."""
    calls: list[bytes] = []
    python_miss = router._miss

    def counted_miss(raw_labels: bytes) -> Entry:
        calls.append(raw_labels)
        return python_miss(raw_labels)

    router._miss = counted_miss  # type: ignore[method-assign]
    return calls


def young_values(router: Router) -> list[bytes]:
    """The outcomes in ``router``'s young generation, sorted (its keys are digests)."""
    return sorted(value for _, value in router._young.items())


@needs_accelerator
@pytest.mark.skipif(not ACCELERATED, reason="the router runs the pure loop (no extension)")
def test_compiled_loop_applies_templates_itself_with_the_same_entries_and_counters() -> None:
    data = fleet_request(6, 2)
    shortcut = Router(global_rules=(), routes=FILTER_ROUTES)
    full = Router(global_rules=(), routes=FILTER_ROUTES)
    full._signature_names = None
    calls = count_miss_calls(shortcut)
    out = shortcut.route(data)
    assert out == full.route(data)
    assert (shortcut.misses, shortcut.hits) == (full.misses, full.hits)
    assert shortcut.cached_bytes == full.cached_bytes and len(shortcut) == len(full)
    assert len(calls) <= len(shortcut._templates) + 1 < shortcut.misses  # the rest: in C
    assert young_values(shortcut) == young_values(full)


@needs_accelerator
@pytest.mark.skipif(not ACCELERATED, reason="the router runs the pure loop (no extension)")
def test_compiled_loop_routes_misses_itself_with_the_same_entries_and_counters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rules that change labels (no template shortcut): the compiled loop answers misses with
    route_labels (Router._scan's plan) and never calls miss(); the pure loop calls miss() for
    each. Same output, counters, cache size and entries."""
    data = fleet_request(6, 2)
    in_c = Router(global_rules=(), routes=make_routes())
    assert in_c._plan is not None and not in_c._signature_names
    calls = count_miss_calls(in_c)
    out = in_c.route(data)
    monkeypatch.setattr(router_module, "scan_request", scan_request_py)
    pure = Router(global_rules=(), routes=make_routes())
    assert out == pure.route(data)
    assert calls == [] and in_c.misses > 0
    assert (in_c.misses, in_c.hits) == (pure.misses, pure.hits)
    assert in_c.cached_bytes == pure.cached_bytes and len(in_c) == len(pure)
    assert young_values(in_c) == young_values(pure)


# id, the routes: outcomes of 2 destinations fit a LabelCache slot (up to 8 bytes); 3 do not
ROUTE_SETS = [
    (
        "keep_and_fallback",
        lambda: [Route("a", parse_relabel_configs(KEEP_CRITICAL, "t")), Route("b", fallback=True)],
    ),
    ("one_destination", lambda: [Route("all")]),
    ("three_with_rewrite", make_routes),
]


@needs_accelerator
@pytest.mark.skipif(not ACCELERATED, reason="the router runs the pure loop (no extension)")
@pytest.mark.parametrize("routes", [r[1] for r in ROUTE_SETS], ids=[r[0] for r in ROUTE_SETS])
def test_cached_outcomes_route_identically(
    routes: Callable[[], list[Route]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request routed from misses, then from the young generation, then (after a rotation)
    from the old one: the compiled loop, reading outcomes where the cache keeps them, gives
    what the pure loop gives, and the same each time."""
    data = fleet_request(4, 3)
    results = {}
    for name, scan in (("compiled", compiled), ("pure", scan_request_py)):
        monkeypatch.setattr(router_module, "scan_request", scan)
        router = Router(global_rules=(), routes=routes())
        first, young = router.route(data), router.route(data)
        router._rotate(0.0)
        old = router.route(data)
        assert first == young == old
        results[name] = (first, router.hits, router.misses, len(router))
    assert results["compiled"] == results["pure"]
